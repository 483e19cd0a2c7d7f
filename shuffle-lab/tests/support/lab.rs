//! Running the built `shuffle-lab` binary, as the CLI tests do.
#![allow(dead_code)] // each user takes what it needs

use std::collections::BTreeSet;
use std::process::{Command, Output};

use serde_json::Value;

/// Runs `shuffle-lab` with `args`.
pub(crate) fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_shuffle-lab"))
        .args(args)
        .output()
        .expect("the shuffle-lab binary runs")
}

/// Runs a command that must succeed; its stdout.
pub(crate) fn text(args: &[&str]) -> String {
    let out = run(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{args:?} failed: {stderr}");
    String::from_utf8(out.stdout).unwrap()
}

/// Runs a command that must succeed and print one JSON object.
pub(crate) fn json(args: &[&str]) -> Value {
    let out = text(&[args, &["--json"]].concat());
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {out}"))
}

/// Runs a command that must fail with status 2; its one line of stderr.
pub(crate) fn refused(args: &[&str]) -> String {
    let out = run(args);
    assert_eq!(out.status.code(), Some(2), "{args:?}");
    assert!(out.stdout.is_empty(), "{args:?}");
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    stderr
}

/// The same command's table and its JSON (`--json` appended).
pub(crate) fn text_and_json(args: &[&str]) -> (String, Value) {
    (text(args), json(args))
}

pub(crate) fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("{v} is not a number"))
}

pub(crate) fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("{v} is not a count"))
}

/// Asserts that a JSON number is `want`, up to the last bit or two: serde_json's
/// default float parser is not always correctly rounded.
#[track_caller]
pub(crate) fn assert_close(v: &Value, want: f64) {
    let got = f(v);
    assert!((got - want).abs() <= want.abs() * 1e-15, "{got} != {want}");
}

/// An object's keys.
pub(crate) fn keys(v: &Value) -> BTreeSet<&str> {
    v.as_object()
        .expect("an object")
        .keys()
        .map(String::as_str)
        .collect()
}

pub(crate) fn set<'a>(names: &[&'a str]) -> BTreeSet<&'a str> {
    names.iter().copied().collect()
}

/// The whitespace-separated words of the first line that starts with `prefix`.
pub(crate) fn row<'a>(table: &'a str, prefix: &str) -> Vec<&'a str> {
    table
        .lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no line starting with {prefix:?} in:\n{table}"))
        .split_whitespace()
        .collect()
}

/// A probability as the tables print one between 0.001 and 0.999.
pub(crate) fn six(x: f64) -> String {
    let s = format!("{x:.6}");
    s.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// The keys of a model's impact on the other tenants (`size`, `simulate`).
pub(crate) const IMPACT: &[&str] = &["fully_down", "degraded", "unaffected"];

/// The `hung_tenant` example's scene: 40 tenants, C = 40 over N = 8 pools,
/// k = 2.
pub(crate) const HUNG_SCENE: &[&str] = &[
    "simulate",
    "--buckets",
    "8",
    "--per-tenant",
    "2",
    "--tenants",
    "40",
    "--seed",
    "1",
    "--concurrency",
    "40",
];
