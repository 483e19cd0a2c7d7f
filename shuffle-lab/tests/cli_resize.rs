//! Runs the built `shuffle-lab` binary with `--resize-to`: `size` prints the
//! exact share of tenants whose shard changes when N changes, `simulate`
//! counts it on the real assignment.

use std::collections::BTreeSet;

use serde_json::Value;

#[path = "support/lab.rs"]
mod lab;
use lab::{assert_close, f, json, keys, refused, text};

/// Runs `simulate --resize-to` and checks its count against the exact
/// share `p`, printed as `exact`: within 4 standard errors of a binomial
/// share of the tenants, which the test computes itself.
fn simulate(n: &str, k: &str, to: &str, exact: &str, p: f64) -> Value {
    let args = [
        "simulate",
        "--buckets",
        n,
        "--per-tenant",
        k,
        "--resize-to",
        to,
        "--tenants",
        "20000",
        "--seed",
        "1",
    ];
    let v = json(&args);
    let r = &v["resize"];
    assert_eq!(
        keys(r),
        BTreeSet::from(["from", "to", "tenants", "shard", "reordered"])
    );
    assert_eq!(
        (r["from"].as_u64(), r["to"].as_u64()),
        (n.parse().ok(), to.parse().ok())
    );
    assert_eq!(r["tenants"], 20000);
    let s = &r["shard"];
    assert_eq!(s["p_changed_exact"], exact);
    assert_close(&s["p_changed"], p);
    let changed = s["changed"].as_u64().unwrap();
    let measured = f(&s["measured"]);
    assert_eq!(measured, changed as f64 / 20000.0);
    let se = (p * (1.0 - p) / 20000.0).sqrt();
    assert_close(&s["standard_error"], se);
    assert!(
        (measured - p).abs() < 4.0 * se,
        "{changed} of 20000 changed, exact {exact}: {r}"
    );
    assert!((f(&s["z"]) - (measured - p) / se).abs() < 1e-9, "{r}");
    // A tenant whose shard stays keeps its order too.
    assert_eq!(r["reordered"], 0);
    let table = text(&args);
    assert!(
        table.contains(&format!(
            "N = {n} → {to} buckets, each of the 20000 tenants"
        )),
        "{table}"
    );
    assert!(
        table.contains(&format!("own (the shard)       {changed:>10}")),
        "{table}"
    );
    v
}

#[test]
fn simulate_counts_one_bucket_added_as_k_in_n_plus_one() {
    simulate("8", "2", "9", "2/9", 2.0 / 9.0);
}

#[test]
fn simulate_counts_a_shrink_as_one_minus_c_min_over_c_max() {
    // 1 − C(12, 3) / C(16, 3) = 1 − 220/560.
    simulate("16", "3", "12", "17/28", 17.0 / 28.0);
}

#[test]
fn simulate_with_borrowing_counts_own_or_spill_changes() {
    let v = json(&[
        "simulate",
        "--buckets",
        "8",
        "--per-tenant",
        "2",
        "--borrow-from",
        "2",
        "--resize-to",
        "9",
        "--tenants",
        "20000",
        "--seed",
        "2",
    ]);
    let r = &v["resize"];
    assert_eq!(r["spill"], 2);
    assert_eq!(r["shard"]["p_changed_exact"], "2/9");
    // 1 − C(8, 4) / C(9, 4) = 1 − 70/126.
    let ranked = &r["ranked"];
    assert_eq!(ranked["p_changed_exact"], "4/9");
    let (measured, se) = (f(&ranked["measured"]), f(&ranked["standard_error"]));
    assert!((measured - 4.0 / 9.0).abs() < 4.0 * se, "{r}");
    assert!(ranked["changed"].as_u64() >= r["shard"]["changed"].as_u64());
    assert_eq!(r["reordered"], 0);
}

#[test]
fn size_prints_the_exact_share() {
    let base = ["size", "--buckets", "8", "--per-tenant", "2"];
    let v = json(&[&base[..], &["--resize-to", "9"]].concat());
    let r = &v["resize"];
    assert_eq!(keys(r), BTreeSet::from(["from", "to", "shard"]));
    assert_eq!((r["from"].as_u64(), r["to"].as_u64()), (Some(8), Some(9)));
    assert_eq!(r["shard"]["p_changed_exact"], "2/9");
    assert_close(&r["shard"]["p_changed"], 2.0 / 9.0);
    let table = text(&[&base[..], &["--resize-to", "9"]].concat());
    assert!(
        table.contains("N = 8 → 9 buckets (added or removed at the end), k = 2 per tenant:"),
        "{table}"
    );
    assert!(
        table.contains("P(shard changes)       1 - C(min,k)/C(max,k)      0.222222     (2/9)"),
        "{table}"
    );
    // 1 − C(8, 2) / C(12, 2) = 1 − 28/66; the same share back from 12 to 8.
    let grow = json(&[&base[..], &["--resize-to", "12"]].concat());
    assert_eq!(grow["resize"]["shard"]["p_changed_exact"], "19/33");
    let shrink = json(&[
        "size",
        "--buckets",
        "12",
        "--per-tenant",
        "2",
        "--resize-to",
        "8",
    ]);
    assert_eq!(shrink["resize"]["shard"]["p_changed_exact"], "19/33");
    let same = json(&[&base[..], &["--resize-to", "8"]].concat());
    assert_eq!(same["resize"]["shard"]["p_changed_exact"], "0/1");
    // With borrowing: own or spill, 1 − C(6, 4) / C(8, 4) = 1 − 15/70.
    let lending = json(&[&base[..], &["--borrow-from", "2", "--resize-to", "6"]].concat());
    let r = &lending["resize"];
    assert_eq!(r["shard"]["p_changed_exact"], "13/28");
    assert_eq!(r["spill"], 2);
    assert_eq!(r["ranked"]["p_changed_exact"], "11/14");
    assert!(json(&base).get("resize").is_none());
}

#[test]
fn bad_resizes_say_what_to_change() {
    let size = ["size", "--buckets", "8", "--per-tenant", "3"];
    let e = refused(&[&size[..], &["--resize-to", "2"]].concat());
    assert!(e.contains("raise --resize-to to at least 3"), "{e}");
    let e = refused(&[&size[..], &["--resize-to", "0"]].concat());
    assert!(e.contains("set --resize-to to 1 or more"), "{e}");
    let e = refused(&[&size[..], &["--borrow-from", "2", "--resize-to", "4"]].concat());
    assert!(
        e.contains("raise --resize-to to at least 5 or lower --borrow-from to at most 1"),
        "{e}"
    );
    let sim = [
        "simulate",
        "--buckets",
        "8",
        "--per-tenant",
        "2",
        "--seed",
        "1",
    ];
    let e = refused(&[&sim[..], &["--tenants", "10", "--resize-to", "70000"]].concat());
    assert!(e.contains("lower --resize-to to at most 65536"), "{e}");
    let e = refused(&[&sim[..], &["--tenants", "100000", "--resize-to", "60000"]].concat());
    assert!(e.contains("lower --tenants to at most 35791"), "{e}");
}
