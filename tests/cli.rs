//! Runs the built `shuffle-lab` binary and checks what it prints.
#![cfg(feature = "cli")]

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_shuffle-lab"))
        .args(args)
        .output()
        .expect("the shuffle-lab binary runs")
}

/// Runs a command that must succeed and print one JSON object.
fn json(args: &[&str]) -> Value {
    let out = run(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{args:?} failed: {stderr}");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{args:?}: not JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// Asserts that a JSON number is `want`, up to the last bit or two: serde_json's
/// default float parser is not always correctly rounded.
#[track_caller]
fn assert_close(v: &Value, want: f64) {
    let got = v.as_f64().unwrap_or_else(|| panic!("{v} is not a number"));
    assert!((got - want).abs() <= want.abs() * 1e-15, "{got} != {want}");
}

fn keys(v: &Value) -> BTreeSet<&str> {
    v.as_object()
        .expect("an object")
        .keys()
        .map(String::as_str)
        .collect()
}

fn set<'a>(names: &[&'a str]) -> BTreeSet<&'a str> {
    names.iter().copied().collect()
}

const BASE: &[&str] = &[
    "nodes",
    "per_tenant",
    "shards",
    "p_identical",
    "p_disjoint",
    "p_any_overlap",
    "overlap_pmf",
    "overlap_pmf_exact",
    "node_blast_radius",
];
const TENANTS: &[&str] = &[
    "tenants",
    "expected_fully_down",
    "expected_degraded",
    "expected_unaffected",
    "fixed_shards",
    "shared_pool",
];
const FAILED: &[&str] = &["failed", "p_all_failed", "p_touched"];
const IMPACT: &[&str] = &["fully_down", "degraded", "unaffected"];

#[test]
fn size_json_has_exactly_the_documented_keys() {
    let v = json(&["size", "--nodes", "16", "--per-tenant", "2", "--json"]);
    assert_eq!(keys(&v), set(BASE));
    assert_eq!(v["nodes"], 16);
    assert_eq!(v["per_tenant"], 2);
    assert_eq!(v["shards"], "120");
    assert_close(&v["p_identical"], 1.0 / 120.0);
    assert_close(&v["p_disjoint"], 91.0 / 120.0);
    assert_close(&v["p_any_overlap"], 29.0 / 120.0);
    assert_eq!(v["node_blast_radius"], 0.125);
    assert_eq!(
        v["overlap_pmf_exact"],
        serde_json::json!(["91/120", "7/30", "1/120"])
    );
    let pmf = v["overlap_pmf"].as_array().unwrap();
    assert_eq!(pmf.len(), 3);
    for (got, want) in pmf.iter().zip([91.0 / 120.0, 7.0 / 30.0, 1.0 / 120.0]) {
        assert_close(got, want);
    }

    let v = json(&[
        "size",
        "--nodes",
        "16",
        "--per-tenant",
        "2",
        "--tenants",
        "400",
        "--json",
    ]);
    assert_eq!(keys(&v), set(&[BASE, TENANTS].concat()));
    assert_eq!(v["tenants"], 400);
    assert_close(&v["expected_fully_down"], 399.0 / 120.0);
    assert_eq!(keys(&v["fixed_shards"]), set(IMPACT));
    assert_eq!(keys(&v["shared_pool"]), set(IMPACT));
    assert_close(&v["fixed_shards"]["fully_down"], 399.0 / 8.0);
    assert_eq!(v["shared_pool"]["fully_down"], 399.0);

    let v = json(&[
        "size",
        "--nodes",
        "16",
        "--per-tenant",
        "2",
        "--failed",
        "2",
        "--json",
    ]);
    assert_eq!(keys(&v), set(&[BASE, FAILED].concat()));
    assert_eq!(v["failed"], 2);
    assert_close(&v["p_all_failed"], 1.0 / 120.0);
    assert_close(&v["p_touched"], 29.0 / 120.0);

    let v = json(&[
        "size",
        "--nodes",
        "10",
        "--per-tenant",
        "3",
        "--tenants",
        "50",
        "--failed",
        "4",
        "--json",
    ]);
    assert_eq!(keys(&v), set(&[BASE, TENANTS, FAILED].concat()));
    assert_eq!(v["fixed_shards"], Value::Null, "3 does not divide 10");
    assert_eq!(v["overlap_pmf"].as_array().unwrap().len(), 4);
    assert_eq!(v["overlap_pmf_exact"].as_array().unwrap().len(), 4);
}

