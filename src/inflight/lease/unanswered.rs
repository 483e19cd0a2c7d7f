//! The give-back of an acquire whose reply never came.

use std::sync::Arc;

use ::redis::aio::ConnectionLike;
use tokio::time::timeout;

use super::Shared;

/// How many deadlines an acquire's record (its token, or the tombstone of
/// its give-back) lives in Redis: long enough for a give-back sent when
/// the deadline passes, itself bounded by a deadline, to find the token
/// the acquire wrote, or for an acquire that runs after its give-back to
/// find the tombstone; short, since every acquire that grants leaves one.
pub(super) const RECORD_DEADLINES: u32 = 4;

/// An acquire sent, its reply not heard yet. Dropped before it is (the
/// deadline passed, the caller went away, or the round trip failed), it
/// gives the acquire back in a task of its own: the seats it took if the
/// server ran it, or a tombstone that stops it if the server runs it
/// later. Otherwise its seats would stay taken by no one until the TTL.
pub(super) struct Unanswered<Conn>
where
    Conn: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// `None` once the reply is heard.
    shared: Option<Arc<Shared<Conn>>>,
    /// The key of the acquire's record.
    record: String,
    /// The pools asked for: the first `.1` of `.0`.
    pools: ([u32; MAX], usize),
}

const MAX: usize = crate::assign::MAX_PER_TENANT as usize;

impl<Conn> Unanswered<Conn>
where
    Conn: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// An acquire of `pools` about to be sent, with a fresh id.
    pub(super) fn new(shared: &Arc<Shared<Conn>>, pools: &[u32]) -> Self {
        let mut all = [0; MAX];
        all[..pools.len()].copy_from_slice(pools);
        Unanswered {
            shared: Some(Arc::clone(shared)),
            record: shared.scripts.record(&super::script::acquire_id()),
            pools: (all, pools.len()),
        }
    }

    /// The key of its record, which the acquire writes when it grants.
    pub(super) fn record(&self) -> &str {
        &self.record
    }

    /// The reply came: nothing to give back.
    pub(super) fn heard(&mut self) {
        self.shared = None;
    }
}

impl<Conn> Drop for Unanswered<Conn>
where
    Conn: ConnectionLike + Clone + Send + Sync + 'static,
{
    fn drop(&mut self) {
        let Some(shared) = self.shared.take() else {
            return;
        };
        // Outside a runtime nothing can be sent: a lease the acquire made,
        // if any, expires at its TTL.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let record = std::mem::take(&mut self.record);
        let (pools, len) = self.pools;
        runtime.spawn(async move {
            // Cloned from the acquire's connection: on a multiplexed one
            // the give-back follows the acquire on the same socket.
            let mut connection = shared.connection.clone();
            let given =
                shared
                    .scripts
                    .abandon(&mut connection, &pools[..len], (&record, shared.record_ms));
            // A give-back that fails or misses the deadline leaves the
            // lease, if any, to expire at its TTL.
            let _ = timeout(shared.deadline, given).await;
        });
    }
}
