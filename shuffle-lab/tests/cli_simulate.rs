//! Runs the built `shuffle-lab simulate` and checks what it prints: the
//! measured overlap against the math, its seed, and its table against its
//! JSON.

#[path = "support/lab.rs"]
mod lab;
use lab::{IMPACT, f, json, row, run, text_and_json};

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
    ]);
    assert_ne!(c["observed"], d["observed"]);
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
