//! The forms of names: dataset ids, block names and principals' names.

/// Whether `s` is 1 to `max` characters from [A-Za-z0-9._-], not starting with '.' (the form of
/// dataset ids and block names).
pub fn is_name(s: &str, max: usize) -> bool {
    !s.is_empty()
        && s.len() <= max
        && !s.starts_with('.')
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// Checks a principal's name (of a token, a grant or a quota): 1-128 characters from letters,
/// digits, space and `._@:+-`, not starting or ending with a space (`*` is the unallocated share).
pub fn principal_name(s: &str) -> Result<String, String> {
    let ok = !s.is_empty()
        && s.len() <= 128
        && !s.starts_with(' ')
        && !s.ends_with(' ')
        // Names that render alike are one name: no runs of spaces (`data team`, `data  team`).
        && !s.contains("  ")
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || " ._@:+-".contains(c));
    if ok {
        Ok(s.to_owned())
    } else {
        Err(
            "must be 1-128 characters from letters, digits, space and ._@:+- (no leading or \
             trailing space, no two spaces in a row)"
                .into(),
        )
    }
}
