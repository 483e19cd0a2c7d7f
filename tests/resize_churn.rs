//! Changing N on the real assignment: the share of tenants whose shard
//! changes against `blast`'s exact value, what happens to the others, and
//! the examples and vectors of docs/assignment.md about it.

use shuffle_limiter::Assignment;
use shuffle_limiter::blast::{BlastRadius, Fraction};

#[path = "support/spec.rs"]
mod spec;
use spec::{bucket_list, code, hex_bytes, section};

const TENANTS: u32 = 100_000;

fn tenant(i: u32) -> String {
    format!("tenant-{i}")
}

fn frac(text: &str) -> Fraction {
    let (n, d) = text.split_once('/').unwrap();
    Fraction::new(
        n.trim().parse::<u64>().unwrap(),
        d.trim().parse::<u64>().unwrap(),
    )
    .unwrap()
}

/// Whether two lists hold the same buckets, in any order.
fn same_members(a: &[u32], b: &[u32]) -> bool {
    a.len() == b.len() && a.iter().all(|x| b.contains(x))
}

/// Asserts that `changed` of [`TENANTS`] is within 4 binomial standard
/// errors of the exact share.
#[track_caller]
fn assert_near(what: &str, changed: u32, exact: &Fraction) {
    let p = exact.to_f64();
    let t = f64::from(TENANTS);
    let (measured, se) = (f64::from(changed) / t, (p * (1.0 - p) / t).sqrt());
    assert!(
        (measured - p).abs() <= 4.0 * se,
        "{what}: {changed} of {TENANTS} changed ({measured:.5}), exact {exact} = {p:.5} ± {se:.5}"
    );
}

#[test]
fn the_share_of_changed_shards_is_blasts_exact_value() {
    for (from, to, k) in [(8, 9, 2), (9, 8, 2), (16, 12, 3), (8, 12, 2), (64, 65, 4)] {
        let exact = BlastRadius::new(from, k).unwrap().resize_to(to).unwrap();
        let before = Assignment::new(from, k, b"").unwrap();
        let after = Assignment::new(to, k, b"").unwrap();
        let (lo, k) = (from.min(to), k as usize);
        let mut changed = 0;
        for i in 0..TENANTS {
            let (old, new) = (before.shard(tenant(i)), after.shard(tenant(i)));
            if old.same_set(&new) {
                assert_eq!(
                    old, new,
                    "{from} → {to}: an unchanged shard keeps its order"
                );
                continue;
            }
            changed += 1;
            // The larger shard's buckets below min(N, N′) lead the smaller one.
            let (small, large) = if from < to { (old, new) } else { (new, old) };
            let kept: Vec<u32> = large
                .buckets()
                .iter()
                .copied()
                .filter(|&b| b < lo)
                .collect();
            assert!(kept.len() < k, "{from} → {to}: {small:?}, {large:?}");
            assert_eq!(kept, small.buckets()[..kept.len()], "{from} → {to}");
        }
        assert_near(
            &format!("{from} → {to}, k = {k}"),
            changed,
            exact.p_shard_changed_exact(),
        );
    }
}

#[test]
fn with_spill_sets_the_own_and_spill_buckets_change_as_blast_says() {
    for (from, to, k, d) in [(8, 9, 2, 2), (16, 12, 3, 2)] {
        let lending = BlastRadius::new(from, k)
            .unwrap()
            .borrowing(d, 0.5)
            .unwrap();
        let exact = lending.resize_to(to).unwrap();
        let before = Assignment::new(from, k, b"")
            .unwrap()
            .with_spill(d)
            .unwrap();
        let after = Assignment::new(to, k, b"").unwrap().with_spill(d).unwrap();
        let (mut own, mut ranked) = (0, 0);
        for i in 0..TENANTS {
            let (old, new) = (before.shard(tenant(i)), after.shard(tenant(i)));
            let same_own = old.same_set(&new);
            let same_spill = same_members(old.spill(), new.spill());
            own += u32::from(!same_own);
            ranked += u32::from(!(same_own && same_spill));
            if same_own && same_spill {
                assert_eq!(
                    old, new,
                    "{from} → {to}: unchanged buckets keep their order"
                );
            }
        }
        let what = format!("{from} → {to}, k = {k}, d = {d}");
        assert_near(&what, own, exact.p_shard_changed_exact());
        assert_near(&what, ranked, exact.p_ranked_changed_exact());
    }
}

#[test]
fn the_documented_examples_are_blasts_values() {
    let guaranteed = section("What is guaranteed");
    let rows: Vec<Vec<&str>> = guaranteed
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("| ") && l.as_bytes()[2].is_ascii_digit())
        .map(|l| l.trim_matches('|').split(" | ").map(str::trim).collect())
        .collect();
    assert!(rows.len() >= 5, "{rows:?}");
    for cells in rows {
        let [from, to, k, share] = cells[..] else {
            panic!("{cells:?}")
        };
        let (from, to, k) = (
            from.parse().unwrap(),
            to.parse().unwrap(),
            k.parse().unwrap(),
        );
        let (exact, percent) = share.split_once(" ≈ ").unwrap();
        let churn = BlastRadius::new(from, k).unwrap().resize_to(to).unwrap();
        assert_eq!(*churn.p_shard_changed_exact(), frac(exact), "{cells:?}");
        let percent: f64 = percent.trim_end_matches(" %").parse().unwrap();
        assert!(
            (churn.p_shard_changed() * 100.0 - percent).abs() <= 0.05,
            "{cells:?}"
        );
    }
}

#[test]
fn the_crate_reproduces_the_resize_vectors() {
    let block = section("Known-answer vectors: changing N");
    let mut lines = block.lines().filter(|l| l.starts_with("| "));
    let header: Vec<&str> = lines
        .next()
        .unwrap()
        .trim_matches('|')
        .split(" | ")
        .collect();
    let counts: Vec<u32> = header[2..]
        .iter()
        .map(|h| h.trim().rsplit("N = ").next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(counts, [8, 9, 6, 8, 9, 6], "{header:?}");
    let rows: Vec<&str> = lines.filter(|l| l.contains('`')).collect();
    assert_eq!(rows.len(), 5);
    for line in rows {
        let cells: Vec<&str> = line.trim_matches('|').split(" | ").map(str::trim).collect();
        let key = hex_bytes(code(cells[0]).unwrap());
        assert_eq!(code(cells[1]).unwrap().as_bytes(), &key[..], "{line}");
        for (i, &n) in counts.iter().enumerate() {
            let shard = Assignment::new(n, 2, b"")
                .unwrap()
                .with_spill(2)
                .unwrap()
                .shard(&key);
            let got = if i < 3 {
                shard.buckets()
            } else {
                shard.spill()
            };
            assert_eq!(got, bucket_list(cells[2 + i]), "N = {n}: {line}");
        }
    }
}
