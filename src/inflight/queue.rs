//! The queues: callers waiting for permits, one bounded FIFO queue per
//! pool, all behind one lock that only waiting callers and releases to a
//! queued pool take.
//!
//! A waiter joins the queue of every pool of its shard that has room, and
//! is refused when none has, or when those that have cannot hold its seats
//! together; it joins the queue of each other pool of its shard as soon as
//! that queue has room (it waits beside it till then, in its overflow), so
//! that a pool whose queue was full when it came still serves it once the
//! callers before it are gone. It is served, all its seats at once, as
//! soon as the pools it may take from hold them: the pools nobody queues for, and those whose
//! queue it heads. So each pool serves its queue in order, and the first
//! waiter of all, which heads every queue it is in, is always served next
//! by its pools: no waiter holds permits while it waits, and none waits
//! for ever on permits that are released.

use std::collections::VecDeque;
use std::task::Waker;

use super::pools::Pools;
use super::taken::Taken;
use crate::assign::MAX_PER_TENANT;

/// A waiter's place: its slot and that slot's generation, so that a stale
/// key never names the slot's next waiter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Key {
    index: u32,
    generation: u32,
}

/// What a caller entering the queues got.
#[derive(Debug)]
pub(crate) enum Entered {
    /// Its seats at once.
    Served(Taken),
    /// A place in the queues.
    Queued(Key),
    /// No room in enough of its pools' queues.
    Full,
}

#[derive(Debug)]
struct Slot {
    generation: u32,
    waiter: Option<Waiter>,
}

#[derive(Debug)]
struct Waiter {
    shard: [u32; MAX_PER_TENANT as usize],
    len: u8,
    seats: u32,
    /// What it was given, once served; it has then left every queue.
    served: Option<Taken>,
    waker: Option<Waker>,
}

impl Waiter {
    fn shard(&self) -> &[u32] {
        &self.shard[..usize::from(self.len)]
    }
}

/// The queues of all pools, and their waiters.
#[derive(Debug)]
pub(crate) struct Room {
    slots: Vec<Slot>,
    vacant: Vec<u32>,
    queues: Box<[VecDeque<Key>]>,
    /// Per pool, in order of arrival, the waiters of its shard that found
    /// its queue full: the next joins it when the queue has room.
    overflow: Box<[VecDeque<Key>]>,
    max_queue: usize,
    /// Wakers of waiters served under the lock, to wake once it is let go.
    pub(crate) woken: Vec<Waker>,
}

impl Room {
    pub(crate) fn new(pools: u32, max_queue: u32) -> Room {
        Room {
            slots: Vec::new(),
            vacant: Vec::new(),
            queues: (0..pools).map(|_| VecDeque::new()).collect(),
            overflow: (0..pools).map(|_| VecDeque::new()).collect(),
            max_queue: max_queue as usize,
            woken: Vec::new(),
        }
    }

    /// The callers queued for `pool`.
    pub(crate) fn waiting(&self, pool: u32) -> usize {
        self.queues[pool as usize].len()
    }

    /// A caller asking for `seats` of `shard`'s pools: served at once from
    /// the pools nobody queues for when they hold them, else queued (and
    /// perhaps served at once all the same, by a release that came in
    /// between), else refused.
    pub(crate) fn enter(
        &mut self,
        pools: &Pools,
        shard: &[u32],
        seats: u32,
        waker: &Waker,
    ) -> Entered {
        match pools.take(shard, seats) {
            Ok(taken) => return Entered::Served(taken),
            // Flags cannot change under the lock: a plain give-back.
            Err(partial) => self.give_back(pools, &partial),
        }
        let room: u64 = (shard.iter())
            .filter(|&&p| self.queues[p as usize].len() < self.max_queue)
            .map(|&p| u64::from(pools.share(p)))
            .sum();
        if room < u64::from(seats) {
            return Entered::Full;
        }
        let key = self.insert(shard, seats, waker);
        for &pool in shard {
            let queue = &mut self.queues[pool as usize];
            if queue.len() < self.max_queue {
                queue.push_back(key);
                pools.set_queued(pool, true);
            } else {
                self.overflow[pool as usize].push_back(key);
            }
        }
        // A release may have come in between the take and the flags.
        self.serve(pools, shard);
        match self.served(key) {
            Some(taken) => Entered::Served(taken),
            None => Entered::Queued(key),
        }
    }

    /// The seats of the waiter at `key` if it was served (then it is gone),
    /// else `None`, with `waker` to wake it.
    pub(crate) fn poll(&mut self, key: Key, waker: &Waker) -> Option<Taken> {
        if let Some(taken) = self.served(key) {
            return Some(taken);
        }
        let waiter = self.waiter_mut(key);
        if !waiter.waker.as_ref().is_some_and(|w| w.will_wake(waker)) {
            waiter.waker = Some(waker.clone());
        }
        None
    }

    /// The waiter at `key` gives up: it leaves its queues, whose next
    /// waiters may then be served. If it was served meanwhile, its seats.
    pub(crate) fn leave(&mut self, pools: &Pools, key: Key) -> Option<Taken> {
        if let Some(taken) = self.served(key) {
            return Some(taken);
        }
        let waiter = self.remove(key);
        self.unqueue(pools, key, waiter.shard());
        self.serve(pools, waiter.shard());
        None
    }

    /// Gives `seats` back to `pool` under the lock, serving its queue.
    pub(crate) fn release(&mut self, pools: &Pools, pool: u32, seats: u32) {
        if pools.put(pool, seats) {
            self.serve(pools, &[pool]);
        }
    }

    /// Gives back what a take got, under the lock.
    pub(crate) fn give_back(&mut self, pools: &Pools, taken: &Taken) {
        for (pool, seats) in taken.iter(pools.packing()) {
            self.release(pools, pool, seats);
        }
    }

