//! The in-flight limit shared by threads: random acquires, weights,
//! releases and cancellations never put more than C permits out, nor more
//! than a pool's share from one pool, nor (with borrowing) more than its
//! share less its reserve lent from one pool, and every permit comes back
//! once.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::mpsc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::Thread;
use std::time::Duration;

use proptest::prelude::*;
use shuffle_limiter::Request;
use shuffle_limiter::inflight::{InFlight, OwnedPermit, Permit, RejectReason, Rejected};

/// Wakes a parked thread; remembers a wake that came before the park.
struct Unpark {
    thread: Thread,
    woken: AtomicBool,
}

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.thread.unpark();
    }
}

/// Polls `future` to completion on this thread, parking between wakes: a
/// lost wake-up parks it for ever (the test then fails on its deadline).
fn block_on<F: Future>(future: F) -> F::Output {
    let unpark = Arc::new(Unpark {
        thread: std::thread::current(),
        woken: AtomicBool::new(false),
    });
    let waker = Waker::from(unpark.clone());
    let mut future = pin!(future);
    loop {
        if let Poll::Ready(out) = future.as_mut().poll(&mut Context::from_waker(&waker)) {
            return out;
        }
        while !unpark.woken.swap(false, Ordering::Acquire) {
            std::thread::park();
        }
    }
}

/// Each op takes a borrowed [`Permit`] or, when `owned`, an
/// [`OwnedPermit`] of the shared limit.
#[derive(Debug, Clone)]
enum Op {
    /// try_acquire, then hold for `hold` yields.
    Try {
        tenant: u8,
        seats: u32,
        hold: u8,
        owned: bool,
    },
    /// acquire to the end, then hold.
    Wait {
        tenant: u8,
        seats: u32,
        hold: u8,
        owned: bool,
    },
    /// acquire, polled `polls` times, then dropped (a permit it got is
    /// dropped with it).
    Cancel {
        tenant: u8,
        seats: u32,
        polls: u8,
        owned: bool,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let seats = prop_oneof![4 => Just(1u32), 1 => 2u32..=4];
    let owned = any::<bool>();
    prop_oneof![
        (0u8..6, seats.clone(), 0u8..4, owned).prop_map(|(tenant, seats, hold, owned)| {
            Op::Try {
                tenant,
                seats,
                hold,
                owned,
            }
        }),
        (0u8..6, seats.clone(), 0u8..4, owned).prop_map(|(tenant, seats, hold, owned)| {
            Op::Wait {
                tenant,
                seats,
                hold,
                owned,
            }
        }),
        (0u8..6, seats, 0u8..3, owned).prop_map(|(tenant, seats, polls, owned)| {
            Op::Cancel {
                tenant,
                seats,
                polls,
                owned,
            }
        }),
    ]
}

/// What the books read of either kind of permit.
trait Held {
    fn seats(&self) -> u32;
    fn held(&self) -> Vec<(u32, u32)>;
}

impl Held for Permit<'_> {
    fn seats(&self) -> u32 {
        Permit::seats(self)
    }
    fn held(&self) -> Vec<(u32, u32)> {
        self.pools().collect()
    }
}

impl Held for OwnedPermit {
    fn seats(&self) -> u32 {
        OwnedPermit::seats(self)
    }
    fn held(&self) -> Vec<(u32, u32)> {
        self.pools().collect()
    }
}

/// What the test sees out, checked against the limit at every acquire.
struct Books {
    inflight: Arc<InFlight>,
    out: AtomicU32,
    per_pool: Vec<AtomicU32>,
    /// Seats of each pool held by tenants that borrowed them.
    lent: Vec<AtomicU32>,
    broken: AtomicBool,
}

impl Books {
    fn took(&self, tenant: &str, permit: &impl Held) {
        let out = self.out.fetch_add(permit.seats(), Ordering::SeqCst) + permit.seats();
        let shard = self.inflight.shard(tenant);
        let mut ok = out <= self.inflight.concurrency();
        for (pool, seats) in permit.held() {
            let held = self.per_pool[pool as usize].fetch_add(seats, Ordering::SeqCst) + seats;
            ok &= held <= self.inflight.permits(pool);
            if !shard.contains(pool) {
                let lent = self.lent[pool as usize].fetch_add(seats, Ordering::SeqCst) + seats;
                let lendable = self.inflight.permits(pool) - self.inflight.reserve(pool);
                ok &= shard.spill().contains(&pool) && lent <= lendable;
            }
        }
        if !ok {
            self.broken.store(true, Ordering::SeqCst);
        }
    }

