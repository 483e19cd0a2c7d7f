//! Runs the built `shuffle-lab` binary with `--borrow-from` and
//! `--lender-reserve`: `size` prints the borrowing model exactly, and
//! `simulate` measures on a real limiter what the model predicts.

use std::collections::BTreeSet;

#[path = "support/lab.rs"]
mod lab;
use lab::{assert_close, f, json, keys, refused, text};

const SIZE_KEYS: &[&str] = &[
    "spill",
    "reserve",
    "spill_sets",
    "p_fully_down",
    "p_fully_down_exact",
    "p_degraded",
    "p_unaffected",
    "sustained_share",
    "sustained_share_exact",
    "burst_share",
    "burst_share_exact",
    "owners_keep",
];

const EIGHT_TWO: &[&str] = &["--buckets", "8", "--per-tenant", "2"];

#[test]
fn size_prints_the_borrowing_model_exactly() {
    let args = [
        &["size"],
        EIGHT_TWO,
        &["--tenants", "400", "--borrow-from", "2"],
    ]
    .concat();
    let v = json(&args);
    let b = &v["borrowing"];
    let mut want: BTreeSet<&str> = SIZE_KEYS.iter().copied().collect();
    want.insert("expected");
    assert_eq!(keys(b), want);
    // The default reserve is the limiter's, a half.
    assert_eq!((b["spill"].as_u64(), f(&b["reserve"])), (Some(2), 0.5));
    assert_eq!(b["spill_sets"], "15");
    assert_eq!(b["p_fully_down_exact"], "1/420");
    assert_close(&b["p_fully_down"], 1.0 / 420.0);
    assert_close(&b["p_unaffected"], 3.0 / 14.0);
    assert_close(&b["p_degraded"], 329.0 / 420.0);
    assert_eq!(b["sustained_share_exact"], "1/2");
    assert_eq!(b["burst_share_exact"], "3/8");
    assert_eq!(f(&b["owners_keep"]), 0.5);
    assert_close(&b["expected"]["fully_down"], 0.95);
    assert_close(&b["expected"]["unaffected"], 399.0 * 3.0 / 14.0);
    // Without borrowing the same command says 399/28 would be down.
    assert_close(&v["expected_fully_down"], 399.0 / 28.0);

    let table = text(&args);
    assert!(
        table.contains("  P(fully down under a flood)      0.002381     (1/420)"),
        "{table}"
    );
    let row = table
        .lines()
        .find(|l| l.contains("with borrowing (d = 2)"))
        .unwrap();
    let words: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(words[words.len() - 3..], ["0.95", "312.55", "85.50"]);
    assert!(table.contains("sustained share of R, alone      0.5          (1/2)"));
    assert!(table.contains("share of B taken at once         0.375        (3/8)"));

    // d = N − k: no own bucket is out of the flooder's reach, and the
    // flooder's shard twins are down as without borrowing.
    let all = [
        &["size"],
        EIGHT_TWO,
        &["--borrow-from", "6", "--lender-reserve", "0.25"],
    ]
    .concat();
    let b = &json(&all)["borrowing"];
    assert_eq!(keys(b), SIZE_KEYS.iter().copied().collect());
    assert_eq!(b["p_fully_down_exact"], "1/28");
    assert_eq!(f(&b["p_unaffected"]), 0.0);
    assert_eq!(b["sustained_share_exact"], "1/1");
    assert_eq!(b["burst_share_exact"], "13/16"); // (2 + 6 · 3/4) / 8
    // Without --borrow-from there is no borrowing section at all.
    let plain = [&["size"], EIGHT_TWO].concat();
    assert!(json(&plain).get("borrowing").is_none());
    assert!(!text(&plain).contains("borrowing"));
}

/// `simulate` with borrowing, as JSON, checked against the model; `r` is
/// the reserve as given on the command line.
fn simulate_matches_the_model(d: u32, r: &str, tenants: u32, seed: u32) {
    let (d_arg, t_arg, s_arg) = (d.to_string(), tenants.to_string(), seed.to_string());
    let args = [
        &["simulate"],
        EIGHT_TWO,
        &["--tenants", &t_arg, "--seed", &s_arg],
        &["--borrow-from", &d_arg, "--lender-reserve", r],
    ]
    .concat();
    let v = json(&args);
    let (b, live) = (&v["borrowing"], &v["live"]);
    let what = format!("d = {d}, r = {r}");
    assert_eq!(b["spill"].as_u64(), Some(u64::from(d)), "{what}");
    assert_eq!(b["flooder_spill"].as_array().unwrap().len(), d as usize);
    // The real assignment: shard twins with the flooder's spill set, and
    // tenants with no own bucket in the flooder's reach, within 4 σ.
    for key in ["assignment_fully_down", "assignment_unaffected"] {
        let (o, e, s) = (
            f(&b[key]["observed"]),
            f(&b[key]["expected"]),
            f(&b[key]["sigma"]),
        );
        assert!(
            (o - e).abs() <= (4.0 * s).max(0.5),
            "{what}, {key}: {o} vs {e} ± {s}"
        );
    }
    // The live flood: the tenants measured down are exactly as many as the
    // model's definitions count on this assignment.
    assert_eq!(
        live["measured"]["fully_down"], live["by_overlap"]["fully_down"],
        "{what}"
    );
    // Whole tokens: each bucket rounds its reserve up and its tokens down,
    // at most one token per bucket the tenant draws on.
    let reach = f64::from(2 + d);
    let burst_off = f(&b["flood_burst"]) - f(&b["flood_burst_predicted"]);
    assert!(
        burst_off.abs() <= reach,
        "{what}: at once off by {burst_off}"
    );
    // Shares of R over the steps after the first, to within those tokens.
    let seconds = (f(&live["steps"]) - 1.0) * f(&live["step_ms"]) / 1000.0;
    let tokens = reach / (f(&live["rate_per_second"]) * seconds);
    let predicted = f(&b["lone_share_predicted"]);
    assert_eq!(predicted, (2.0 + f64::from(d)) / 8.0);
    let lone = f(&b["lone_share"]);
    assert!((lone - predicted).abs() <= tokens, "{what}: alone {lone}");
    assert!(f(&b["flood_share"]) <= f(&b["flood_share_at_most"]) + tokens);
    // What a borrower leaves, and what the owners got.
    assert!(f(&b["lent_fewest_left"]) >= f(&b["lent_reserve_tokens"]));
    if r != "0" {
        assert!(f(&b["lent_reserve_tokens"]) > 0.0, "{what}");
        assert!(f(&b["owners"]) > 0.0, "{what}");
        let fewest = f(&b["owners_min_share"]);
        assert!(fewest >= 0.99, "{what}: an owner got {fewest}");
    }
}

