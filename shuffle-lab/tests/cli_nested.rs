//! Runs the built `shuffle-lab` binary with `--noisy` and `--per-user`:
//! `size` prints the exact numbers, `simulate` measures them on the real
//! assignment and on a real limiter with nested checks.

use std::collections::BTreeSet;

#[path = "support/lab.rs"]
mod lab;
use lab::{assert_close, f, json, keys, refused, text, u};

const EIGHT_FOUR: &[&str] = &["--buckets", "8", "--per-tenant", "4", "--tenants", "400"];

#[test]
fn size_prints_p_covered_exactly() {
    let args = [&["size"], EIGHT_FOUR, &["--noisy", "2"]].concat();
    let v = json(&args);
    let h = &v["noisy"];
    assert_eq!(
        keys(h),
        BTreeSet::from([
            "flooders",
            "p_covered",
            "p_covered_exact",
            "p_degraded",
            "p_untouched",
            "p_untouched_exact",
            "expected",
        ])
    );
    // (70² − 4·35² + 6·15² − 4·5² + 1) / 70², and (C(4, 4) / C(8, 4))².
    assert_eq!(h["p_covered_exact"], "1251/4900");
    assert_close(&h["p_covered"], 1251.0 / 4900.0);
    assert_eq!(h["p_untouched_exact"], "1/4900");
    assert_close(&h["p_degraded"], 3648.0 / 4900.0);
    assert_close(&h["expected"]["fully_down"], 398.0 * 1251.0 / 4900.0);
    let table = text(&args);
    assert!(table.contains("2 tenants flood at once"), "{table}");
    assert!(table.contains("0.255306     (1251/4900)"), "{table}");
    assert!(table.contains("expected among the other 398: 101.61 fully down"));
    // One flooder is the identical-shard case.
    let one = json(&[&["size"], EIGHT_FOUR, &["--noisy", "1"]].concat());
    assert_eq!(one["noisy"]["p_covered_exact"], "1/70");
    assert!(v.get("nested").is_none() && one.get("nested").is_none());
}

#[test]
fn size_prints_the_two_levels_exactly() {
    let v = json(&[&["size"], EIGHT_FOUR, &["--per-user", "2"]].concat());
    let j = &v["nested"];
    assert_eq!(j["per_user"], 2);
    assert_eq!(j["subsets"], "6");
    assert_eq!(j["p_user_fully_down_exact"], "1/6");
    assert_eq!(j["p_user_degraded_exact"], "2/3");
    assert_eq!(j["p_user_unaffected_exact"], "1/6");
    assert_close(&j["p_user_fully_down"], 1.0 / 6.0);
    // Other tenants: only the flooder's 2 buckets are drained.
    assert_eq!(j["p_tenant_fully_down_exact"], "0/1");
    assert_eq!(j["p_tenant_unaffected_exact"], "3/14");
    assert_close(&j["p_tenant_degraded"], 11.0 / 14.0);
    assert_close(&j["expected_tenants"]["unaffected"], 399.0 * 3.0 / 14.0);
    assert!(v.get("noisy").is_none());
    // j = k: no inner isolation, and other tenants as with a whole tenant flooding.
    let flat = json(&[&["size"], EIGHT_FOUR, &["--per-user", "4"]].concat());
    let j = &flat["nested"];
    assert_eq!(j["p_user_fully_down_exact"], "1/1");
    assert_eq!(j["p_user_unaffected_exact"], "0/1");
    assert_eq!(j["p_tenant_fully_down_exact"], flat["overlap_pmf_exact"][4]);
    assert_eq!(j["p_tenant_unaffected_exact"], flat["overlap_pmf_exact"][0]);
    let table = text(&[&["size"], EIGHT_FOUR, &["--per-user", "2"]].concat());
    assert!(table.contains("1/C(k,j)    0.166667     (1/6)"), "{table}");
}

