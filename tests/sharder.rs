//! `Sharder`: the specified assignment over a list of resources. Its shards
//! are the vectors of `docs/assignment.md` (read out of the document), its
//! picks are the users' subsets with j = 1, ids spread evenly over a shard,
//! and taking a member out of service moves only the ids that were on it.

use std::collections::HashSet;

use shuffle_limiter::{Assignment, MAX_BUCKETS, Sharder, SharderError};

#[path = "support/spec.rs"]
mod spec;
use spec::{bucket_list, code, hex_bytes, section};

/// Upper tail of the chi-square distribution with 3 degrees of freedom at
/// p = 1e-6: the x with erfc(√(x/2)) + √(2x/π)·e^(−x/2) = 1e-6, by bisection.
const CHI_SQUARE_3: f64 = 30.664_85;

/// (N, k, salt, tenant, shard) from "Known-answer vectors", and (N, k, j,
/// salt, tenant, user, subset) from "Known-answer vectors: users' subsets".
type TenantRow = (u32, u32, Vec<u8>, Vec<u8>, Vec<u32>);
type UserRow = (u32, u32, u32, Vec<u8>, Vec<u8>, Vec<u8>, Vec<u32>);

fn rows(title: &str, width: usize) -> Vec<Vec<&'static str>> {
    section(title)
        .lines()
        .filter(|line| line.starts_with("| ") && line.as_bytes()[2].is_ascii_digit())
        .map(|line| {
            let cells: Vec<&str> = line.trim_matches('|').split(" | ").map(str::trim).collect();
            assert_eq!(cells.len(), width, "{line}");
            cells
        })
        .collect()
}

fn salt(cell: &str) -> Vec<u8> {
    match cell {
        "none" => Vec::new(),
        other => code(other).unwrap().into(),
    }
}

fn bytes(cell: &str) -> Vec<u8> {
    match cell {
        "-" => Vec::new(),
        other => hex_bytes(code(other).unwrap()),
    }
}

fn tenant_rows() -> Vec<TenantRow> {
    rows("Known-answer vectors", 7)
        .into_iter()
        .map(|c| {
            let (n, k) = (c[0].parse().unwrap(), c[1].parse().unwrap());
            (n, k, salt(c[2]), bytes(c[3]), bucket_list(c[6]))
        })
        .collect()
}

fn user_rows() -> Vec<UserRow> {
    rows("Known-answer vectors: users' subsets", 10)
        .into_iter()
        .map(|c| {
            let (n, k, j) = (
                c[0].parse().unwrap(),
                c[1].parse().unwrap(),
                c[2].parse().unwrap(),
            );
            (
                n,
                k,
                j,
                salt(c[3]),
                bytes(c[4]),
                bytes(c[5]),
                bucket_list(c[9]),
            )
        })
        .collect()
}

/// A sharder over the resources `0..n`, so a member is its own index.
fn indices(n: u32, k: u32, salt: &[u8]) -> Sharder<u32> {
    Sharder::new((0..n).collect(), k, salt).unwrap()
}

#[test]
fn shards_are_the_specified_vectors() {
    let rows = tenant_rows();
    assert!(rows.len() >= 50, "{} vectors", rows.len());
    for (n, k, salt, tenant, shard) in rows {
        let s = indices(n, k, &salt);
        let got: Vec<u32> = s.shard(&tenant).into_iter().copied().collect();
        assert_eq!(got, shard, "N = {n}, k = {k}, tenant {tenant:?}");
        // Over named resources, the same positions.
        let named = Sharder::new((0..n).map(|i| format!("w{i}")).collect(), k, &salt).unwrap();
        let want: Vec<String> = shard.iter().map(|i| format!("w{i}")).collect();
        assert_eq!(named.shard(&tenant), want.iter().collect::<Vec<_>>());
    }
}

#[test]
fn picks_and_retry_orders_are_the_specified_user_subsets() {
    let rows = user_rows();
    assert!(rows.len() >= 100, "{} user vectors", rows.len());
    for (n, k, j, salt, tenant, user, subset) in rows {
        let s = indices(n, k, &salt);
        assert_eq!(*s.pick(&tenant, &user), subset[0], "N {n} k {k} j {j}");
        let order: Vec<u32> = s.retry_order(&tenant, &user, |_| true).copied().collect();
        assert_eq!(order[..j as usize], subset, "N {n} k {k} j {j}");
        let a = Assignment::new(n, k, &salt).unwrap();
        assert_eq!(order, a.user_subset(&tenant, &user, k).unwrap().buckets());
    }
}

#[test]
fn a_pick_is_stable_and_ids_spread_evenly_over_the_shard() {
    let s = indices(64, 4, b"spread");
    for tenant in ["tenant-0", "tenant-1", "acme"] {
        let shard: Vec<u32> = s.shard(tenant).into_iter().copied().collect();
        let ids = 40_000;
        let mut counts = [0u64; 4];
        for id in 0..ids {
            let id = format!("order-{id}");
            let pick = *s.pick(tenant, &id);
            assert_eq!(*s.pick(tenant, &id), pick, "a pick must not change");
            let rank = shard.iter().position(|&m| m == pick).expect("in the shard");
            counts[rank] += 1;
        }
        let expected = f64::from(ids) / 4.0;
        let chi: f64 = counts
            .iter()
            .map(|&c| (c as f64 - expected).powi(2) / expected)
            .sum();
        assert!(chi < CHI_SQUARE_3, "{tenant}: {counts:?}, chi-square {chi}");
    }
}

