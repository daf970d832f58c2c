//! Who a dataset's guarantee protects and how many of them there are: its *privacy unit* (a
//! record, a user, a user-day…: what neighbouring datasets differ by) and its size, both given at
//! creation and fixed (the guarantee's meaning may not change under the units already charged).
//!
//! The unit is named in every report ("μ-GDP per user"): a figure without its unit is ambiguous,
//! and a record-level guarantee read as a user-level one is the common overstatement (Ponomareva
//! et al., "How to DP-fy ML", JAIR 2023, §4.2). The size bounds a run's declared sampler: batches
//! cannot be drawn from more records than the dataset has.

use crate::accountant::json::{self, Fields, InputError, JsonPath};
use serde::{Deserialize, Serialize};

/// The unit when none was given.
pub const DEFAULT_PRIVACY_UNIT: &str = "record";

/// A dataset's population as given (and stored, as JSON).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Population {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub privacy_unit: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
}

impl Population {
    /// Reads the optional `privacy_unit` (1–64 characters from a–z, 0–9, `-`, `_`, starting with
    /// a letter: `record`, `user`, `user-day`) and `size` (a whole number ≥ 1) of a creation body.
    pub fn from_fields(f: &mut Fields<'_>) -> Result<Population, InputError> {
        let privacy_unit = match f.optional("privacy_unit") {
            None => None,
            Some((x, p)) => Some(unit_name(json::string(x, &p)?, &p)?),
        };
        let size = match f.optional("size") {
            None => None,
            Some((x, p)) => Some(json::integer(x, &p, 1)?),
        };
        Ok(Population { privacy_unit, size })
    }

    /// The unit's name (the default when none was given).
    pub fn unit(&self) -> &str {
        self.privacy_unit.as_deref().unwrap_or(DEFAULT_PRIVACY_UNIT)
    }

    /// As stored; `None` when nothing was given.
    pub fn stored(&self) -> Option<String> {
        (self != &Population::default())
            .then(|| serde_json::to_string(self).expect("a population serialises"))
    }

    /// From the stored column (`None`: nothing given); `None` when it cannot be read.
    pub fn of_stored(s: Option<&str>) -> Option<Population> {
        match s {
            None => Some(Population::default()),
            Some(t) => serde_json::from_str(t).ok(),
        }
    }

    /// A block's: the parent's unit; its size is not known.
    pub fn of_block(&self) -> Population {
        Population {
            privacy_unit: self.privacy_unit.clone(),
            size: None,
        }
    }
}

fn unit_name(s: &str, p: &JsonPath) -> Result<String, InputError> {
    let ok = (1..=64).contains(&s.len())
        && s.starts_with(|c: char| c.is_ascii_lowercase())
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
    if ok {
        Ok(s.to_owned())
    } else {
        Err(InputError::new(
            p,
            format!(
                "must be 1-64 characters from a-z, 0-9, '-' and '_', starting with a letter \
                 (record, user, user-day), got {:?}",
                s.chars().take(70).collect::<String>()
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: serde_json::Value) -> Result<Population, InputError> {
        let root = JsonPath::root();
        let mut f = Fields::new(&v, &root)?;
        Population::from_fields(&mut f)
    }

    #[test]
    fn units_and_sizes_are_read_stored_and_inherited() {
        let p = parse(json!({"privacy_unit": "user-day", "size": 60000})).unwrap();
        assert_eq!(p.unit(), "user-day");
        assert_eq!(
            Population::of_stored(p.stored().as_deref()),
            Some(p.clone())
        );
        assert_eq!(Population::of_stored(None), Some(Population::default()));
        assert_eq!(Population::of_stored(Some("{")), None);
        assert_eq!(p.of_block().size, None);
        assert_eq!(parse(json!({})).unwrap().stored(), None);
        assert_eq!(Population::default().unit(), "record");
        for bad in [
            json!({"privacy_unit": "User"}),
            json!({"privacy_unit": ""}),
            json!({"privacy_unit": "a b"}),
            json!({"size": 0}),
        ] {
            assert!(parse(bad).is_err());
        }
    }
}
