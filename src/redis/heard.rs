//! What a process hears of the fleet between its own draws: the quota
//! another process set live, and the hold-offs the fleet recorded beside
//! the buckets, which a wait that slept reads before it keeps its slot.

use std::sync::atomic::Ordering;

use ::redis::Value;
use ::redis::aio::ConnectionLike;
use tokio::time::timeout;

use super::layout::Layout;
use super::lua::{command, query_by_keys};
use super::quota::parse_quota;
use super::script::MICROS;
use super::store::Shared;
use crate::grant::Booked;
use crate::store::sealed::Local;

impl<Conn, L> Shared<Conn, L>
where
    Conn: ConnectionLike + Clone + Send + Sync + 'static,
    L: Local,
{
    /// Adopts the quota in Redis if another process changed it since this
    /// one last looked, and learns the hold-offs recorded beside the
    /// buckets (one round trip, `catchup.lua`, which passes on only the
    /// instants a hold-off writes); a failure leaves things as they are.
    pub(super) async fn catch_up(&self) {
        // The spread layout: no quota is set live (a version beside a
        // bucket is an error for whoever meets it, never adopted), no
        // hold-off kept.
        let (Layout::OneSlot, Some(held_key)) = (self.options.layout, self.script.held_key())
        else {
            return;
        };
        let mut connection = self.connection.clone();
        let mut cmd = command(&self.changes.catch_up, 2, 0);
        cmd.arg(self.script.quota_key(0)).arg(held_key);
        let read = query_by_keys::<Vec<Value>, _>(&self.changes.catch_up, &cmd, &mut connection);
        let Ok(Ok(reply)) = timeout(self.options.deadline, read).await else {
            return;
        };
        let mut values = reply.into_iter();
        let text = match values.next() {
            Some(Value::BulkString(text)) => Some(text),
            _ => None,
        };
        let mut held = Vec::new();
        while let (Some(Value::BulkString(key)), Some(Value::BulkString(at))) =
            (values.next(), values.next())
        {
            held.push((key, at));
        }
        self.heard_of(&held);
        // A key that does not read as a quota is for `refresh` to refuse.
        let version = text.as_deref().map_or(Some(0), |text| {
            std::str::from_utf8(text)
                .ok()
                .and_then(parse_quota)
                .map(|(version, ..)| version)
        });
        if version != Some(self.version.load(Ordering::Relaxed)) {
            let _ = timeout(self.options.deadline, self.refresh()).await;
        }
    }

    /// Takes the hold-offs `entries` of the hold-offs key (bucket key, then
    /// the instant), ignoring a field that names no bucket of this limiter
    /// or a value that is not a time: such an entry can only keep a booking
    /// its buckets already paid, never add a token.
    fn heard_of(&self, entries: &[(Vec<u8>, Vec<u8>)]) {
        for (key, until) in entries {
            let until = std::str::from_utf8(until)
                .ok()
                .and_then(|u| u.parse::<u64>().ok());
            if let (Some(b), Some(until)) = (self.script.bucket_of(key), until) {
                self.held_until(b, until);
            }
        }
    }

    /// Records that `bucket` is held until `until` (µs, the server's clock).
    pub(super) fn held_until(&self, bucket: u32, until: u64) {
        if let Some(held) = self.held.get(bucket as usize) {
            held.fetch_max(until, Ordering::AcqRel);
        }
    }

    /// Whether a hold-off this process heard of holds one of `booked`'s
    /// buckets past the slot it booked there: the arrival time it wrote
    /// less the bucket's capacity, as in process.
    pub(super) fn held_over(&self, booked: &Booked) -> bool {
        let split = self.split.get();
        let interval = split.interval() / MICROS;
        let payments = booked.grant.payments().iter().zip(booked.written);
        payments.into_iter().any(|(payment, written)| {
            let b = payment.bucket();
            let Some(held) = self.held.get(b as usize) else {
                return false;
            };
            let capacity = u64::from(split.burst_of(b)) * interval;
            written.saturating_sub(capacity) < held.load(Ordering::Acquire)
        })
    }
}
