//! The hung-tenant scene driven on a virtual clock: each caller's next
//! event (a call ending, a wait running out, a retry) in time order, the
//! limit's own wakers saying which waiters a release served.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use shuffle_limiter::inflight::{AcquireOwned, InFlight, OwnedPermit};

use super::{CALL, HANG, MAX_WAIT, OTHERS_CALLS, RETRY, RUN};

/// What one run of the scene did.
pub(super) struct Ran {
    /// The calls each of `tenant-0` … `tenant-(t−1)` completed, in all
    /// and within the first [`HANG`] (before any hung call can end).
    pub(super) completed: Vec<u64>,
    pub(super) completed_first: Vec<u64>,
    /// The permits `tenant-0` held, and of them borrowed, on average over
    /// the run and at most at once.
    pub(super) hung_mean: [f64; 2],
    pub(super) hung_most: [u64; 2],
}

/// The scene through `limit` for [`RUN`], `tenant-0` keeping `hung_calls`
/// going (none: it is not there).
pub(super) fn run(limit: &Arc<InFlight>, t: u64, hung_calls: u32) -> Ran {
    let mut scene = Scene::new(limit, t, hung_calls);
    while let Some(Reverse((at, _, caller, generation))) = scene.events.pop() {
        if at > micros(RUN) {
            break;
        }
        scene.advance(at);
        if scene.callers[caller].generation == generation {
            scene.on_event(caller);
        }
        scene.serve_woken();
    }
    scene.advance(micros(RUN));
    let hung_mean = scene.hung_time.map(|sum| sum as f64 / micros(RUN) as f64);
    let hung_most = scene.hung_most;
    // Dropping the scene gives back every permit and leaves every queue.
    let completed = std::mem::take(&mut scene.completed);
    let completed_first = std::mem::take(&mut scene.completed_first);
    drop(scene);
    debug_assert_eq!(limit.available(), limit.concurrency());
    Ran {
        completed,
        completed_first,
        hung_mean,
        hung_most,
    }
}

fn micros(d: Duration) -> u64 {
    d.as_micros() as u64
}

/// The waiters a release served, by caller.
struct Woken {
    caller: usize,
    list: Arc<Mutex<Vec<usize>>>,
}

impl Wake for Woken {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let mut list = self.list.lock().unwrap_or_else(|e| e.into_inner());
        list.push(self.caller);
    }
}

enum State {
    Idle,
    Waiting(Pin<Box<AcquireOwned>>),
    Holding(OwnedPermit),
}

struct Caller {
    tenant: usize,
    takes: u64,
    waker: Waker,
    state: State,
    /// The caller's one live event has this generation; others are stale.
    generation: u64,
}

struct Scene {
    limit: Arc<InFlight>,
    names: Vec<String>,
    callers: Vec<Caller>,
    /// (time in µs, sequence, caller, generation), earliest first.
    events: BinaryHeap<Reverse<(u64, u64, usize, u64)>>,
    sequence: u64,
    now: u64,
    woken: Arc<Mutex<Vec<usize>>>,
    completed: Vec<u64>,
    completed_first: Vec<u64>,
    /// The permits `tenant-0` holds now, and of them borrowed.
    hung: [u64; 2],
    /// The same, added up over time (µs · permits), and the most at once.
    hung_time: [u128; 2],
    hung_most: [u64; 2],
}

impl Scene {
    fn new(limit: &Arc<InFlight>, t: u64, hung_calls: u32) -> Scene {
        let woken = Arc::new(Mutex::new(Vec::new()));
        let mut callers = Vec::new();
        for tenant in 0..t as usize {
            let (calls, takes) = match tenant {
                0 => (hung_calls, micros(HANG)),
                _ => (OTHERS_CALLS, micros(CALL)),
            };
            for _ in 0..calls {
                let caller = callers.len();
                let list = Arc::clone(&woken);
                callers.push(Caller {
                    tenant,
                    takes,
                    waker: Waker::from(Arc::new(Woken { caller, list })),
                    state: State::Idle,
                    generation: 0,
                });
            }
        }
        let mut scene = Scene {
            limit: Arc::clone(limit),
            names: (0..t).map(|i| format!("tenant-{i}")).collect(),
            events: BinaryHeap::new(),
            sequence: 0,
            now: 0,
            woken,
            completed: vec![0; t as usize],
            completed_first: vec![0; t as usize],
            hung: [0; 2],
            hung_time: [0; 2],
            hung_most: [0; 2],
            callers,
        };
        for caller in 0..scene.callers.len() {
            scene.schedule(caller, 0);
        }
        scene
    }