#[test]
fn the_retry_order_covers_the_shard_and_skips_the_unhealthy() {
    let s = indices(32, 4, b"retry");
    for id in 0..500u32 {
        let (tenant, id) = (format!("t{}", id % 7), id.to_be_bytes());
        let shard: HashSet<u32> = s.shard(&tenant).into_iter().copied().collect();
        let all: Vec<u32> = s.retry_order(&tenant, id, |_| true).copied().collect();
        assert_eq!(all.len(), 4);
        assert_eq!(all.iter().copied().collect::<HashSet<_>>(), shard);
        assert_eq!(all[0], *s.pick(&tenant, id));
        // Any set of sick members: the same order without them.
        for mask in 0u32..16 {
            let sick = |m: &u32| {
                all.iter()
                    .position(|a| a == m)
                    .is_some_and(|r| mask >> r & 1 == 1)
            };
            let healthy: Vec<u32> = s.retry_order(&tenant, id, |m| !sick(m)).copied().collect();
            let want: Vec<u32> = all.iter().copied().filter(|m| !sick(m)).collect();
            assert_eq!(healthy, want);
            assert_eq!(s.pick_healthy(&tenant, id, |m| !sick(m)), want.first());
        }
    }
}

#[test]
fn a_member_taken_out_moves_only_its_ids_and_they_come_back() {
    let s = indices(64, 4, b"churn");
    let tenant = "tenant-9";
    let shard: Vec<u32> = s.shard(tenant).into_iter().copied().collect();
    let gone = shard[1];
    let ids: Vec<String> = (0..20_000).map(|i| format!("queue-key-{i}")).collect();
    let mut moved_to = [0u64; 4];
    let mut on_gone = 0;
    for id in &ids {
        let before = *s.pick(tenant, id);
        let after = *s.pick_healthy(tenant, id, |&m| m != gone).unwrap();
        if before == gone {
            on_gone += 1;
            assert_ne!(after, gone);
            moved_to[shard.iter().position(|&m| m == after).unwrap()] += 1;
        } else {
            assert_eq!(after, before, "{id} was not on the member taken out");
        }
        // Healthy again: back where it was.
        assert_eq!(s.pick_healthy(tenant, id, |_| true), Some(&before));
    }
    // About a quarter of the ids were on it, and they spread over the other three.
    assert!((4_500..5_500).contains(&on_gone), "{on_gone}");
    assert_eq!(moved_to[1], 0);
    for (rank, &c) in moved_to.iter().enumerate().filter(|&(r, _)| r != 1) {
        assert!(
            c * 3 > on_gone * 8 / 10 && c * 3 < on_gone * 12 / 10,
            "{rank}: {moved_to:?}"
        );
    }
}

#[test]
fn replacing_in_place_keeps_everything_and_growing_at_the_end_moves_few_tenants() {
    let old: Vec<String> = (0..16).map(|i| format!("10.0.0.{i}")).collect();
    let mut replaced = old.clone();
    replaced[5] = "10.0.1.5".into();
    let (a, b) = (
        Sharder::new(old.clone(), 3, b"x").unwrap(),
        Sharder::new(replaced, 3, b"x").unwrap(),
    );
    let mut grown = old.clone();
    grown.push("10.0.0.16".into());
    let c = Sharder::new(grown, 3, b"x").unwrap();
    let mut changed = 0;
    for t in 0..6_800 {
        let tenant = format!("tenant-{t}");
        let index = |s: &Sharder<String>| s.assignment().shard(&tenant);
        assert_eq!(index(&a), index(&b));
        let (before, after) = (a.shard(&tenant), c.shard(&tenant));
        if before != after {
            changed += 1;
            // One member out, the new one in.
            assert_eq!(after.iter().filter(|m| !before.contains(m)).count(), 1);
            assert!(after.contains(&&"10.0.0.16".to_string()));
        }
    }
    // A share k / (N + 1) = 3/17 of the 6,800 tenants: 1,200 expected.
    assert!((1_050..1_350).contains(&changed), "{changed}");
}

#[test]
fn bad_sizes_are_refused_with_what_to_change() {
    let err = Sharder::<u8>::new(Vec::new(), 1, b"").unwrap_err();
    assert_eq!(err, SharderError::NoResources);
    assert!(err.to_string().contains("pass at least one"));
    for k in [0, 4] {
        let err = Sharder::new(vec![1, 2, 3], k, b"").unwrap_err();
        assert_eq!(
            err,
            SharderError::PerTenant {
                per_tenant: k,
                resources: 3
            }
        );
        assert!(
            err.to_string().contains("set per_tenant between 1 and 3"),
            "{err}"
        );
    }
    let err = Sharder::new(vec![0u8; 20], 9, b"").unwrap_err();
    assert!(err.to_string().contains("between 1 and 8"), "{err}");
    let many = vec![(); MAX_BUCKETS as usize + 1];
    let err = Sharder::new(many, 2, b"").unwrap_err();
    assert!(
        matches!(err, SharderError::TooManyResources { resources } if resources == MAX_BUCKETS as usize + 1)
    );
    assert!(err.to_string().contains("pass at most 65536"), "{err}");
    assert!(Sharder::new(vec![(); MAX_BUCKETS as usize], 8, b"").is_ok());
}
