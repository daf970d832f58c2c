//! Field-by-field parsing of JSON input into validated types, with errors that name the JSON path.
//!
//! serde's derive reports the *first* problem without a reliable path once tagged unions are involved,
//! so the edge of the accountant walks a `serde_json::Value` itself: every accessor takes the path of
//! the value it reads, every rejection says which field and why, and objects reject fields nobody
//! asked for.

use serde_json::{Map, Value};
use std::fmt;

/// A rejected input: the JSON path of the offending value (`$.events[2].noise_multiplier`) and the reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {reason}")]
pub struct InputError {
    /// JSONPath-style location of the bad value, rooted at `$`.
    pub path: String,
    /// Human-readable reason, e.g. "must be a finite number > 0, got -1".
    pub reason: String,
}

impl InputError {
    pub fn new(path: &JsonPath, reason: impl Into<String>) -> Self {
        InputError {
            path: path.to_string(),
            reason: reason.into(),
        }
    }
}

/// A location inside a JSON document, built up while descending.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JsonPath(Vec<Segment>);

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Field(String),
    Index(usize),
}

impl JsonPath {
    /// The document root, `$`.
    pub fn root() -> Self {
        JsonPath(Vec::new())
    }

    /// The path of field `name` below this one.
    pub fn field(&self, name: &str) -> Self {
        let mut v = self.0.clone();
        v.push(Segment::Field(name.to_owned()));
        JsonPath(v)
    }

    /// The path of array element `i` below this one.
    pub fn index(&self, i: usize) -> Self {
        let mut v = self.0.clone();
        v.push(Segment::Index(i));
        JsonPath(v)
    }
}

impl fmt::Display for JsonPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("$")?;
        for s in &self.0 {
            match s {
                Segment::Field(n) => write!(f, ".{n}")?,
                Segment::Index(i) => write!(f, "[{i}]")?,
            }
        }
        Ok(())
    }
}

/// Why a document was refused by [`parse_strict`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseError {
    /// Not JSON at all (the parser's message, with line and column).
    Syntax(String),
    /// JSON, but not acceptable input: a key given twice, or a NUL character.
    Invalid(InputError),
}

/// Parses a JSON document, refusing what plain parsing lets through silently: an object key
/// given twice (serde_json keeps the last one, so a reviewer reading the first would be misled)
/// and the NUL character in a key or a string (no text column of PostgreSQL can store it, and
/// nothing legitimate needs it). Either is an [`InputError`] naming the JSON path.
pub fn parse_strict(text: &[u8]) -> Result<Value, ParseError> {
    let fault = std::cell::RefCell::new(None);
    let mut de = serde_json::Deserializer::from_slice(text);
    let seed = Strict {
        path: JsonPath::root(),
        fault: &fault,
    };
    let parsed = serde::de::DeserializeSeed::deserialize(seed, &mut de).and_then(|v| {
        de.end()?;
        Ok(v)
    });
    match (parsed, fault.into_inner()) {
        (_, Some(e)) => Err(ParseError::Invalid(e)),
        (Ok(v), None) => Ok(v),
        (Err(e), None) => Err(ParseError::Syntax(e.to_string())),
    }
}

/// Builds a [`Value`] like serde_json's own, recording the first refused key or string.
struct Strict<'f> {
    path: JsonPath,
    fault: &'f std::cell::RefCell<Option<InputError>>,
}

impl Strict<'_> {
    fn refuse<E: serde::de::Error>(&self, path: &JsonPath, reason: &str) -> E {
        *self.fault.borrow_mut() = Some(InputError::new(path, reason));
        E::custom(reason)
    }

    fn text<E: serde::de::Error>(&self, s: &str, path: &JsonPath, what: &str) -> Result<(), E> {
        if s.contains('\0') {
            Err(self.refuse(
                path,
                &format!("{what} must not contain the NUL character (\\u0000)"),
            ))
        } else {
            Ok(())
        }
    }
}

