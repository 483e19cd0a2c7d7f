//! Config errors name the file, line and field; what envoyproxy/ratelimit
//! accepts reads; a value-less key without `shuffle` warns.

use std::path::Path;

use shuffle_limiter_server::Config;

fn error(text: &str) -> String {
    Config::parse(Path::new("limits.yaml"), text)
        .unwrap_err()
        .to_string()
}

#[test]
fn an_error_names_the_file_line_and_field() {
    let text = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n";
    let err = error(text);
    // A mistake found checking a descriptor points at the descriptor, and
    // names the field.
    assert!(
        err.starts_with(
            "limits.yaml:3:3: descriptors[0]: rate_limit.unit: unknown unit \"fortnight\""
        ),
        "{err}"
    );

    let err = error(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {rate: \"1/s\"}\n    shufle: {buckets: 4}\n",
    );
    assert!(err.starts_with("limits.yaml:5:"), "{err}");
    assert!(err.contains("unknown field `shufle`"), "{err}");

    let nested = "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n        rate_limit: {rate: \"8/s\"}\n        shuffle: {buckets: 4, per_tenant: 9}\n";
    let err = error(nested);
    assert!(err.contains("descriptors[0].descriptors[0]"), "{err}");
    assert!(err.contains("shuffle: "), "{err}");
    assert!(err.starts_with("limits.yaml:"), "{err}");
}

#[test]
fn mistakes_of_shape_are_refused_with_what_to_change() {
    for (text, says) in [
        ("domain: ''\n", "domain is empty"),
        ("domain: d\n---\ndomain: d\n", "appears twice"),
        ("domain: d\ndescriptors:\n  - key: ''\n", "key is empty"),
        (
            "domain: d\ndescriptors:\n  - key: k\n    value: 'a*'\n",
            "wildcards",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    value: ''\n",
            "leave `value` out",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second}\n",
            "requests_per_unit is missing",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {rate: \"1/s\", unit: second, requests_per_unit: 1}\n",
            "not both",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true}\n    shuffle: {buckets: 2}\n",
            "nothing to share",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    shuffle: {buckets: 2}\n",
            "takes only",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {rate: \"4/s\"}\n    descriptors:\n      - key: u\n        shuffle: {per_user: 1}\n",
            "needs a `shuffle` block",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {rate: \"4/s\"}\n    shuffle: {buckets: 2, per_tenant: 2}\n    descriptors:\n      - key: u\n        shuffle: {per_user: 3}\n",
            "shuffle: ",
        ),
    ] {
        let err = error(text);
        assert!(err.contains(says), "{text:?}: {err}");
    }
}

#[test]
fn envoyproxy_ratelimit_configs_read_and_unshuffled_keys_warn() {
    let text = r#"
domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit:
      unit: second
      requests_per_unit: 500
  - key: database
    value: default
    rate_limit:
      unit: SECOND
      requests_per_unit: 500
    detailed_metric: true
  - key: remote_address
    rate_limit: {unit: day, requests_per_unit: 10, name: per_ip}
    shadow_mode: true
  - key: path
    rate_limit: {unit: week, requests_per_unit: 7}
    shuffle: {buckets: 7, per_tenant: 1, salt: s3cret, borrow_from: 1, lender_reserve: 0.25}
---
domain: second
descriptors:
  - key: k
    rate_limit: {rate: "100/10s"}
    shuffle: {buckets: 10}
"#;
    let config = Config::parse(Path::new("x.yaml"), text).unwrap();
    assert_eq!(config.domains.len(), 2);
    assert_eq!(config.warnings.len(), 1, "{:?}", config.warnings);
    let warning = &config.warnings[0];
    assert!(warning.contains("remote_address"), "{warning}");
    assert!(warning.contains("add `shuffle"), "{warning}");
}

#[test]
fn empty_documents_are_skipped_and_an_empty_file_is_refused() {
    // A `---` that opens or ends the file, or two in a row, marks an
    // empty document: no domain, not a domain missing its name.
    let text = "---\ndomain: a\n---\n---\ndomain: b\n---\n";
    let config = Config::parse(Path::new("limits.yaml"), text).unwrap();
    let names: Vec<_> = config.domains.iter().map(|d| d.domain.as_str()).collect();
    assert_eq!(names, ["a", "b"]);

    // A file with no domain at all is more likely a write caught halfway
    // than a wish to limit nothing: refused, so a reload keeps the rules.
    for text in ["", "\n", "---\n", "# nothing yet\n---\n---\n"] {
        let err = error(text);
        assert!(err.starts_with("limits.yaml: no domain"), "{text:?}: {err}");
    }
    // A document that is not empty still needs its domain.
    let err = error("---\ndescriptors: []\n");
    assert!(err.contains("missing field `domain`"), "{err}");
}

/// Promised: a rule's identity is its domain and path, so two descriptors
/// with the same key and value side by side (one rule twice) are refused
/// when read, with the file, the line of what holds the list (the domain's
/// document, or the descriptor) and the list's path.
#[test]
fn the_same_descriptor_twice_is_refused_where_it_is_written() {
    let top = "domain: d\ndescriptors:\n  - key: k\n    value: v\n    rate_limit: {rate: \"1/s\"}\n  - key: k\n    value: v\n    rate_limit: {rate: \"2/s\"}\n";
    let err = error(top);
    assert!(
        err.starts_with("limits.yaml:1:1: descriptors: [0] and [1] are both k=v"),
        "{err}"
    );
    let nested = "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n        rate_limit: {rate: \"1/s\"}\n      - key: b\n        rate_limit: {rate: \"2/s\"}\n";
    let err = error(nested);
    assert!(
        err.starts_with("limits.yaml:3:5: descriptors[0].descriptors: [0] and [1] are both b"),
        "{err}"
    );
    // A value with `.` or `=` is another descriptor than the path it
    // prints like, and reads.
    let apart = "domain: d\ndescriptors:\n  - key: a\n    value: \"b.c=x\"\n    rate_limit: {rate: \"1/s\"}\n  - key: a\n    value: b\n    descriptors:\n      - key: c\n        value: x\n        rate_limit: {rate: \"1/s\"}\n";
    assert!(Config::parse(Path::new("limits.yaml"), apart).is_ok());
}

/// Promised (the config module: "a config that reads builds"): a user
/// level (`shuffle: {per_user: J}`) with no rate above it is refused when
/// read, with the file, the line and the field, not at start or reload by
/// the build, with neither.
#[test]
fn a_user_level_without_a_rate_above_it_is_refused_where_it_is_written() {
    for (text, at) in [
        (
            "domain: d\ndescriptors:\n  - key: user\n    shuffle: {per_user: 1}\n",
            "limits.yaml:1:1: descriptors: [0]: shuffle.per_user",
        ),
        (
            "domain: d\ndescriptors:\n  - key: tenant\n    descriptors:\n      - key: user\n        shuffle: {per_user: 1}\n",
            "limits.yaml:3:3: descriptors[0]: descriptors[0]: shuffle.per_user",
        ),
        (
            "domain: d\ndescriptors:\n  - key: tenant\n    rate_limit: {unlimited: true}\n    descriptors:\n      - key: user\n        shuffle: {per_user: 1}\n",
            "limits.yaml:3:3: descriptors[0]: descriptors[0]: shuffle.per_user",
        ),
    ] {
        let err = error(text);
        assert!(err.starts_with(at), "{err}");
        assert!(
            err.contains("makes a user level of the limit above it"),
            "{err}"
        );
    }
}
