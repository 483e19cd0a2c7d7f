//! Runs the built `shuffle-lab` binary's `size` and `sweep` and checks
//! what they print: the JSON's keys and exact numbers, and the tables.

use serde_json::Value;

#[path = "support/lab.rs"]
mod lab;
use lab::{IMPACT, assert_close, f, json, keys, row, run, set, six, text, text_and_json};

const BASE: &[&str] = &[
    "buckets",
    "per_tenant",
    "shards",
    "p_identical",
    "p_disjoint",
    "p_any_overlap",
    "overlap_pmf",
    "overlap_pmf_exact",
    "bucket_blast_radius",
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

#[test]
fn size_json_has_exactly_the_documented_keys() {
    let v = json(&["size", "--buckets", "16", "--per-tenant", "2"]);
    assert_eq!(keys(&v), set(BASE));
    assert_eq!(v["buckets"], 16);
    assert_eq!(v["per_tenant"], 2);
    assert_eq!(v["shards"], "120");
    assert_close(&v["p_identical"], 1.0 / 120.0);
    assert_close(&v["p_disjoint"], 91.0 / 120.0);
    assert_close(&v["p_any_overlap"], 29.0 / 120.0);
    assert_eq!(v["bucket_blast_radius"], 0.125);
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
        "--buckets",
        "16",
        "--per-tenant",
        "2",
        "--tenants",
        "400",
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
        "--buckets",
        "16",
        "--per-tenant",
        "2",
        "--failed",
        "2",
    ]);
    assert_eq!(keys(&v), set(&[BASE, FAILED].concat()));
    assert_eq!(v["failed"], 2);
    assert_close(&v["p_all_failed"], 1.0 / 120.0);
    assert_close(&v["p_touched"], 29.0 / 120.0);

    let v = json(&[
        "size",
        "--buckets",
        "10",
        "--per-tenant",
        "3",
        "--tenants",
        "50",
        "--failed",
        "4",
    ]);
    assert_eq!(keys(&v), set(&[BASE, TENANTS, FAILED].concat()));
    assert_eq!(v["fixed_shards"], Value::Null, "3 does not divide 10");
    assert_eq!(v["overlap_pmf"].as_array().unwrap().len(), 4);
    assert_eq!(v["overlap_pmf_exact"].as_array().unwrap().len(), 4);
}

#[test]
fn size_is_exact_for_huge_shard_counts() {
    let v = json(&["size", "--buckets", "1000", "--per-tenant", "500"]);
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
        "--buckets",
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
    let v = json(&["sweep", "--per-tenant", "2", "--buckets", "4..10"]);
    assert_eq!(keys(&v), set(&["per_tenant", "rows"]));
    let rows = v["rows"].as_array().unwrap();
    let ns: Vec<u64> = rows
        .iter()
        .map(|r| r["buckets"].as_u64().unwrap())
        .collect();
    assert_eq!(ns, [4, 5, 6, 7, 8, 9, 10]);
    for r in rows {
        assert_eq!(
            keys(r),
            set(&["buckets", "shards", "p_identical", "bucket_blast_radius"])
        );
    }
    assert_eq!(rows[4]["shards"], "28");
    assert_eq!(rows[4]["bucket_blast_radius"], 0.25);

    // A wide range is sampled geometrically, ends included; N below k is skipped.
    let v = json(&["sweep", "--per-tenant", "3", "--buckets", "1..100000"]);
    let ns: Vec<u64> = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["buckets"].as_u64().unwrap())
        .collect();
    assert!(ns.len() >= 10 && ns.len() <= 30, "{ns:?}");
    assert_eq!(ns.first(), Some(&3));
    assert_eq!(ns.last(), Some(&100_000));
    assert!(ns.windows(2).all(|w| w[0] < w[1]), "{ns:?}");
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

