//! Runs the built `shuffle-lab` binary and checks what it prints.

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
const IMPACT: &[&str] = &["fully_down", "degraded", "unaffected"];

#[test]
fn size_json_has_exactly_the_documented_keys() {
    let v = json(&["size", "--buckets", "16", "--per-tenant", "2", "--json"]);
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
        "--buckets",
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
        "--buckets",
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
    let v = json(&["size", "--buckets", "1000", "--per-tenant", "500", "--json"]);
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
    let v = json(&["sweep", "--per-tenant", "2", "--buckets", "4..10", "--json"]);
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
    let v = json(&[
        "sweep",
        "--per-tenant",
        "3",
        "--buckets",
        "1..100000",
        "--json",
    ]);
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
fn simulate_matches_the_math_within_four_sigma() {
    for (n, k) in [("16", "2"), ("32", "3")] {
        let v = json(&[
            "simulate",
            "--buckets",
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
        "--buckets",
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
        "--buckets",
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
        "--buckets",
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
    let out = run(&["plot", "--buckets", "16", "--svg", path.to_str().unwrap()]);
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
    assert!(svg.contains("bucket blast radius"));
    assert!(svg.contains("<circle"), "points are drawn");

    // Far below f64's range the curve is still drawn (it plots the exponent).
    let path = temp_svg("plot-wide");
    let out = run(&[
        "plot",
        "--buckets",
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
        &["size", "--buckets", "5", "--per-tenant", "6"],
        &["size", "--buckets", "5", "--per-tenant", "0"],
        &["size", "--buckets", "0", "--per-tenant", "1"],
        &[
            "size",
            "--buckets",
            "16",
            "--per-tenant",
            "2",
            "--failed",
            "17",
        ],
        &["size", "--buckets", "sixteen", "--per-tenant", "2"],
        &["size", "--buckets", "-3", "--per-tenant", "2"],
        &["size", "--buckets", "16"],
        &["size", "--buckets", "100000", "--per-tenant", "50000"],
        &["size", "--buckets", "16", "--per-tenant", "2", "--bogus"],
        &["frobnicate"],
        &["sweep", "--per-tenant", "2", "--buckets", "9..3"],
        &["sweep", "--per-tenant", "2", "--buckets", "12"],
        &["sweep", "--per-tenant", "2", "--buckets", "a..b"],
        &["sweep", "--per-tenant", "5", "--buckets", "1..4"],
        &["sweep", "--per-tenant", "0", "--buckets", "1..4"],
        &[
            "simulate",
            "--buckets",
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
            "--buckets",
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
            "--buckets",
            "16",
            "--per-tenant",
            "2",
            "--tenants",
            "10",
        ],
        &[
            "plot",
            "--buckets",
            "16",
            "--per-tenant-max",
            "17",
            "--svg",
            "x.svg",
        ],
        &["plot", "--buckets", "0", "--svg", "x.svg"],
        &[
            "plot",
            "--buckets",
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

/// Runs a command that must succeed and returns its text output.
fn text(args: &[&str]) -> String {
    let out = run(args);
    assert!(
        out.status.success(),
        "{args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8")
}

/// The same command's table and its JSON (`--json` appended).
fn text_and_json(args: &[&str]) -> (String, Value) {
    let table = text(args);
    let v = json(&[args, &["--json"]].concat());
    (table, v)
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("{v} is not a number"))
}

/// The whitespace-separated words of the first line that starts with `prefix`.
fn row<'a>(table: &'a str, prefix: &str) -> Vec<&'a str> {
    table
        .lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no line starting with {prefix:?} in:\n{table}"))
        .split_whitespace()
        .collect()
}

/// A probability as the tables print one between 0.001 and 0.999.
fn six(x: f64) -> String {
    let s = format!("{x:.6}");
    s.trim_end_matches('0').trim_end_matches('.').to_owned()
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
fn simulate_table_and_json_show_the_same_numbers() {
    let (table, v) = text_and_json(&[
        "simulate",
        "--buckets",
        "12",
        "--per-tenant",
        "3",
        "--tenants",
        "500",
        "--seed",
        "5",
        "--salt",
        "lab",
    ]);
    assert!(table.starts_with(&format!(
        "N = {}, k = {}: {} tenants",
        v["buckets"], v["per_tenant"], v["tenants"]
    )));
    let shard: Vec<String> = v["bad_tenant_shard"]
        .as_array()
        .unwrap()
        .iter()
        .map(ToString::to_string)
        .collect();
    assert!(table.contains(&format!("has buckets [{}]", shard.join(", "))));
    for j in 0..=3 {
        let words = row(&table, &format!("  {j}      "));
        assert_eq!(words[1], v["observed"][j].to_string(), "row {j}");
        assert_eq!(words[2], format!("{:.2}", f(&v["expected"][j])), "row {j}");
        assert_eq!(words[3], format!("{:.2}", f(&v["sigma"][j])), "row {j}");
        assert_eq!(words[4], format!("{:.2}", f(&v["z"][j])), "row {j}");
    }
    let live = &v["live"];
    assert!(table.contains(&format!(
        "budget {}/s with burst {}",
        live["rate_per_second"], live["burst"]
    )));
    assert!(table.contains(&format!("(granted {})", live["flood_granted"])));
    assert!(table.contains(&format!(
        "live: {} tenants for 2 s on a manual clock ({} steps of {} ms)",
        live["tenants"], live["steps"], live["step_ms"]
    )));
    for (prefix, key, float) in [
        ("  predicted (math)", "predicted", true),
        ("  by overlap", "by_overlap", false),
        ("  measured (granted", "measured", false),
    ] {
        let words = row(&table, prefix);
        let want: Vec<String> = IMPACT
            .iter()
            .map(|k| {
                if float {
                    format!("{:.2}", f(&live[key][k]))
                } else {
                    live[key][k].to_string()
                }
            })
            .collect();
        assert_eq!(words[words.len() - 3..], want, "{prefix}");
    }
    let shares: Vec<String> = live["mean_share_by_overlap"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .map(|(j, m)| match m.as_f64() {
            Some(m) => format!("{j}: {:.1}%", m * 100.0),
            None => format!("{j}: -"),
        })
        .collect();
    assert!(
        table.contains(&format!("buckets shared:  {}", shares.join("  "))),
        "{shares:?} in:\n{table}"
    );
}

#[test]
fn plot_json_lists_the_points_it_drew() {
    let path = temp_svg("plot-json");
    let p = path.to_str().unwrap();
    let table = text(&[
        "plot",
        "--buckets",
        "12",
        "--per-tenant-max",
        "5",
        "--svg",
        p,
    ]);
    let v = json(&[
        "plot",
        "--buckets",
        "12",
        "--per-tenant-max",
        "5",
        "--svg",
        p,
        "--json",
    ]);
    let svg = std::fs::read_to_string(&path);
    let _ = std::fs::remove_file(&path);
    assert!(svg.expect("the SVG was written").contains("<circle"));
    assert_eq!(
        table,
        format!(
            "wrote {} (k = 1..={}, N = {})\n",
            v["svg"].as_str().unwrap(),
            v["per_tenant_max"],
            v["buckets"]
        )
    );
    let points = v["points"].as_array().unwrap();
    assert_eq!(points.len(), 5);
    for (i, pt) in points.iter().enumerate() {
        let k = i as u64 + 1;
        assert_eq!(pt["per_tenant"], k);
        assert_close(&pt["bucket_blast_radius"], k as f64 / 12.0);
    }
    // 1/C(12, 1) = 1/12 and 1/C(12, 5) = 1/792, as exponents.
    assert_close(&points[0]["log10_p_identical"], -(12f64.log10()));
    assert_close(&points[4]["log10_p_identical"], -(792f64.log10()));
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

/// The stderr line of a command that must fail with status 2, without the
/// `shuffle-lab: ` prefix.
fn usage_error(args: &[&str]) -> String {
    let out = run(args);
    assert_eq!(out.status.code(), Some(2), "{args:?}");
    let stderr = String::from_utf8(out.stderr).unwrap();
    let line = stderr.trim_end();
    assert_eq!(line.lines().count(), 1, "{args:?}: {stderr}");
    line.strip_prefix("shuffle-lab: ")
        .unwrap_or_else(|| panic!("{args:?}: {stderr}"))
        .to_owned()
}

/// Every `--flag` a message names was passed on the command line.
#[track_caller]
fn names_only_passed_flags(args: &[&str], message: &str) {
    for word in message.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-')) {
        if word.starts_with("--") {
            assert!(
                args.contains(&word),
                "{args:?}: the message names {word}, which was not passed: {message}"
            );
        }
    }
}

#[test]
fn plot_with_zero_buckets_blames_buckets() {
    let args = ["plot", "--buckets", "0", "--svg", "x.svg"];
    let e = usage_error(&args);
    assert!(e.contains("set --buckets to 1 or more"), "{e}");
    names_only_passed_flags(&args, &e);
    // The old spelling is blamed by its new name, the same flag.
    let e = usage_error(&["plot", "--nodes", "0", "--svg", "x.svg"]);
    assert!(e.contains("--buckets is 0"), "{e}");
    assert!(!e.contains("--per-tenant-max"), "{e}");
}

#[test]
fn simulate_with_huge_buckets_says_which_flag_to_lower_and_to_what() {
    for n in ["70000", "200000000", "4294967295"] {
        let args = [
            "simulate",
            "--buckets",
            n,
            "--per-tenant",
            "2",
            "--tenants",
            "2",
            "--seed",
            "1",
        ];
        let e = usage_error(&args);
        assert!(e.contains("lower --buckets to at most 65536"), "{e}");
        names_only_passed_flags(&args, &e);
    }
    let args = [
        "simulate",
        "--buckets",
        "16",
        "--per-tenant",
        "9",
        "--tenants",
        "10",
        "--seed",
        "1",
    ];
    let e = usage_error(&args);
    assert!(e.contains("lower --per-tenant to at most 8"), "{e}");
    names_only_passed_flags(&args, &e);
}

#[test]
fn errors_name_only_flags_that_were_passed_and_say_what_to_change() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["size", "--buckets", "0", "--per-tenant", "1"],
            "set --buckets to 1 or more",
        ),
        (
            &["size", "--buckets", "5", "--per-tenant", "0"],
            "set --per-tenant between 1 and --buckets (5)",
        ),
        (
            &["size", "--buckets", "5", "--per-tenant", "6"],
            "lower --per-tenant to at most 5 or raise --buckets to at least 6",
        ),
        (
            &[
                "size",
                "--buckets",
                "16",
                "--per-tenant",
                "2",
                "--failed",
                "17",
            ],
            "lower --failed to at most 16",
        ),
        (
            &["size", "--buckets", "100000", "--per-tenant", "50000"],
            "lower --per-tenant to at most 2410",
        ),
        (
            &["size", "--buckets", "100000", "--per-tenant", "4000"],
            "lower --per-tenant to at most 2410 or --buckets to at most 27222",
        ),
        (
            &["sweep", "--per-tenant", "0", "--buckets", "1..4"],
            "set --per-tenant to 1 or more",
        ),
        (
            &["sweep", "--per-tenant", "5", "--buckets", "1..4"],
            "raise the end of the --buckets range to at least 5 or lower --per-tenant to at most 4",
        ),
        (
            &["sweep", "--per-tenant", "4000", "--buckets", "8000..100000"],
            "or the end of the --buckets range to at most 27222",
        ),
        (
            &[
                "simulate",
                "--buckets",
                "16",
                "--per-tenant",
                "2",
                "--tenants",
                "1",
                "--seed",
                "1",
            ],
            "set --tenants to at least 2",
        ),
        (
            &[
                "simulate",
                "--buckets",
                "16",
                "--per-tenant",
                "2",
                "--tenants",
                "300000000",
                "--seed",
                "1",
            ],
            "lower --tenants to at most 134217728 or --buckets to at most 7",
        ),
        (
            &[
                "plot",
                "--buckets",
                "3",
                "--per-tenant-max",
                "0",
                "--svg",
                "x.svg",
            ],
            "set --per-tenant-max between 1 and --buckets (3)",
        ),
        (
            &[
                "plot",
                "--buckets",
                "16",
                "--per-tenant-max",
                "17",
                "--svg",
                "x.svg",
            ],
            "lower --per-tenant-max to at most 16 or raise --buckets to at least 17",
        ),
        (
            &[
                "plot",
                "--buckets",
                "3000",
                "--per-tenant-max",
                "600",
                "--svg",
                "x.svg",
            ],
            "lower --per-tenant-max to at most 512",
        ),
    ];
    for (args, want) in cases {
        let e = usage_error(args);
        assert!(e.contains(want), "{args:?}: want {want:?} in: {e}");
        names_only_passed_flags(args, &e);
    }
    // One past each bound is refused (that the bounds themselves are accepted
    // is checked without computing a huge report, in the binary's unit tests).
    for args in [
        ["size", "--buckets", "100000", "--per-tenant", "2411"],
        ["size", "--buckets", "27223", "--per-tenant", "4000"],
    ] {
        assert_eq!(run(&args).status.code(), Some(2), "{args:?}");
    }
}
