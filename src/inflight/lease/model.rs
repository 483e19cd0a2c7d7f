//! The lease scripts in plain Rust, line by line: what the differential
//! test (`tests.rs`) runs beside each script, on the same pools.
//!
//! A pool is its members, `"<token>:<seats>"`, each with its expiry in µs;
//! the scripts keep them in a sorted set, ordered by expiry (then member).

/// One pool: (member, expiry) pairs.
pub(super) type Pool = Vec<(String, u64)>;

/// What a script refuses: a pool that is not one.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct NotAPool;

/// A member's seats, if it is `"<token>:<seats>"`.
pub(super) fn lease_of(member: &str) -> Option<u32> {
    let (token, seats) = member.split_once(':')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(token) || !digits(seats) {
        return None;
    }
    // Lua reads the digits as a double: a long run is "more than 2^32".
    let seats: f64 = seats.parse().ok()?;
    (1.0..=f64::from(u32::MAX))
        .contains(&seats)
        .then_some(seats as u32)
}

/// Sorted as Redis keeps a sorted set: by score, then member.
fn sorted(pool: &mut Pool) {
    pool.sort_by(|a, b| a.1.cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
}

/// `in_use` of pools.lua: reaps, then the seats in use among the first
/// share + 1 members, and the earliest expiry.
fn in_use(pool: &mut Pool, share: u32, now: u64) -> Result<(u64, Option<u64>), NotAPool> {
    pool.retain(|(_, expiry)| *expiry > now);
    sorted(pool);
    let mut used = 0;
    for (member, _) in pool.iter().take(share as usize + 1) {
        used += u64::from(lease_of(member).ok_or(NotAPool)?);
    }
    Ok((used, pool.first().map(|(_, expiry)| *expiry)))
}

/// What an acquire answered.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Acquired {
    /// The token, the expiry, and each position with its seats.
    Leased(u64, u64, Vec<(usize, u32)>),
    /// Not enough free: µs until the earliest expiry in the pools.
    Busy(Option<u64>),
    /// Its record holds a token: it ran already, and this is it sent again.
    Resent,
}

/// What abandon.lua leaves in an acquire's record when it comes first.
pub(super) const TOMBSTONE: &str = "abandoned";

/// acquire.lua: `seats` of `pools` (with their `shares`), all or nothing,
/// as the lease `max(counter + 1, now)` (`now` while the counter is
/// missing): the
/// first `k` pools (the tenant's own) first, then the rest (its spill
/// pools) above their `reserves`, each group the roomiest first, ties from
/// `start`. A lease's token goes in the acquire's `record`; a `record`
/// already there takes nothing and reads nothing: `Resent` when it holds a
/// token (this acquire ran already), `Busy(None)` otherwise (a tombstone).
pub(super) fn acquire(
    pools: &mut [Pool],
    (shares, reserves): (&[u32], &[u32]),
    (counter, record): (&mut Option<u64>, &mut Option<String>),
    (ttl, seats, start, now): (u64, u32, usize, u64),
) -> Result<Acquired, NotAPool> {
    if let Some(held) = record.as_deref() {
        if !held.is_empty() && held.bytes().all(|b| b.is_ascii_digit()) {
            return Ok(Acquired::Resent);
        }
        return Ok(Acquired::Busy(None));
    }
    let k = pools.len() - reserves.len();
    let (mut free, mut sum, mut earliest) = (vec![0u64; pools.len()], 0, None::<u64>);
    for j in 0..pools.len() {
        let floor = if j < k { 0 } else { reserves[j - k] };
        let (used, first) = in_use(&mut pools[j], shares[j], now)?;
        free[j] = u64::from(shares[j]).saturating_sub(used + u64::from(floor));
        sum += free[j];
        if let Some(first) = first {
            earliest = Some(earliest.map_or(first, |e| e.min(first)));
        }
    }
    if sum < u64::from(seats) {
        return Ok(Acquired::Busy(earliest.map(|e| e - now)));
    }
    let token = counter.map_or(now, |last| (last + 1).max(now));
    *counter = Some(token);
    *record = Some(token.to_string());
    let expiry = now + ttl;
    let (mut need, mut tried, mut taken) = (u64::from(seats), vec![false; pools.len()], Vec::new());
    for (first, size) in [(0, k), (k, pools.len() - k)] {
        while need > 0 {
            let (mut best, mut most) = (None, 0);
            for step in 0..size {
                let j = first + (start + step) % size;
                if !tried[j] && free[j] > most {
                    (best, most) = (Some(j), free[j]);
                }
            }
            let Some(best) = best else { break };
            tried[best] = true;
            let got = most.min(need);
            need -= got;
            pools[best].push((format!("{token}:{got}"), expiry));
            sorted(&mut pools[best]);
            taken.push((best, got as u32));
        }
    }
    Ok(Acquired::Leased(token, expiry, taken))
}

/// renew.lua: the lease's `members` (one per pool) renewed to `now + ttl`,
/// or, when one is gone or expired, all of them removed (`None`).
pub(super) fn renew(
    pools: &mut [&mut Pool],
    members: &[String],
    ttl: u64,
    now: u64,
) -> Option<u64> {
    let alive =
        |pool: &Pool, member: &String| pool.iter().any(|(m, expiry)| m == member && *expiry > now);
    let lost = pools.iter().zip(members).any(|(pool, m)| !alive(pool, m));
    for (pool, member) in pools.iter_mut().zip(members) {
        if lost {
            pool.retain(|(m, _)| m != member);
        } else if let Some(entry) = pool.iter_mut().find(|(m, _)| m == member) {
            entry.1 = now + ttl;
        }
        sorted(pool);
    }
    (!lost).then_some(now + ttl)
}

/// release.lua: the lease's own members removed; how many there were.
pub(super) fn release(pools: &mut [&mut Pool], members: &[String]) -> usize {
    let mut removed = 0;
    for (pool, member) in pools.iter_mut().zip(members) {
        let before = pool.len();
        pool.retain(|(m, _)| m != member);
        removed += before - pool.len();
    }
    removed
}

/// abandon.lua: an acquire given up on. Its `record` holds a token: that
/// token's members are removed from `pools`, and the record (`Ok(removed)`);
/// no record: a tombstone takes its place (`Ok(-1)`); a tombstone: nothing
/// (`Ok(0)`); anything else: `NotAPool`, nothing written.
pub(super) fn abandon(pools: &mut [Pool], record: &mut Option<String>) -> Result<i64, NotAPool> {
    let Some(held) = record.as_deref() else {
        *record = Some(TOMBSTONE.to_owned());
        return Ok(-1);
    };
    if held == TOMBSTONE {
        return Ok(0);
    }
    // Lua reads the digits as a double: below 2^53 only.
    let digits = !held.is_empty() && held.bytes().all(|b| b.is_ascii_digit());
    if !digits || held.parse::<f64>().map_or(true, |t| t >= 2f64.powi(53)) {
        return Err(NotAPool);
    }
    let prefix = format!("{held}:");
    let mut removed = 0;
    for pool in pools.iter_mut() {
        let before = pool.len();
        pool.retain(|(m, _)| !m.starts_with(&prefix));
        removed += before - pool.len();
    }
    *record = None;
    Ok(removed as i64)
}
