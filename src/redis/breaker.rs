//! After Redis fails, leave it alone for a while: decisions go straight to
//! the failure policy, and one request at a time probes Redis again.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use super::error::Error;

/// The circuit breaker, on the local clock in microseconds since `epoch`.
#[derive(Debug)]
pub(super) struct Breaker {
    epoch: Instant,
    retry_every: u64,
    /// Until when Redis is left alone; 0 while it is asked.
    open_until: AtomicU64,
    last_error: Mutex<Option<Arc<Error>>>,
}

/// Whether a request may ask Redis.
pub(super) enum Admit {
    /// Yes; `probing` when it is the one request trying Redis after a pause.
    Ask { probing: bool },
    /// No: Redis failed a moment ago, with this error.
    Skip(Option<Arc<Error>>),
}

impl Breaker {
    pub(super) fn new(retry_every: Duration) -> Self {
        Breaker {
            epoch: Instant::now(),
            retry_every: u64::try_from(retry_every.as_micros()).unwrap_or(u64::MAX),
            open_until: AtomicU64::new(0),
            last_error: Mutex::new(None),
        }
    }

    /// Microseconds since the breaker was made, on the local clock.
    pub(super) fn micros(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    /// Whether a request at local time `now` may ask Redis. Only the first
    /// to see a pause over probes; the others keep to the policy until it
    /// answers.
    pub(super) fn admit(&self, now: u64) -> Admit {
        let open = self.open_until.load(Ordering::Relaxed);
        if open == 0 {
            return Admit::Ask { probing: false };
        }
        let probe = now.saturating_add(self.retry_every);
        if now < open
            || self
                .open_until
                .compare_exchange(open, probe, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return Admit::Skip(self.last_error.lock().clone());
        }
        Admit::Ask { probing: true }
    }

    /// Redis answered: ask it again from now on.
    pub(super) fn answered(&self, probing: bool) {
        if probing || self.open_until.load(Ordering::Relaxed) != 0 {
            self.open_until.store(0, Ordering::Relaxed);
        }
    }

    /// Redis failed with `error`: if the failure is Redis's as a whole, leave
    /// it alone for a while.
    pub(super) fn failed(&self, error: &Arc<Error>) {
        if error.is_outage() {
            let until = self.micros().saturating_add(self.retry_every);
            self.open_until.store(until.max(1), Ordering::Relaxed);
            *self.last_error.lock() = Some(Arc::clone(error));
        }
    }

    /// How long until Redis is asked again (never zero).
    pub(super) fn until_probe(&self) -> Duration {
        let open = self.open_until.load(Ordering::Relaxed);
        let wait = if open == 0 {
            self.retry_every
        } else {
            open.saturating_sub(self.micros())
        };
        Duration::from_micros(wait.max(1))
    }
}
