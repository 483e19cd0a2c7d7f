//! After Redis fails, leave it alone for a while — but only where it failed.
//!
//! The breaker is kept per bucket, like the buckets themselves, so that
//! trouble on one tenant's path cannot send every tenant to the failure
//! policy. It opens on evidence, not on one late reply:
//! - a lost connection, refused credentials or any error of Redis as a whole
//!   opens every bucket at once in the one-slot layout (all of them live on
//!   that one server), and only the buckets of the failed request in the
//!   spread layout (the other buckets may live on other nodes);
//! - a missed deadline while Redis still answers other requests is a busy
//!   moment, not a failure: that one request is decided by the policy, and
//!   nobody else is affected;
//! - a missed deadline when Redis has answered nothing for `retry_every`
//!   counts against the buckets of that request, and a bucket opens after
//!   [`FAILURES_TO_OPEN`] in a row with no answer in between.
//!
//! "Redis" is the part of the store that holds the buckets: the whole store
//! in the one-slot layout, each bucket in the spread layout, whose buckets
//! may live on different Cluster nodes: there a stopped node's buckets open
//! while the other nodes keep answering.
//!
//! While any bucket of a request is open, it goes straight to the policy;
//! once the pause is over, one request at a time probes Redis, and an answer
//! closes the request's buckets again.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use super::error::Error;
use super::layout::Layout;

/// Missed deadlines in a row, on one bucket, that open it.
pub(super) const FAILURES_TO_OPEN: u32 = 3;

/// The circuit breaker of every bucket, on the local clock in microseconds
/// since `epoch`.
#[derive(Debug)]
pub(crate) struct Breaker {
    epoch: Instant,
    retry_every: u64,
    /// Whether an error of Redis as a whole opens every bucket (one slot)
    /// or only the request's (spread).
    layout: Layout,
    /// Per bucket: until when Redis is left alone; 0 while it is asked.
    open_until: Box<[AtomicU64]>,
    /// Per bucket: missed deadlines since the last answer.
    failures: Box<[AtomicU32]>,
    /// When Redis last answered any request: one entry for the whole store
    /// (one slot) or one per bucket (spread).
    answered_at: Box<[AtomicU64]>,
    last_error: Mutex<Option<Arc<Error>>>,
}

impl Breaker {
    pub(crate) fn new(buckets: u32, retry_every: Duration, layout: Layout) -> Self {
        let parts = match layout {
            Layout::OneSlot => 1,
            Layout::Spread => buckets,
        };
        Breaker {
            epoch: Instant::now(),
            retry_every: u64::try_from(retry_every.as_micros()).unwrap_or(u64::MAX),
            layout,
            open_until: (0..buckets).map(|_| AtomicU64::new(0)).collect(),
            failures: (0..buckets).map(|_| AtomicU32::new(0)).collect(),
            answered_at: (0..parts).map(|_| AtomicU64::new(0)).collect(),
            last_error: Mutex::new(None),
        }
    }