#[test]
fn size_table_and_json_show_the_same_numbers() {
    let (table, v) = text_and_json(&[
        "size",
        "--buckets",
        "10",
        "--per-tenant",
        "2",
        "--tenants",
        "77",
        "--failed",
        "3",
    ]);
    assert!(table.starts_with(&format!(
        "N = {} buckets, k = {} per tenant\n",
        v["buckets"], v["per_tenant"]
    )));
    assert_eq!(
        row(&table, "  distinct shards")[3],
        v["shards"].as_str().unwrap()
    );
    assert_eq!(
        row(&table, "  P(identical shard)")[3],
        six(f(&v["p_identical"]))
    );
    assert_eq!(
        row(&table, "  P(no shared bucket)")[3],
        six(f(&v["p_disjoint"]))
    );
    assert_eq!(
        row(&table, "  P(some shared bucket)")[3],
        six(f(&v["p_any_overlap"]))
    );
    assert_eq!(
        row(&table, "  bucket blast radius k/N")[4],
        six(f(&v["bucket_blast_radius"]))
    );
    let pmf = v["overlap_pmf"].as_array().unwrap();
    let exact = v["overlap_pmf_exact"].as_array().unwrap();
    for (j, (q, e)) in pmf.iter().zip(exact).enumerate() {
        let words = row(&table, &format!("  {j}  "));
        assert_eq!(words[1], six(f(q)), "row {j}");
        assert_eq!(words[2], e.as_str().unwrap(), "row {j}");
    }
    let shuffle = row(&table, "  shuffle sharding");
    let want: Vec<String> = [
        "expected_fully_down",
        "expected_degraded",
        "expected_unaffected",
    ]
    .iter()
    .map(|k| format!("{:.2}", f(&v[k])))
    .collect();
    assert_eq!(shuffle[shuffle.len() - 3..], want);
    for (prefix, key) in [
        ("  fixed shards", "fixed_shards"),
        ("  one shared pool", "shared_pool"),
    ] {
        let words = row(&table, prefix);
        let want: Vec<String> = IMPACT
            .iter()
            .map(|k| format!("{:.2}", f(&v[key][k])))
            .collect();
        assert_eq!(words[words.len() - 3..], want, "{prefix}");
    }
    assert!(table.contains(&format!(
        "one of {} tenants floods its whole shard",
        v["tenants"]
    )));
    assert!(table.contains(&format!(
        "with {} of {} buckets failed",
        v["failed"], v["buckets"]
    )));
    assert_eq!(
        row(&table, "  P(all k buckets")[7],
        six(f(&v["p_all_failed"]))
    );
    assert_eq!(row(&table, "  P(a tenant lost")[6], six(f(&v["p_touched"])));
}

#[test]
fn sweep_table_and_json_show_the_same_numbers() {
    let (table, v) = text_and_json(&["sweep", "--per-tenant", "2", "--buckets", "4..40"]);
    assert!(table.starts_with(&format!("k = {} buckets per tenant\n", v["per_tenant"])));
    let rows = v["rows"].as_array().unwrap();
    // A header line, then one line per row, in the same order.
    let lines: Vec<&str> = table.lines().skip(2).collect();
    assert_eq!(lines.len(), rows.len());
    for (line, r) in lines.iter().zip(rows) {
        let words: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(words[0], r["buckets"].to_string());
        assert_eq!(words[1], r["shards"].as_str().unwrap());
        assert_eq!(words[2], six(f(&r["p_identical"])));
        assert_eq!(words[3], six(f(&r["bucket_blast_radius"])));
    }
}

#[test]
fn nodes_is_a_hidden_alias_for_buckets() {
    for (old, new) in [
        (
            vec!["size", "--nodes", "16", "--per-tenant", "2", "--json"],
            vec!["size", "--buckets", "16", "--per-tenant", "2", "--json"],
        ),
        (
            vec!["sweep", "--per-tenant", "2", "--nodes", "4..9"],
            vec!["sweep", "--per-tenant", "2", "--buckets", "4..9"],
        ),
        (
            vec![
                "simulate",
                "--nodes",
                "8",
                "--per-tenant",
                "2",
                "--tenants",
                "50",
                "--seed",
                "1",
            ],
            vec![
                "simulate",
                "--buckets",
                "8",
                "--per-tenant",
                "2",
                "--tenants",
                "50",
                "--seed",
                "1",
            ],
        ),
    ] {
        assert_eq!(text(&old), text(&new), "{old:?}");
    }
    for sub in ["size", "sweep", "simulate", "plot"] {
        let help = text(&[sub, "--help"]);
        assert!(help.contains("--buckets"), "{sub}: {help}");
        assert!(!help.contains("--nodes"), "{sub}: {help}");
    }
}