#[test]
fn size_is_exact_for_huge_shard_counts() {
    let v = json(&["size", "--nodes", "1000", "--per-tenant", "500", "--json"]);
    let shards = v["shards"].as_str().unwrap();
    assert_eq!(shards.len(), 300);
    assert!(shards.starts_with("270288240945436"));
    let p = v["p_identical"].as_f64().unwrap();
    assert!((3.69e-300..3.71e-300).contains(&p), "{p:e}");
    assert_eq!(v["overlap_pmf_exact"].as_array().unwrap().len(), 501);
}

#[test]
fn size_table_is_readable() {
    let out = run(&[
        "size",
        "--nodes",
        "16",
        "--per-tenant",
        "2",
        "--tenants",
        "400",
        "--failed",
        "2",
    ]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for needle in [
        "120",
        "1/120",
        "91/120",
        "7/30",
        "fixed shards (8 groups of 2)",
        "one shared pool",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
    }
}

#[test]
fn sweep_json_has_one_row_per_n() {
    let v = json(&["sweep", "--per-tenant", "2", "--nodes", "4..10", "--json"]);
    assert_eq!(keys(&v), set(&["per_tenant", "rows"]));
    let rows = v["rows"].as_array().unwrap();
    let ns: Vec<u64> = rows.iter().map(|r| r["nodes"].as_u64().unwrap()).collect();
    assert_eq!(ns, [4, 5, 6, 7, 8, 9, 10]);
    for r in rows {
        assert_eq!(
            keys(r),
            set(&["nodes", "shards", "p_identical", "node_blast_radius"])
        );
    }
    assert_eq!(rows[4]["shards"], "28");
    assert_eq!(rows[4]["node_blast_radius"], 0.25);

    // A wide range is sampled geometrically, ends included; N below k is skipped.
    let v = json(&[
        "sweep",
        "--per-tenant",
        "3",
        "--nodes",
        "1..100000",
        "--json",
    ]);
    let ns: Vec<u64> = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["nodes"].as_u64().unwrap())
        .collect();
    assert!(ns.len() >= 10 && ns.len() <= 30, "{ns:?}");
    assert_eq!(ns.first(), Some(&3));
    assert_eq!(ns.last(), Some(&100_000));
    assert!(ns.windows(2).all(|w| w[0] < w[1]), "{ns:?}");
}