impl<'de> serde::de::DeserializeSeed<'de> for Strict<'_> {
    type Value = Value;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Strict<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, b: bool) -> Result<Value, E> {
        Ok(Value::Bool(b))
    }
    fn visit_i64<E>(self, n: i64) -> Result<Value, E> {
        Ok(Value::Number(n.into()))
    }
    fn visit_u64<E>(self, n: u64) -> Result<Value, E> {
        Ok(Value::Number(n.into()))
    }
    fn visit_f64<E>(self, x: f64) -> Result<Value, E> {
        // JSON has no NaN or infinity; a finite f64 always makes a Number.
        Ok(serde_json::Number::from_f64(x).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Value, E> {
        self.text(s, &self.path, "text")?;
        Ok(Value::String(s.to_owned()))
    }
    fn visit_string<E: serde::de::Error>(self, s: String) -> Result<Value, E> {
        self.text(&s, &self.path, "text")?;
        Ok(Value::String(s))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(v) = seq.next_element_seed(Strict {
            path: self.path.index(out.len()),
            fault: self.fault,
        })? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(k) = map.next_key::<String>()? {
            // A key with NUL is named by its object's path (the key itself is not printable).
            self.text(&k, &self.path, "a key")?;
            let path = self.path.field(&k);
            if out.contains_key(&k) {
                return Err(self.refuse(&path, "is given twice; each key may appear once"));
            }
            let v = map.next_value_seed(Strict {
                path,
                fault: self.fault,
            })?;
            out.insert(k, v);
        }
        Ok(Value::Object(out))
    }
}

/// Describes a JSON value's kind for error messages.
pub fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// An object being read field by field; [`Fields::finish`] rejects the fields nobody read.
pub struct Fields<'a> {
    map: &'a Map<String, Value>,
    path: JsonPath,
    taken: Vec<&'static str>,
}

impl<'a> Fields<'a> {
    /// Views `v` (at `path`) as an object.
    pub fn new(v: &'a Value, path: &JsonPath) -> Result<Self, InputError> {
        match v {
            Value::Object(map) => Ok(Fields {
                map,
                path: path.clone(),
                taken: Vec::new(),
            }),
            other => Err(InputError::new(
                path,
                format!("must be an object, got {}", kind(other)),
            )),
        }
    }

    /// The path of this object.
    pub fn path(&self) -> &JsonPath {
        &self.path
    }

    /// A field that may be absent (`null` counts as absent).
    pub fn optional(&mut self, name: &'static str) -> Option<(&'a Value, JsonPath)> {
        self.taken.push(name);
        match self.map.get(name) {
            None | Some(Value::Null) => None,
            Some(v) => Some((v, self.path.field(name))),
        }
    }

    /// A field that must be present.
    pub fn required(&mut self, name: &'static str) -> Result<(&'a Value, JsonPath), InputError> {
        self.optional(name)
            .ok_or_else(|| InputError::new(&self.path.field(name), "is required"))
    }

    /// Rejects every field that was not read, naming the fields that are allowed.
    pub fn finish(self) -> Result<(), InputError> {
        let mut unknown: Vec<&String> = self
            .map
            .keys()
            .filter(|k| !self.taken.contains(&k.as_str()))
            .collect();
        unknown.sort();
        if let Some(k) = unknown.first() {
            let mut allowed = self.taken.clone();
            allowed.sort_unstable();
            allowed.dedup();
            return Err(InputError::new(
                &self.path.field(k),
                format!("unknown field; allowed fields are: {}", allowed.join(", ")),
            ));
        }
        Ok(())
    }
}

/// Reads a finite JSON number.
pub fn number(v: &Value, path: &JsonPath) -> Result<f64, InputError> {
    match v {
        Value::Number(n) => match n.as_f64() {
            Some(x) if x.is_finite() => Ok(if x == 0.0 { 0.0 } else { x }),
            _ => Err(InputError::new(path, "must be a finite number")),
        },
        other => Err(InputError::new(
            path,
            format!("must be a number, got {}", kind(other)),
        )),
    }
}

/// Largest integer every f64 represents exactly (2^53); counts above it are rejected.
pub const MAX_EXACT_INTEGER: u64 = 1 << 53;

