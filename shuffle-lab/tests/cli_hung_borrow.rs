//! Runs the built `shuffle-lab` binary with `simulate --concurrency
//! --borrow-from`: the hung-tenant scene on an in-flight limit that lends,
//! three ways — blast's formula, simulate's measurement on a real
//! `InFlight`, and what this test works out itself from the assignment.
//!
//! The scene keeps every pool in use (each other tenant keeps 4 calls
//! going against 40 permits), so the pools a tenant would borrow from are
//! busy: the measurement follows blast's count for busy pools, and its
//! capacity left, while `tenant-0`'s first calls hang (blast's calls never
//! end). Its calls end after 10 s and, made again, borrow nothing back.

use serde_json::Value;
use shuffle_limiter::inflight::InFlight;

#[path = "support/lab.rs"]
mod lab;
use lab::{HUNG_SCENE, f, json, text, u};

/// The README's scene: the example's, with d = 2 spill pools; add
/// `--lender-reserve r`.
fn scene(extra: &[&'static str]) -> Vec<&'static str> {
    [HUNG_SCENE, &["--borrow-from", "2"], extra].concat()
}

/// (starved, sharing, untouched) of `tenant-1` … `tenant-39` on the
/// assignment simulate uses (salt: seed 1's 8 bytes), once `tenant-0`
/// holds all it can: when the pools it does not reach lend what they have
/// (`idle`), and when they are busy.
fn by_assignment(reserve: f64, idle: bool) -> (u64, u64, u64) {
    let inflight = InFlight::builder()
        .concurrency(40)
        .pools(8)
        .per_tenant(2)
        .borrow_from(2)
        .lender_reserve(reserve)
        .salt(1u64.to_le_bytes())
        .build()
        .unwrap();
    let hung = inflight.shard("tenant-0");
    let within = |mine: &[u32], theirs: &[u32]| mine.iter().all(|p| theirs.contains(p));
    let reach: Vec<u32> = hung.buckets().iter().chain(hung.spill()).copied().collect();
    // With a reserve only its own pools are emptied, and its spill pools
    // keep the reserve; without, its spill pools are emptied too.
    let emptied = if reserve > 0.0 {
        hung.buckets()
    } else {
        &reach
    };
    let closed = if reserve > 0.0 { hung.spill() } else { &reach };
    let mut counts = (0, 0, 0);
    for i in 1..40 {
        let other = inflight.shard(format!("tenant-{i}"));
        let own_empty = within(other.buckets(), emptied);
        if own_empty && (!idle || within(other.spill(), closed)) {
            counts.0 += 1;
        } else if other.buckets().iter().any(|p| reach.contains(p)) {
            counts.1 += 1;
        } else {
            counts.2 += 1;
        }
    }
    counts
}

fn outcome(v: &Value) -> (u64, u64, u64) {
    (u(&v["fully_down"]), u(&v["degraded"]), u(&v["unaffected"]))
}

#[test]
fn a_hung_tenant_that_borrows_holds_its_spill_pools_to_the_reserve() {
    let v = json(&scene(&["--lender-reserve", "0.5"]));
    let h = &v["hung"];
    assert_eq!((u(&h["spill"]), f(&h["lender_reserve"])), (2, 0.5));
    // The formula: its 40 calls hold its two pools' 10 permits and the 2
    // above the reserve (⌈2.5⌉ = 3) of each spill pool: 14, 26 of 40 left.
    assert_eq!(f(&h["held_predicted"]), 14.0);
    assert_eq!(f(&h["borrowed_predicted"]), 4.0);
    assert_eq!(f(&h["capacity_left_predicted"]), 0.65);
    // Starved on an idle limit: its shard and its spill set, 1 in 28 · 15.
    assert_eq!(h["p_starved_exact"], "1/420");
    assert!((f(&h["predicted"]["fully_down"]) - 39.0 / 420.0).abs() < 1e-12);
    // Busy: its shard, 1 in 28, as without borrowing.
    assert!((f(&h["predicted_busy"]["fully_down"]) - 39.0 / 28.0).abs() < 1e-12);
    // Own pools none of its 4: C(4, 2) / C(8, 2) = 6/28.
    let untouched = 39.0 * 6.0 / 28.0;
    assert!((f(&h["predicted"]["unaffected"]) - untouched).abs() < 1e-12);
    assert_eq!(
        (u(&h["hung_pool_permits"]), u(&h["hung_lent_permits"])),
        (10, 4)
    );

    // By this assignment, worked out here.
    assert_eq!(outcome(&h["by_shard"]), by_assignment(0.5, true));
    let busy = by_assignment(0.5, false);
    assert_eq!(outcome(&h["by_shard_busy"]), busy);
    assert!(busy.0 >= 1, "seed 1 puts a tenant on tenant-0's pools");
    assert_eq!(
        (u(&h["held_by_shard"]), u(&h["borrowed_by_shard"])),
        (14, 4)
    );
    assert_eq!(f(&h["capacity_left_by_shard"]), 0.65);

    // The measurement while its first calls hang, on busy pools: exactly
    // the tenants on its own pools starved, and the others use all that
    // is left, 26 of 40, within 1 %.
    assert_eq!(h["measured_first"], h["by_shard_busy"]);
    let first = f(&h["throughput_kept_first"]);
    assert!((first - 0.65).abs() < 0.01, "kept {first}");
    assert_eq!((u(&h["held_most"]), u(&h["borrowed_most"])), (14, 4));
    // Over the run: its calls end at 10 s and, made again, find its spill
    // pools queued for by their owners, so it holds its own 10 from then
    // on: 12 on average (within 0.1), 2 borrowed; the others keep the rest.
    let (held, borrowed) = (f(&h["held_measured"]), f(&h["borrowed_measured"]));
    assert!(
        (held - 12.0).abs() < 0.1 && (borrowed - 2.0).abs() < 0.1,
        "{held} {borrowed}"
    );
    let kept = f(&h["throughput_kept"]);
    assert!((kept - (1.0 - held / 40.0)).abs() < 0.01, "kept {kept}");

    let table = text(&scene(&["--lender-reserve", "0.5"]));
    for row in [
        "borrowing (d = 2, r = 0.5): tenant-0 may also take the 4 permits its spill pools",
        "predicted (blast)                      0.09       30.55        8.36           65.0%",
        "    when the pools are busy              1.39       29.25        8.36\n",
        "tenant-0 holds (borrowed): predicted 14.00 (4.00), by shard 14 (4)",
    ] {
        assert!(table.contains(row), "{row}\n{table}");
    }
}

#[test]
fn without_a_reserve_it_drains_its_spill_pools_which_borrowing_off_would_not() {
    let v = json(&scene(&["--lender-reserve", "0"]));
    let h = &v["hung"];
    // It holds all 4 of its pools, 20 permits: a tenant on an idle limit
    // is starved when its 4 pools are those 4 (1 in C(8, 4) = 70), and on
    // busy pools when its own 2 are among them (6 in 28).
    assert_eq!(h["p_starved_exact"], "1/70");
    assert!((f(&h["predicted_busy"]["fully_down"]) - 39.0 * 6.0 / 28.0).abs() < 1e-12);
    assert_eq!(f(&h["capacity_left_predicted"]), 0.5);
    assert_eq!(outcome(&h["by_shard"]), by_assignment(0.0, true));
    assert_eq!(outcome(&h["by_shard_busy"]), by_assignment(0.0, false));
    assert_eq!(h["measured_first"], h["by_shard_busy"]);
    assert_eq!((u(&h["held_most"]), u(&h["borrowed_most"])), (20, 10));
    let first = f(&h["throughput_kept_first"]);
    assert!((first - 0.5).abs() < 0.01, "kept {first}");

    // The same scene with borrowing off: its own 10 permits and its twins
    // alone. Had simulate ignored --borrow-from, the two would be equal.
    let off = json(HUNG_SCENE);
    let o = &off["hung"];
    assert_eq!((u(&o["held_most"]), u(&o["borrowed_most"])), (10, 0));
    let off_first = f(&o["throughput_kept_first"]);
    assert!((off_first - 0.75).abs() < 0.01, "kept {off_first}");
    let starved = |v: &Value| u(&v["measured_first"]["fully_down"]);
    assert!(
        starved(h) > starved(o),
        "{} {}",
        h["measured_first"],
        o["measured_first"]
    );
    assert_eq!(o["measured_first"], o["by_shard"]);
}
