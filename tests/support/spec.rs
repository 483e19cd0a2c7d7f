//! Reading `docs/assignment.md`: its sections, and the cells of its
//! known-answer tables.
#![allow(dead_code)] // each user takes what it needs

/// The specification, as the tests read it.
pub(crate) const SPEC: &str = include_str!("../../docs/assignment.md");

/// The text of the `## title` section, up to the next `## ` heading.
pub(crate) fn section(title: &str) -> &'static str {
    let heading = format!("\n## {title}\n");
    let start = SPEC
        .find(&heading)
        .unwrap_or_else(|| panic!("no section {title:?}"))
        + heading.len();
    let rest = &SPEC[start..];
    &rest[..rest.find("\n## ").unwrap_or(rest.len())]
}

/// The inside of a cell written as one backticked span.
pub(crate) fn code(cell: &str) -> Option<&str> {
    let inner = cell.strip_prefix('`')?.strip_suffix('`')?;
    (!inner.contains('`')).then_some(inner)
}

pub(crate) fn hex_bytes(hex: &str) -> Vec<u8> {
    assert!(hex.len().is_multiple_of(2), "odd-length hex {hex:?}");
    (0..hex.len())
        .step_by(2)
        .map(|i| {
            u8::from_str_radix(&hex[i..i + 2], 16).unwrap_or_else(|_| panic!("bad hex {hex:?}"))
        })
        .collect()
}

pub(crate) fn bucket_list(text: &str) -> Vec<u32> {
    text.split(',').map(|b| b.trim().parse().unwrap()).collect()
}