/// Reads a whole number in `[min, 2^53]` (a JSON integer, or a float with no fractional part).
pub fn integer(v: &Value, path: &JsonPath, min: u64) -> Result<u64, InputError> {
    let n = match v {
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                Some(u)
            } else if let Some(x) = n.as_f64() {
                (x.is_finite() && x.fract() == 0.0 && x >= 0.0 && x <= MAX_EXACT_INTEGER as f64)
                    .then_some(x as u64)
            } else {
                None
            }
        }
        other => {
            return Err(InputError::new(
                path,
                format!("must be a whole number, got {}", kind(other)),
            ))
        }
    };
    match n {
        Some(u) if (min..=MAX_EXACT_INTEGER).contains(&u) => Ok(u),
        _ => Err(InputError::new(
            path,
            format!("must be a whole number in [{min}, 2^53], got {v}"),
        )),
    }
}

/// Reads a string.
pub fn string<'a>(v: &'a Value, path: &JsonPath) -> Result<&'a str, InputError> {
    v.as_str()
        .ok_or_else(|| InputError::new(path, format!("must be a string, got {}", kind(v))))
}

/// Reads an array.
pub fn array<'a>(v: &'a Value, path: &JsonPath) -> Result<&'a [Value], InputError> {
    v.as_array()
        .map(Vec::as_slice)
        .ok_or_else(|| InputError::new(path, format!("must be an array, got {}", kind(v))))
}

/// Reads an array of numbers, each checked by `check` (which returns the reason on failure).
pub fn number_list<T>(
    v: &Value,
    path: &JsonPath,
    max_len: usize,
    check: impl Fn(f64) -> Result<T, String>,
) -> Result<Vec<T>, InputError> {
    let items = array(v, path)?;
    if items.len() > max_len {
        return Err(InputError::new(
            path,
            format!("has {} entries; at most {max_len} are allowed", items.len()),
        ));
    }
    items
        .iter()
        .enumerate()
        .map(|(i, x)| {
            let p = path.index(i);
            let n = number(x, &p)?;
            check(n).map_err(|r| InputError::new(&p, r))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strict_parsing_refuses_duplicate_keys_and_nul_and_keeps_everything_else() {
        let v = parse_strict(br#"{"a": [1, -2, 2.5e-3, true, null, "x\u00e9"], "b": {"c": {}}}"#)
            .unwrap();
        assert_eq!(
            v,
            serde_json::json!({"a": [1, -2, 2.5e-3, true, null, "x\u{e9}"], "b": {"c": {}}})
        );
        let e = |t: &str| match parse_strict(t.as_bytes()) {
            Err(ParseError::Invalid(e)) => e.to_string(),
            other => panic!("{t}: {other:?}"),
        };
        assert_eq!(
            e(r#"{"event": {"mu": 1, "mu": 2}}"#),
            "$.event.mu: is given twice; each key may appear once"
        );
        assert_eq!(
            e(r#"{"label": "a\u0000b"}"#),
            "$.label: text must not contain the NUL character (\\u0000)"
        );
        assert_eq!(
            e(r#"{"m": [{"ok": 1}, {"k\u0000": 1}]}"#),
            "$.m[1]: a key must not contain the NUL character (\\u0000)"
        );
        assert!(matches!(
            parse_strict(b"{\"a\": 1} x"),
            Err(ParseError::Syntax(_))
        ));
        assert!(matches!(
            parse_strict(b"{\"a\": }"),
            Err(ParseError::Syntax(_))
        ));
    }
    use serde_json::json;

    #[test]
    fn paths_render_as_jsonpath() {
        let p = JsonPath::root().field("events").index(3).field("event");
        assert_eq!(p.to_string(), "$.events[3].event");
    }

    #[test]
    fn unknown_fields_are_named() {
        let v = json!({"a": 1, "zz": 2});
        let mut f = Fields::new(&v, &JsonPath::root()).unwrap();
        f.required("a").unwrap();
        let e = f.finish().unwrap_err();
        assert_eq!(e.path, "$.zz");
        assert!(e.reason.contains("allowed fields are: a"), "{}", e.reason);
    }

    #[test]
    fn integers_accept_integral_floats_and_reject_fractions() {
        let p = JsonPath::root();
        assert_eq!(integer(&json!(1e6), &p, 1).unwrap(), 1_000_000);
        assert!(integer(&json!(2.5), &p, 1).is_err());
        assert!(integer(&json!(0), &p, 1).is_err());
        assert!(integer(&json!(1e300), &p, 1).is_err());
        assert!(integer(&json!("3"), &p, 1).is_err());
    }
}