    /// The caller's next event, `after` µs from now; its earlier one goes
    /// stale.
    fn schedule(&mut self, caller: usize, after: u64) {
        let c = &mut self.callers[caller];
        c.generation += 1;
        self.sequence += 1;
        let event = (self.now + after, self.sequence, caller, c.generation);
        self.events.push(Reverse(event));
    }

    fn on_event(&mut self, caller: usize) {
        match std::mem::replace(&mut self.callers[caller].state, State::Idle) {
            State::Holding(permit) => {
                self.count_hung(caller, &permit, false);
                drop(permit);
                let tenant = self.callers[caller].tenant;
                self.completed[tenant] += 1;
                self.completed_first[tenant] += u64::from(self.now < micros(HANG));
                self.start(caller);
            }
            // Its wait ran out: dropping it leaves its queues.
            State::Waiting(acquire) => {
                drop(acquire);
                self.schedule(caller, micros(RETRY));
            }
            State::Idle => self.start(caller),
        }
    }

    /// A new call: a permit at once, a place in the queues, or a refusal.
    fn start(&mut self, caller: usize) {
        let tenant = self.callers[caller].tenant;
        let acquire = Box::pin(self.limit.acquire_owned(self.names[tenant].as_str()));
        self.callers[caller].state = State::Waiting(acquire);
        if !self.poll(caller) {
            self.schedule(caller, micros(MAX_WAIT));
        }
    }

    /// Moves the clock to `at`, adding up `tenant-0`'s permits meanwhile.
    fn advance(&mut self, at: u64) {
        let passed = u128::from(at - self.now);
        for (sum, &now) in self.hung_time.iter_mut().zip(&self.hung) {
            *sum += passed * u128::from(now);
        }
        self.now = at;
    }

    /// Counts a permit `caller` took (`true`) or gave back, if it is one
    /// of `tenant-0`'s.
    fn count_hung(&mut self, caller: usize, permit: &OwnedPermit, taken: bool) {
        if self.callers[caller].tenant != 0 {
            return;
        }
        let of = [true, permit.borrowed()];
        for ((count, most), of) in self.hung.iter_mut().zip(&mut self.hung_most).zip(of) {
            if of {
                *count = if taken { *count + 1 } else { *count - 1 };
                *most = (*most).max(*count);
            }
        }
    }

    /// Polls a waiting caller; `true` when it is done waiting (holding
    /// its permit, or refused and due to retry).
    fn poll(&mut self, caller: usize) -> bool {
        let c = &mut self.callers[caller];
        let State::Waiting(acquire) = &mut c.state else {
            return true;
        };
        match acquire.as_mut().poll(&mut Context::from_waker(&c.waker)) {
            Poll::Pending => false,
            Poll::Ready(Ok(permit)) => {
                let takes = c.takes;
                self.count_hung(caller, &permit, true);
                self.callers[caller].state = State::Holding(permit);
                self.schedule(caller, takes);
                true
            }
            Poll::Ready(Err(_)) => {
                c.state = State::Idle;
                self.schedule(caller, micros(RETRY));
                true
            }
        }
    }

    /// Polls the callers the last event's releases served.
    fn serve_woken(&mut self) {
        loop {
            let woken = std::mem::take(&mut *self.woken.lock().unwrap_or_else(|e| e.into_inner()));
            if woken.is_empty() {
                return;
            }
            for caller in woken {
                self.poll(caller);
            }
        }
    }
}
