//! Runs the built `shuffle-lab` binary with `simulate --concurrency`: the
//! hung-tenant scene of the `hung_tenant` example, three ways — blast's
//! formula, simulate's measurement on a real in-flight limit, and what
//! this test works out itself from the limit's assignment.

use shuffle_limiter::inflight::InFlight;

#[path = "support/lab.rs"]
mod lab;
use lab::{HUNG_SCENE, f, json, refused, text, u};

/// The example's scene.
const SCENE: &[&str] = HUNG_SCENE;

/// The tenants 1..40 by how many of `tenant-0`'s pools they hold, on the
/// assignment simulate uses (salt: the seed's 8 bytes).
fn overlaps(seed: u64) -> Vec<usize> {
    let inflight = InFlight::builder()
        .concurrency(40)
        .pools(8)
        .per_tenant(2)
        .salt(seed.to_le_bytes())
        .build()
        .unwrap();
    let hung = inflight.shard("tenant-0");
    (1..40)
        .map(|i| inflight.shard(format!("tenant-{i}")).overlap(&hung))
        .collect()
}

#[test]
fn the_hung_tenant_starves_only_its_twins_as_blast_predicts() {
    let v = json(SCENE);
    let h = &v["hung"];
    // The formula: 1 in C(8, 2) = 28 of the 39 others on tenant-0's pair,
    // which its 40 calls fill (2 pools of 5), leaving 30 of the 40 permits.
    assert_eq!(h["p_starved_exact"], "1/28");
    assert!((f(&h["predicted"]["fully_down"]) - 39.0 / 28.0).abs() < 1e-12);
    // Sharing none: C(6, 2) / C(8, 2) = 15/28.
    assert!((f(&h["predicted"]["unaffected"]) - 39.0 * 15.0 / 28.0).abs() < 1e-12);
    assert_eq!(f(&h["capacity_left_predicted"]), 0.75);
    assert_eq!(f(&h["shared_predicted_starved"]), 39.0);
    assert_eq!(u(&h["hung_pool_permits"]), 10);

    // By this assignment, worked out here.
    let overlap = overlaps(1);
    let twins = overlap.iter().filter(|&&j| j == 2).count() as u64;
    let sharing = overlap.iter().filter(|&&j| j == 1).count() as u64;
    let by = &h["by_shard"];
    assert_eq!(
        (
            u(&by["fully_down"]),
            u(&by["degraded"]),
            u(&by["unaffected"])
        ),
        (twins, sharing, 39 - twins - sharing)
    );
    assert!(twins >= 1, "seed 1 puts a twin among the 39");
    // The measurement: exactly the twins are starved, nobody else.
    assert_eq!(h["measured"], h["by_shard"]);
    assert!(
        f(&h["kept_by_overlap"][2]) <= 0.05,
        "{}",
        h["kept_by_overlap"]
    );
    // The others ask for more than there is (4 calls each against 40
    // permits), so they use all that is left: 30 of 40, within 1 %.
    let kept = f(&h["throughput_kept"]);
    assert!((kept - 0.75).abs() < 0.01, "kept {kept}");
    assert_eq!(f(&h["capacity_left_by_shard"]), 0.75);
    // Through one shared limit of 40 every other tenant is starved.
    assert_eq!(u(&h["shared_starved"]), 39);
    assert!(u(&h["shared_others_completed"]) * 20 <= u(&h["others_completed_alone"]));

    let table = text(SCENE);
    assert!(
        table.contains("hung tenant: an in-flight limit of C = 40"),
        "{table}"
    );
    assert!(table.contains("predicted (blast)                      1.39       16.71"));
    assert!(table.contains("(measured 39 starved)"), "{table}");
}

#[test]
fn a_hung_load_below_its_pools_starves_nobody() {
    // 8 calls cannot fill two pools of 5: the twins keep 2 permits.
    let v = json(&[SCENE, &["--hung-calls", "8"]].concat());
    let h = &v["hung"];
    assert_eq!(h["p_starved_exact"], "0/1");
    assert_eq!(f(&h["predicted"]["fully_down"]), 0.0);
    assert_eq!(u(&h["by_shard"]["fully_down"]), 0);
    assert_eq!(u(&h["measured"]["fully_down"]), 0);
    assert_eq!(f(&h["capacity_left_predicted"]), 0.8);
    let kept = f(&h["throughput_kept"]);
    assert!((kept - 0.8).abs() < 0.01, "kept {kept}");
    // One shared limit of 40 keeps 32 permits for the others: nobody starved.
    assert_eq!(u(&h["shared_starved"]), 0);
}

#[test]
fn bad_scene_arguments_say_what_to_change() {
    let below = refused(&[&SCENE[..9], &["--concurrency", "7"]].concat());
    assert!(
        below.contains("--concurrency 7 cannot be split into --buckets 8 pools")
            && below.contains("set --concurrency to at least 8"),
        "{below}"
    );
    let zero = refused(&[&SCENE[..9], &["--concurrency", "0"]].concat());
    assert!(zero.contains("set --concurrency to at least 8"), "{zero}");
    let alone = refused(&[&SCENE[..9], &["--hung-calls", "4"]].concat());
    assert!(
        alone.contains("--hung-calls 4 needs --concurrency"),
        "{alone}"
    );
    let many = refused(&[SCENE, &["--hung-calls", "1000000"]].concat());
    assert!(
        many.contains("lower --hung-calls to at most 100000"),
        "{many}"
    );
    let reserve = refused(&[SCENE, &["--lender-reserve", "0.5"]].concat());
    assert!(
        reserve.contains("--lender-reserve 0.5 has no effect without --borrow-from"),
        "{reserve}"
    );
    // Without --concurrency there is no scene.
    let plain = json(&SCENE[..9]);
    assert!(plain.get("hung").is_none());
}
