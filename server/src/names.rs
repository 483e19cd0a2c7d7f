//! Rule names: a descriptor's path, with `.`, `=` and `\` escaped in
//! keys and values so that two descriptors never print alike; with its
//! domain in front, a rule's identity, and its Redis limiter's name.

use std::borrow::Cow;

use crate::config::DescriptorConfig;

/// The path of a descriptor in messages and metrics, which is also its
/// rule's identity: `key` or `key=value`, joined by `.` from the top, with
/// [`escape`]d keys and values, so that two descriptors never print alike.
pub(crate) fn step(parent: &str, d: &DescriptorConfig) -> String {
    let key = escape(&d.key);
    let own = match &d.value {
        Some(value) => format!("{key}={}", escape(value)),
        None => key.into_owned(),
    };
    if parent.is_empty() {
        own
    } else {
        format!("{parent}.{own}")
    }
}

/// `s` with each `\`, `.` and `=` preceded by a `\`: a path (or
/// `domain.path`) reads back one way, its unescaped `.` between steps and
/// `=` between a key and its value. Most names hold none, and print as
/// written.
pub(crate) fn escape(s: &str) -> Cow<'_, str> {
    if !s.contains(['\\', '.', '=']) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 4);
    for c in s.chars() {
        if matches!(c, '\\' | '.' | '=') {
            out.push('\\');
        }
        out.push(c);
    }
    Cow::Owned(out)
}

/// The limiter's name, which is also its Redis keys' hash tag: the same in
/// every replica, with only safe bytes.
pub(crate) fn redis_name(full: &str) -> String {
    let mut name = String::from("rls:");
    for b in full.bytes() {
        if b.is_ascii_alphanumeric() || b"_.=-".contains(&b) {
            name.push(b as char);
        } else {
            name.push_str(&format!("%{b:02X}"));
        }
    }
    name
}

/// `s` as a structured-field string: quoted, `"` and `\` escaped (names
/// are printable ASCII, checked when read).
pub(crate) fn sf_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        if c.is_ascii_graphic() || c == ' ' {
            out.push(c);
        } else {
            out.push('_');
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_escaped() {
        assert_eq!(sf_string(r#"a"b\c"#), r#""a\"b\\c""#);
        assert_eq!(redis_name("d.k=v/x{y}"), "rls:d.k=v%2Fx%7By%7D");
        assert_eq!(redis_name(r"d.k=a\.b"), "rls:d.k=a%5C.b");
    }
}