#[test]
fn bad_noisy_and_per_user_say_what_to_change() {
    for j in ["0", "5"] {
        let e = refused(&[&["size"], EIGHT_FOUR, &["--per-user", j]].concat());
        assert!(e.contains("set --per-user between 1 and 4"), "{e}");
    }
    let e = refused(&[&["size"], EIGHT_FOUR, &["--noisy", "0"]].concat());
    assert!(e.contains("set --noisy to the number of tenants"), "{e}");
    let big = [
        "size",
        "--buckets",
        "1000",
        "--per-tenant",
        "500",
        "--noisy",
        "100",
    ];
    let e = refused(&big);
    assert!(e.contains("lower --noisy to at most 65"), "{e}");
    let sim = [
        "simulate",
        "--buckets",
        "8",
        "--per-tenant",
        "2",
        "--seed",
        "1",
    ];
    let e = refused(&[&sim[..], &["--tenants", "3", "--noisy", "3"]].concat());
    assert!(e.contains("set --tenants to at least 4"), "{e}");
    let e = refused(
        &[
            &sim[..],
            &["--tenants", "9", "--noisy", "1", "--borrow-from", "2"],
        ]
        .concat(),
    );
    assert!(e.contains("drop --borrow-from"), "{e}");
}

#[test]
fn simulate_measures_coverage_on_the_real_assignment() {
    let args = [&["simulate", "--seed", "1"], EIGHT_FOUR, &["--noisy", "2"]].concat();
    let v = json(&args);
    let h = &v["noisy"];
    assert_eq!(h["others"], 398);
    assert_eq!(h["p_covered_exact"], "1251/4900");
    let (want, got, se) = (
        f(&h["predicted"]["covered"]),
        f(&h["measured"]["covered"]),
        f(&h["standard_error"]["covered"]),
    );
    assert_close(&h["predicted"]["covered"], 1251.0 / 4900.0);
    assert!(se > 0.0 && (got - want).abs() < 5.0 * se, "{h}");
    let shares = ["covered", "degraded", "untouched"].map(|s| f(&h["measured"][s]));
    assert!((shares.iter().sum::<f64>() - 1.0).abs() < 1e-9);
    // The first draw against what its union predicts, loosely.
    let (covered, given) = (
        u(&h["first_covered"]) as f64,
        f(&h["first_expected_given_union"]),
    );
    assert!((covered - given).abs() < 5.0 * given.sqrt().max(1.0), "{h}");
    let table = text(&args);
    assert!(
        table.contains("2 tenants flood at once: 200 draws"),
        "{table}"
    );
}

#[test]
fn simulate_measures_the_two_levels_on_a_real_limiter() {
    let v = json(
        &[
            &["simulate", "--seed", "3"],
            EIGHT_FOUR,
            &["--per-user", "2"],
        ]
        .concat(),
    );
    let n = &v["nested"];
    assert_eq!(n["flooder_subset"].as_array().unwrap().len(), 2);
    let users = &n["users_split"];
    let by = |s: &str| u(&users["by_assignment"][s]);
    assert_eq!(by("fully_down") + by("degraded") + by("unaffected"), 999);
    // Down are exactly the users holding the flooder's pair; everyone else,
    // degraded ones included, keeps a bucket and is served.
    assert_eq!(
        users["measured"]["fully_down"],
        users["by_assignment"]["fully_down"]
    );
    assert_eq!(u(&users["measured"]["degraded"]), 0);
    // 999 / 6 = 166.5 expected, σ ≈ 11.8.
    assert!(
        (by("fully_down") as f64 - 166.5).abs() < 4.0 * 11.8,
        "{users}"
    );
    let tenants = &n["tenants_split"];
    assert_eq!(u(&tenants["by_assignment"]["fully_down"]), 0);
    assert_eq!(u(&tenants["measured"]["fully_down"]), 0);
    assert_close(&tenants["predicted"]["unaffected"], 399.0 * 3.0 / 14.0);

    // Without nesting every other user is down with the flooder.
    let flat = json(
        &[
            &["simulate", "--seed", "3"],
            EIGHT_FOUR,
            &["--per-user", "4"],
        ]
        .concat(),
    );
    let users = &flat["nested"]["users_split"];
    assert_eq!(u(&users["by_assignment"]["fully_down"]), 999);
    assert_eq!(u(&users["measured"]["fully_down"]), 999);
}