    /// Serves the heads of the queues of `start` while their pools hold
    /// their seats, and so on for the queues whose head changes.
    pub(crate) fn serve(&mut self, pools: &Pools, start: &[u32]) {
        let mut work: Vec<u32> = start.to_vec();
        while let Some(pool) = work.pop() {
            let Some(&head) = self.queues[pool as usize].front() else {
                continue;
            };
            let Some(taken) = self.take_for(pools, head) else {
                continue;
            };
            let waiter = self.waiter_mut(head);
            waiter.served = Some(taken);
            let shard = waiter.shard;
            let len = usize::from(waiter.len);
            if let Some(waker) = waiter.waker.take() {
                self.woken.push(waker);
            }
            // Its queues move on: serve their new heads.
            work.extend(self.unqueue(pools, head, &shard[..len]));
        }
    }

    /// Takes the seats of the waiter at `key` from the pools it may take
    /// from (those nobody queues for, and those whose queue it heads), the
    /// roomiest first, if they hold them together.
    fn take_for(&mut self, pools: &Pools, key: Key) -> Option<Taken> {
        let waiter = self.waiter_mut(key);
        let (shard, len, seats) = (waiter.shard, usize::from(waiter.len), waiter.seats);
        let shard = &shard[..len];
        let mut heads = [false; MAX_PER_TENANT as usize];
        let mut sum = 0u64;
        for (j, &pool) in shard.iter().enumerate() {
            if pools.queued(pool) {
                heads[j] = self.queues[pool as usize].front() == Some(&key);
                if heads[j] {
                    sum += u64::from(pools.free(pool));
                }
            } else {
                sum += u64::from(pools.free(pool));
            }
        }
        if sum < u64::from(seats) {
            return None;
        }
        // The queued pools it heads first, the roomiest of them first:
        // their permits cannot go elsewhere meanwhile.
        let mut taken = Taken::default();
        let mut need = seats;
        let mut order: Vec<(u32, u32)> = (shard.iter().zip(heads))
            .filter(|&(_, head)| head)
            .map(|(&pool, _)| (pools.free(pool), pool))
            .collect();
        order.sort_unstable_by(|a, b| b.cmp(a));
        for (free, pool) in order {
            let got = free.min(need);
            if got > 0 {
                pools.take_queued(pool, got);
                taken.add(pool, got, pools.packing());
                need -= got;
            }
        }
        if need > 0 {
            let open: Vec<u32> = (shard.iter().zip(heads))
                .filter(|&(&pool, head)| !head && !pools.queued(pool))
                .map(|(&pool, _)| pool)
                .collect();
            match pools.take(&open, need) {
                Ok(rest) => {
                    (rest.iter(pools.packing())).for_each(|(p, s)| taken.add(p, s, pools.packing()))
                }
                Err(partial) => {
                    // Taken by a caller outside the lock in between: give
                    // all back and wait for the next release.
                    let packing = pools.packing();
                    (taken.iter(packing).chain(partial.iter(packing))).for_each(|(p, s)| {
                        let _queued = pools.put(p, s);
                    });
                    return None;
                }
            }
        }
        Some(taken)
    }

    /// Takes `key` out of the queues of `shard` (and their overflows),
    /// moving the first waiter of a queue's overflow into the room it
    /// leaves; the pools whose queue has a new head, whose flags are
    /// cleared when their queue is empty.
    fn unqueue(&mut self, pools: &Pools, key: Key, shard: &[u32]) -> Vec<u32> {
        let mut moved = Vec::new();
        for &pool in shard {
            let (queue, overflow) = (
                &mut self.queues[pool as usize],
                &mut self.overflow[pool as usize],
            );
            let Some(at) = queue.iter().position(|&k| k == key) else {
                if let Some(at) = overflow.iter().position(|&k| k == key) {
                    overflow.remove(at);
                }
                continue;
            };
            queue.remove(at);
            if let Some(next) = overflow.pop_front() {
                queue.push_back(next);
            }
            if queue.is_empty() {
                pools.set_queued(pool, false);
            } else if at == 0 {
                moved.push(pool);
            }
        }
        moved
    }

    fn insert(&mut self, shard: &[u32], seats: u32, waker: &Waker) -> Key {
        let mut own = [0; MAX_PER_TENANT as usize];
        own[..shard.len()].copy_from_slice(shard);
        let waiter = Waiter {
            shard: own,
            len: shard.len() as u8,
            seats,
            served: None,
            waker: Some(waker.clone()),
        };
        let index = self.vacant.pop().unwrap_or_else(|| {
            self.slots.push(Slot {
                generation: 0,
                waiter: None,
            });
            self.slots.len() as u32 - 1
        });
        let slot = &mut self.slots[index as usize];
        slot.waiter = Some(waiter);
        Key {
            index,
            generation: slot.generation,
        }
    }

    /// The seats of the waiter at `key`, taking it out, if it was served.
    fn served(&mut self, key: Key) -> Option<Taken> {
        let taken = self.waiter_mut(key).served.take()?;
        self.remove(key);
        Some(taken)
    }

    fn remove(&mut self, key: Key) -> Waiter {
        let slot = &mut self.slots[key.index as usize];
        debug_assert_eq!(slot.generation, key.generation);
        slot.generation = slot.generation.wrapping_add(1);
        self.vacant.push(key.index);
        slot.waiter
            .take()
            .expect("a key names a waiter until it leaves")
    }

    fn waiter_mut(&mut self, key: Key) -> &mut Waiter {
        let slot = &mut self.slots[key.index as usize];
        debug_assert_eq!(slot.generation, key.generation);
        slot.waiter
            .as_mut()
            .expect("a key names a waiter until it leaves")
    }
}