    fn gives_back(&self, tenant: &str, permit: impl Held) {
        let shard = self.inflight.shard(tenant);
        for (pool, seats) in permit.held() {
            self.per_pool[pool as usize].fetch_sub(seats, Ordering::SeqCst);
            if !shard.contains(pool) {
                self.lent[pool as usize].fetch_sub(seats, Ordering::SeqCst);
            }
        }
        self.out.fetch_sub(permit.seats(), Ordering::SeqCst);
        drop(permit);
    }

    fn hold(&self, tenant: &str, permit: impl Held, hold: u8) {
        self.took(tenant, &permit);
        for _ in 0..hold {
            std::thread::yield_now();
        }
        self.gives_back(tenant, permit);
    }

    fn run(&self, op: &Op) {
        match *op {
            Op::Try {
                tenant,
                seats,
                hold,
                owned,
            } => {
                let tenant = format!("tenant-{tenant}");
                let request = Request::tenant(&tenant).tokens(seats);
                let inflight = &self.inflight;
                let result = if owned {
                    inflight
                        .try_acquire_owned(request)
                        .map(|p| self.hold(&tenant, p, hold))
                } else {
                    inflight
                        .try_acquire(request)
                        .map(|p| self.hold(&tenant, p, hold))
                };
                if let Err(e) = result {
                    self.expect(e.reason());
                }
            }
            Op::Wait {
                tenant,
                seats,
                hold,
                owned,
            } => {
                let tenant = format!("tenant-{tenant}");
                let request = Request::tenant(&tenant).tokens(seats);
                let result = if owned {
                    block_on(self.inflight.acquire_owned(request))
                        .map(|p| self.hold(&tenant, p, hold))
                } else {
                    block_on(self.inflight.acquire(request)).map(|p| self.hold(&tenant, p, hold))
                };
                if let Err(e) = result {
                    self.expect(e.reason());
                }
            }
            Op::Cancel {
                tenant,
                seats,
                polls,
                owned,
            } => {
                let tenant = format!("tenant-{tenant}");
                let request = Request::tenant(&tenant).tokens(seats);
                if owned {
                    self.cancel(&tenant, self.inflight.acquire_owned(request), polls);
                } else {
                    self.cancel(&tenant, self.inflight.acquire(request), polls);
                }
            }
        }
    }

    /// Polls `acquire` up to `polls` times, then drops it.
    fn cancel<P: Held>(
        &self,
        tenant: &str,
        acquire: impl Future<Output = Result<P, Rejected>>,
        polls: u8,
    ) {
        let mut acquire = pin!(acquire);
        let mut cx = Context::from_waker(Waker::noop());
        for _ in 0..polls {
            match acquire.as_mut().poll(&mut cx) {
                Poll::Ready(Ok(permit)) => return self.hold(tenant, permit, 0),
                Poll::Ready(Err(e)) => return self.expect(e.reason()),
                Poll::Pending => std::thread::yield_now(),
            }
        }
    }

    /// A refusal this test can meet: no permit now, a full queue, or more
    /// seats than a shard of two pools of 2 holds (never: at most 4 asked).
    fn expect(&self, reason: RejectReason) {
        if !matches!(reason, RejectReason::Busy | RejectReason::QueueFull { .. }) {
            self.broken.store(true, Ordering::SeqCst);
        }
    }
}