#[test]
fn simulate_measures_what_the_borrowing_model_predicts() {
    simulate_matches_the_model(2, "0.5", 2000, 1);
    simulate_matches_the_model(6, "0.5", 2000, 2);
    simulate_matches_the_model(2, "0.9", 1000, 3);
    simulate_matches_the_model(2, "0", 1000, 4);
}

#[test]
fn simulate_table_and_json_show_the_same_borrowing_numbers() {
    let args = [
        &["simulate"],
        EIGHT_TWO,
        &["--tenants", "400", "--seed", "1", "--borrow-from", "2"],
    ]
    .concat();
    let (table, v) = (text(&args), json(&args));
    let b = &v["borrowing"];
    assert!(table.contains(&format!(
        "flooder at once: {} tokens, predicted {:.2}",
        b["flood_burst"],
        f(&b["flood_burst_predicted"])
    )));
    assert!(table.contains(&format!(
        "lent buckets after the flooder's turn: at least {} tokens left, reserve {} tokens",
        b["lent_fewest_left"], b["lent_reserve_tokens"]
    )));
    let row = table
        .lines()
        .find(|l| l.starts_with("  fully down (shard and spill)"))
        .unwrap();
    let words: Vec<&str> = row.split_whitespace().collect();
    let c = &b["assignment_fully_down"];
    assert_eq!(
        words[5..8],
        [
            c["observed"].to_string(),
            format!("{:.2}", f(&c["expected"])),
            format!("{:.2}", f(&c["sigma"]))
        ]
    );
    // The live rows follow the borrowing model: 399 / 420 predicted down.
    let predicted = table
        .lines()
        .find(|l| l.starts_with("  predicted (math)"))
        .unwrap();
    assert!(predicted.contains(" 0.95 "), "{predicted}");
    assert_close(&v["live"]["predicted"]["fully_down"], 0.95);
    assert!(table.contains("  by the model (this assignment)"));
    // The same run twice prints the same.
    assert_eq!(table, text(&args));
}

#[test]
fn bad_borrowing_arguments_say_what_to_change() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["size", "--borrow-from", "7"],
            "lower --borrow-from to at most 6 or raise --buckets to at least 9",
        ),
        (
            &["size", "--borrow-from", "2", "--lender-reserve", "1"],
            "set --lender-reserve from 0 (lend everything) up to but not including 1",
        ),
        (
            &["size", "--borrow-from", "2", "--lender-reserve", "-0.5"],
            "--lender-reserve -0.5 is not a share",
        ),
        (
            &["size", "--borrow-from", "2", "--lender-reserve", "NaN"],
            "--lender-reserve NaN is not a share",
        ),
        (
            &["size", "--lender-reserve", "0.3"],
            "add --borrow-from D (spill buckets per tenant, at most 6) or drop --lender-reserve",
        ),
        (
            &[
                "simulate",
                "--tenants",
                "50",
                "--seed",
                "1",
                "--borrow-from",
                "7",
            ],
            "lower --borrow-from to at most 6",
        ),
        (
            &[
                "simulate",
                "--tenants",
                "400",
                "--seed",
                "1",
                "--borrow-from",
                "2",
                "--lender-reserve",
                "0.9999",
            ],
            "lower --lender-reserve to at most 0.99968",
        ),
    ];
    for (args, hint) in cases {
        // simulate --borrow-from 7 fits 16 buckets but not a tenant's 8.
        let buckets = if args[0] == "simulate" && args.contains(&"7") {
            "16"
        } else {
            "8"
        };
        let full = [args, &["--buckets", buckets, "--per-tenant", "2"][..]].concat();
        let message = refused(&full);
        assert!(message.contains(hint), "{full:?}: {message}");
        assert!(message.starts_with("shuffle-lab: error: "), "{message}");
    }
    // A bad number is clap's to refuse, with the flag named.
    let message = refused(&[
        "size",
        "--buckets",
        "8",
        "--per-tenant",
        "2",
        "--borrow-from",
        "x",
    ]);
    assert!(message.contains("--borrow-from"), "{message}");
}