#[test]
fn simulate_matches_the_math_within_four_sigma() {
    for (n, k) in [("16", "2"), ("32", "3")] {
        let v = json(&[
            "simulate",
            "--nodes",
            n,
            "--per-tenant",
            k,
            "--tenants",
            "20000",
            "--seed",
            "7",
            "--json",
        ]);
        let k: usize = k.parse().unwrap();
        let observed: Vec<f64> = v["observed"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect();
        let expected: Vec<f64> = v["expected"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect();
        assert_eq!(observed.len(), k + 1);
        assert_eq!(expected.len(), k + 1);
        assert_eq!(observed.iter().sum::<f64>(), 19_999.0);
        assert!((expected.iter().sum::<f64>() - 19_999.0).abs() < 1e-6);
        for j in 0..=k {
            let p = expected[j] / 19_999.0;
            let sigma = (19_999.0 * p * (1.0 - p)).sqrt();
            assert!(
                (observed[j] - expected[j]).abs() <= 4.0 * sigma,
                "N={n} k={k} row {j}: observed {} expected {} σ {sigma}",
                observed[j],
                expected[j]
            );
        }
        assert_eq!(v["within_4_sigma"], true);

        // The live flood: exactly the tenants with the identical shard go down.
        let live = &v["live"];
        assert_eq!(
            live["measured"]["fully_down"],
            live["by_overlap"]["fully_down"]
        );
        assert_eq!(live["mean_share_by_overlap"][0], 1.0);
        if !live["mean_share_by_overlap"][k].is_null() {
            assert_eq!(live["mean_share_by_overlap"][k], 0.0);
        }
    }
}

#[test]
fn simulate_is_deterministic_and_the_seed_matters() {
    let args = [
        "simulate",
        "--nodes",
        "16",
        "--per-tenant",
        "2",
        "--tenants",
        "300",
        "--seed",
        "1",
    ];
    let a = run(&args);
    let b = run(&args);
    assert!(a.status.success());
    assert_eq!(a.stdout, b.stdout);
    let text = String::from_utf8(a.stdout).unwrap();
    assert!(text.contains("within 4σ"), "{text}");
    assert!(text.contains("measured"), "{text}");
    let c = json(&[
        "simulate",
        "--nodes",
        "16",
        "--per-tenant",
        "2",
        "--tenants",
        "300",
        "--seed",
        "2",
        "--json",
    ]);
    let d = json(&[
        "simulate",
        "--nodes",
        "16",
        "--per-tenant",
        "2",
        "--tenants",
        "300",
        "--seed",
        "1",
        "--json",
    ]);
    assert_ne!(c["observed"], d["observed"]);
}

/// A path in the temp directory that no other test run uses.
fn temp_svg(tag: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    std::env::temp_dir().join(format!(
        "shuffle-lab-{tag}-{}-{nanos}.svg",
        std::process::id()
    ))
}

#[test]
fn plot_writes_an_svg() {
    let path = temp_svg("plot");
    let out = run(&["plot", "--nodes", "16", "--svg", path.to_str().unwrap()]);
    let svg = std::fs::read_to_string(&path);
    let _ = std::fs::remove_file(&path);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let svg = svg.expect("the SVG was written");
    assert!(svg.starts_with("<svg"), "{}", &svg[..80.min(svg.len())]);
    assert!(svg.trim_end().ends_with("</svg>"));
    assert!(svg.contains("k, buckets per tenant"));
    assert!(svg.contains("P(identical shard)"));
    assert!(svg.contains("node blast radius"));
    assert!(svg.contains("<circle"), "points are drawn");

    // Far below f64's range the curve is still drawn (it plots the exponent).
    let path = temp_svg("plot-wide");
    let out = run(&[
        "plot",
        "--nodes",
        "2000",
        "--per-tenant-max",
        "512",
        "--svg",
        path.to_str().unwrap(),
    ]);
    let svg = std::fs::read_to_string(&path);
    let _ = std::fs::remove_file(&path);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        svg.unwrap().contains("1e-400"),
        "the axis reaches below f64's range"
    );
}

#[test]
fn bad_arguments_give_one_line_and_a_nonzero_exit() {
    let cases: &[&[&str]] = &[
        &["size", "--nodes", "5", "--per-tenant", "6"],
        &["size", "--nodes", "5", "--per-tenant", "0"],
        &["size", "--nodes", "0", "--per-tenant", "1"],
        &[
            "size",
            "--nodes",
            "16",
            "--per-tenant",
            "2",
            "--failed",
            "17",
        ],
        &["size", "--nodes", "sixteen", "--per-tenant", "2"],
        &["size", "--nodes", "-3", "--per-tenant", "2"],
        &["size", "--nodes", "16"],
        &["size", "--nodes", "100000", "--per-tenant", "50000"],
        &["size", "--nodes", "16", "--per-tenant", "2", "--bogus"],
        &["frobnicate"],
        &["sweep", "--per-tenant", "2", "--nodes", "9..3"],
        &["sweep", "--per-tenant", "2", "--nodes", "12"],
        &["sweep", "--per-tenant", "2", "--nodes", "a..b"],
        &["sweep", "--per-tenant", "5", "--nodes", "1..4"],
        &["sweep", "--per-tenant", "0", "--nodes", "1..4"],
        &[
            "simulate",
            "--nodes",
            "16",
            "--per-tenant",
            "2",
            "--tenants",
            "1",
            "--seed",
            "1",
        ],
        &[
            "simulate",
            "--nodes",
            "16",
            "--per-tenant",
            "9",
            "--tenants",
            "10",
            "--seed",
            "1",
        ],
        &[
            "simulate",
            "--nodes",
            "16",
            "--per-tenant",
            "2",
            "--tenants",
            "10",
        ],
        &[
            "plot",
            "--nodes",
            "16",
            "--per-tenant-max",
            "17",
            "--svg",
            "x.svg",
        ],
        &["plot", "--nodes", "0", "--svg", "x.svg"],
        &[
            "plot",
            "--nodes",
            "16",
            "--svg",
            "/nonexistent-dir/shuffle-lab/x.svg",
        ],
    ];
    for args in cases {
        let out = run(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert_ne!(out.status.code(), Some(101), "{args:?} panicked: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{args:?}: {stderr}");
        assert!(
            stderr.starts_with("shuffle-lab: error"),
            "{args:?}: {stderr}"
        );
        assert!(out.stdout.is_empty(), "{args:?} printed to stdout");
    }
    // Argument errors exit with 2, a file that cannot be written with 1.
    assert_eq!(run(cases[0]).status.code(), Some(2));
    assert_eq!(run(cases[4]).status.code(), Some(2));
    assert_eq!(run(cases[cases.len() - 1]).status.code(), Some(1));
}

#[test]
fn help_works() {
    let out = run(&["--help"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for sub in ["size", "sweep", "simulate", "plot"] {
        assert!(text.contains(sub), "{text}");
    }
}