/// Runs each thread's ops on its own thread; fails if any thread is not
/// done within a generous deadline (a lost wake-up) or the books broke.
/// `spill` 2 lends the tenant's other two pools above a reserve of one
/// permit each.
fn run(ops: Vec<Vec<Op>>, max_queue: u32, spill: u32) -> Result<(), TestCaseError> {
    let inflight = InFlight::builder()
        .concurrency(8)
        .pools(4) // 2 permits each
        .per_tenant(2)
        .borrow_from(spill)
        .lender_reserve(0.5)
        .max_queue(max_queue)
        .build()
        .unwrap();
    let books = Arc::new(Books {
        per_pool: (0..4).map(|_| AtomicU32::new(0)).collect(),
        lent: (0..4).map(|_| AtomicU32::new(0)).collect(),
        inflight: Arc::new(inflight),
        out: AtomicU32::new(0),
        broken: AtomicBool::new(false),
    });
    let (done, finished) = mpsc::channel();
    let threads = ops.len();
    for ops in ops {
        let (books, done) = (books.clone(), done.clone());
        std::thread::spawn(move || {
            for op in &ops {
                books.run(op);
            }
            done.send(()).unwrap();
        });
    }
    for _ in 0..threads {
        let waited = finished.recv_timeout(Duration::from_secs(60));
        prop_assert!(waited.is_ok(), "a waiter was never woken");
    }
    prop_assert!(
        !books.broken.load(Ordering::SeqCst),
        "more out than allowed, from another shard, or lent below a reserve"
    );
    prop_assert_eq!(books.inflight.available(), 8, "every permit came back once");
    prop_assert!(
        (0..4).all(|p| books.inflight.waiting(p) == 0),
        "no waiter left behind"
    );
    prop_assert!((0..4).all(|p| books.inflight.free(p) == 2));
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn threads_never_take_more_than_the_limit_and_give_every_permit_back_once(
        ops in prop::collection::vec(prop::collection::vec(op(), 1..40), 2..5),
        max_queue in prop_oneof![Just(0u32), Just(1), Just(50)],
        spill in prop_oneof![Just(0u32), Just(2)],
    ) {
        run(ops, max_queue, spill)?;
    }
}

#[test]
fn many_waiters_on_one_hot_tenant_are_all_served_and_nothing_leaks() {
    let ops: Vec<Vec<Op>> = (0..4)
        .map(|t| {
            (0..300)
                .map(|i| match i % 3 {
                    0 => Op::Wait {
                        tenant: 0,
                        seats: 1 + ((i + t) % 3) as u32,
                        hold: 1,
                        owned: t % 2 == 0,
                    },
                    1 => Op::Cancel {
                        tenant: (t % 2) as u8,
                        seats: 1,
                        polls: 1,
                        owned: i % 2 == 0,
                    },
                    _ => Op::Try {
                        tenant: 1,
                        seats: 2,
                        hold: 2,
                        owned: t >= 2,
                    },
                })
                .collect()
        })
        .collect();
    run(ops.clone(), 50, 0).unwrap();
    run(ops, 50, 2).unwrap();
}

#[test]
fn owned_permits_move_to_other_threads_and_come_back_once_each() {
    let inflight = Arc::new(
        InFlight::builder()
            .concurrency(8)
            .pools(4)
            .per_tenant(2)
            .build()
            .unwrap(),
    );
    let held: Vec<OwnedPermit> = std::iter::from_fn(|| inflight.try_acquire_owned("t").ok())
        .take(10)
        .collect();
    assert_eq!(held.len(), 4, "the tenant's two pools of 2");
    // Waiters on other threads, each served by a permit dropped on yet
    // another one.
    let (served, waited) = mpsc::channel();
    let waiters: Vec<_> = (0..4)
        .map(|_| {
            let (inflight, served) = (Arc::clone(&inflight), served.clone());
            std::thread::spawn(move || served.send(block_on(inflight.acquire_owned("t")).unwrap()))
        })
        .collect();
    let shard = inflight.shard("t");
    let queued = || shard.buckets().iter().map(|&p| inflight.waiting(p)).max();
    while queued() != Some(4) {
        std::thread::yield_now(); // until all four queue
    }
    let droppers: Vec<_> = held
        .into_iter()
        .map(|permit| std::thread::spawn(move || drop(permit)))
        .collect();
    droppers.into_iter().for_each(|d| d.join().unwrap());
    let served: Vec<OwnedPermit> = (0..4)
        .map(|_| waited.recv_timeout(Duration::from_secs(60)))
        .collect::<Result<_, _>>()
        .expect("every waiter is served by a release");
    assert_eq!(inflight.available(), 4);
    assert!(served.iter().all(|p| Arc::ptr_eq(p.inflight(), &inflight)));
    drop(served);
    assert_eq!(inflight.available(), 8);
    // Each waiter's thread drops its clone of the limit after it sends.
    for waiter in waiters {
        waiter.join().unwrap().unwrap();
    }
    assert_eq!(Arc::strong_count(&inflight), 1, "no permit or wait kept it");
}