    /// Microseconds since the breaker was made, on the local clock.
    pub(crate) fn micros(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    /// When the part of the store holding `bucket` last answered.
    fn answered_at(&self, bucket: u32) -> &AtomicU64 {
        let part = if self.answered_at.len() == 1 {
            0
        } else {
            bucket as usize
        };
        &self.answered_at[part]
    }

    /// Whether a request over `buckets` may ask Redis now: `Err` with the
    /// error that paused them when it may not. Only the first to see a
    /// bucket's pause over probes; the others keep to the policy until it
    /// answers. The pause is on the local clock as it reads now, whatever
    /// instant the request draws at (a booking draws later): a pause
    /// checked or renewed at a later instant would let a booking probe
    /// early and push the next probe out by its lead.
    pub(crate) fn admit(&self, buckets: &[u32]) -> Result<(), Option<Arc<Error>>> {
        let now = self.micros();
        let open = |b: u32| self.open_until[b as usize].load(Ordering::Relaxed);
        let mut paused = false;
        for &b in buckets {
            match open(b) {
                0 => {}
                until if now < until => return Err(self.last_error.lock().clone()),
                _ => paused = true,
            }
        }
        if !paused {
            return Ok(());
        }
        let probe = now.saturating_add(self.retry_every);
        for &b in buckets {
            let until = open(b);
            if until != 0
                && self.open_until[b as usize]
                    .compare_exchange(until, probe, Ordering::Relaxed, Ordering::Relaxed)
                    .is_err()
            {
                // Another request took this probe.
                return Err(self.last_error.lock().clone());
            }
        }
        Ok(())
    }

    /// Redis answered for `buckets` at local time `now`: ask it again for
    /// them.
    pub(crate) fn answered(&self, buckets: &[u32], now: u64) {
        for &b in buckets {
            self.answered_at(b).fetch_max(now, Ordering::Relaxed);
            let b = b as usize;
            if self.failures[b].load(Ordering::Relaxed) != 0 {
                self.failures[b].store(0, Ordering::Relaxed);
            }
            if self.open_until[b].load(Ordering::Relaxed) != 0 {
                self.open_until[b].store(0, Ordering::Relaxed);
            }
        }
    }

    /// Redis failed for `buckets` with `error`: open what the error is
    /// evidence against.
    pub(crate) fn failed(&self, buckets: &[u32], error: &Arc<Error>) {
        if !error.is_outage() {
            return; // one shard's keys or one reply: nothing to pause
        }
        let now = self.micros();
        let until = now.saturating_add(self.retry_every).max(1);
        let mut opened = false;
        if matches!(**error, Error::Timeout { .. }) {
            for &b in buckets {
                // A late reply while that part of Redis answers others is a
                // busy moment, not a failure: count it only when nothing
                // was answered lately.
                let answered = self.answered_at(b).load(Ordering::Relaxed);
                if now.saturating_sub(answered) < self.retry_every {
                    continue;
                }
                let b = b as usize;
                if self.failures[b].fetch_add(1, Ordering::Relaxed) + 1 >= FAILURES_TO_OPEN {
                    self.open_until[b].store(until, Ordering::Relaxed);
                    opened = true;
                }
            }
        } else {
            let all = match self.layout {
                Layout::OneSlot => &self.open_until[..],
                Layout::Spread => &[][..],
            };
            for cell in all {
                cell.store(until, Ordering::Relaxed);
            }
            for &b in buckets {
                self.open_until[b as usize].store(until, Ordering::Relaxed);
            }
            opened = true;
        }
        if opened {
            *self.last_error.lock() = Some(Arc::clone(error));
        }
    }

    /// How long until Redis is asked again for `buckets` (never zero).
    pub(super) fn until_probe(&self, buckets: &[u32]) -> Duration {
        let now = self.micros();
        let wait = buckets
            .iter()
            .map(|&b| self.open_until[b as usize].load(Ordering::Relaxed))
            .filter(|&open| open != 0)
            .map(|open| open.saturating_sub(now))
            .max()
            .unwrap_or(self.retry_every);
        Duration::from_micros(wait.max(1))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::{Breaker, FAILURES_TO_OPEN};
    use crate::redis::error::Error;
    use crate::redis::layout::Layout;
    use crate::{Assignment, Shard};

    const RETRY: Duration = Duration::from_millis(100);

    fn shards() -> (Shard, Shard) {
        let a = Assignment::new(8, 2, b"").unwrap();
        let one = a.shard("one");
        let other = (0..100)
            .map(|i| a.shard(format!("other-{i}")))
            .find(|s| s.overlap(&one) == 0)
            .unwrap();
        (one, other)
    }

    fn timeout() -> Arc<Error> {
        Arc::new(Error::Timeout {
            after: Duration::from_millis(5),
        })
    }

    #[tokio::test(start_paused = true)]
    async fn a_late_reply_while_redis_answers_others_pauses_nothing() {
        let breaker = Breaker::new(8, RETRY, Layout::OneSlot);
        let (one, other) = shards();
        tokio::time::advance(Duration::from_secs(1)).await;
        breaker.answered(other.buckets(), breaker.micros());
        for _ in 0..10 {
            breaker.failed(one.buckets(), &timeout());
        }
        assert!(breaker.admit(one.buckets()).is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn timeouts_with_no_answer_pause_only_their_own_shard() {
        let breaker = Breaker::new(8, RETRY, Layout::OneSlot);
        let (one, other) = shards();
        tokio::time::advance(Duration::from_secs(1)).await;
        for i in 1..=FAILURES_TO_OPEN {
            assert!(breaker.admit(one.buckets()).is_ok(), "after {i}");
            breaker.failed(one.buckets(), &timeout());
        }
        assert!(breaker.admit(one.buckets()).is_err());
        assert!(
            breaker.admit(other.buckets()).is_ok(),
            "another shard was paused"
        );
        assert!(breaker.until_probe(one.buckets()) <= RETRY);
        // After the pause one request probes, the next waits for it; an
        // answer closes the shard again.
        tokio::time::advance(RETRY).await;
        assert!(breaker.admit(one.buckets()).is_ok());
        assert!(breaker.admit(one.buckets()).is_err());
        breaker.answered(one.buckets(), breaker.micros());
        assert!(breaker.admit(one.buckets()).is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn a_lost_connection_pauses_everyone_and_a_bad_key_nobody() {
        let breaker = Breaker::new(8, RETRY, Layout::OneSlot);
        let (one, other) = shards();
        let bad_key = Arc::new(Error::NotABucket {
            key: "k".into(),
            detail: String::new(),
        });
        breaker.failed(one.buckets(), &bad_key);
        assert!(breaker.admit(one.buckets()).is_ok());
        let lost = Arc::new(Error::Reply {
            detail: String::new(),
        });
        breaker.failed(one.buckets(), &lost);
        assert!(breaker.admit(one.buckets()).is_ok());
        let refused = Arc::new(Error::Connection {
            source: ::redis::RedisError::from(std::io::Error::from(
                std::io::ErrorKind::ConnectionRefused,
            )),
        });
        breaker.failed(one.buckets(), &refused);
        assert!(breaker.admit(one.buckets()).is_err());
        assert!(breaker.admit(other.buckets()).is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn spread_a_silent_bucket_opens_while_others_answer_and_a_lost_one_alone() {
        let breaker = Breaker::new(8, RETRY, Layout::Spread);
        tokio::time::advance(Duration::from_secs(1)).await;
        // Bucket 3 never answers; bucket 5 (on another node) keeps answering.
        for i in 1..=FAILURES_TO_OPEN {
            assert!(breaker.admit(&[3]).is_ok(), "after {i}");
            breaker.answered(&[5], breaker.micros());
            breaker.failed(&[3], &timeout());
        }
        assert!(breaker.admit(&[3]).is_err(), "the silent bucket opens");
        assert!(breaker.admit(&[5]).is_ok());
        assert!(breaker.admit(&[0, 1, 2, 4, 6, 7]).is_ok());
        // A lost connection to one bucket's node opens that bucket only.
        let refused = Arc::new(Error::Connection {
            source: ::redis::RedisError::from(std::io::Error::from(
                std::io::ErrorKind::ConnectionRefused,
            )),
        });
        breaker.failed(&[6], &refused);
        assert!(breaker.admit(&[6]).is_err());
        assert!(breaker.admit(&[0, 1, 2, 4, 5, 7]).is_ok());
    }
}
