//! What the Redis tests of live changes share: a fleet's load on one
//! limiter (two tasks per process checking 50 tenants as fast as they can
//! until stopped, counting the grants, to check the budget after a change),
//! draining a tenant, and their runtime.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use shuffle_limiter::Limit;
use shuffle_limiter::redis::RedisLimiter;
use tokio::task::JoinHandle;

/// The tasks checking, and what they were granted.
pub(crate) struct Load {
    stop: Arc<AtomicBool>,
    granted: Arc<AtomicU64>,
    tasks: Vec<JoinHandle<()>>,
}

impl Load {
    /// Starts two tasks on each of `processes` (limiters of one name, as
    /// separate processes of a fleet build them).
    pub(crate) fn start(processes: Vec<RedisLimiter>) -> Load {
        let (stop, granted) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicU64::new(0)),
        );
        let mut tasks = Vec::new();
        for (p, process) in (0u64..).zip(processes) {
            let process = Arc::new(process);
            for task in 0..2 {
                let (process, stop, granted) = (process.clone(), stop.clone(), granted.clone());
                tasks.push(tokio::spawn(async move {
                    let mut i = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        i += 1;
                        let tenant = format!("t{}", (i * 4 + p * 2 + task) % 50);
                        if process.check(tenant).await.is_ok() {
                            granted.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }));
            }
        }
        Load {
            stop,
            granted,
            tasks,
        }
    }

    /// Stops the tasks: the grants they got in all.
    pub(crate) async fn stop(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        for task in self.tasks {
            task.await.unwrap();
        }
        self.granted.load(Ordering::Relaxed)
    }
}

/// Grants for `tenant` until the first denial (at most `most`).
pub(crate) async fn drain(limiter: &RedisLimiter, tenant: &str, most: u32) -> u32 {
    for granted in 0..most {
        if limiter.check(tenant).await.is_err() {
            return granted;
        }
    }
    most
}

/// A runtime with two workers, as the tests of live changes run in.
pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}
