//! Decisions coalesced into batches ([`RedisOptions::batch`](super::RedisOptions::batch),
//! on by default in the one-slot layout): the decisions of one process
//! that wait together go to Redis as one call of `draw_batch.lua`, which
//! applies them in arrival order, each with the draw of `draw.lua` exactly
//! as one call of it alone would.
//!
//! A decision's caller waits on its own reply, under its own deadline. A
//! decision that comes while no batch is out, nothing waits and fewer than
//! [`MOST_ALONE`] decisions are out alone goes alone, at once, from its
//! caller's task (as without batching: no hop through the task that
//! gathers batches), and counts as out until Redis answers or, if its
//! caller leaves first, until the deadline: a process with a few decisions
//! at a time decides as without batching. A batch leaves as soon as no
//! other batch is out; while one is, once as many decisions wait as are
//! out (so that Redis has the next batch before it is done with this one),
//! `max` wait, or `window` after the first of them, whichever comes first;
//! while two are, once one is back. An idle limiter sends a lone decision
//! at once, a busy one gathers the next batch while one is out (so no
//! timer decides how long the common case waits: tokio's timer counts
//! whole milliseconds), and stays busy, every decision batched, until no
//! batch is out and nothing waits. A batch
//! takes the decisions waiting from each tenant in turn, so a flood from one
//! tenant does not keep another's decision out of the next batch (while
//! fewer than `max` tenants wait). A decision whose caller is gone before
//! its batch leaves (it gave up at the deadline, or was dropped) is not
//! sent and takes nothing; one whose batch left counts, as a single
//! decision in flight does, whether or not its caller is there to hear.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, Hash, Hasher, RandomState};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::time::Duration;

use ::redis::aio::ConnectionLike;
use ::redis::{Cmd, RedisError, Value};
use tokio::sync::{mpsc, oneshot};
use tokio::time::{Instant, timeout, timeout_at};

use super::error::Error;
use super::lua::{Lua, command, query_value};
use super::script::{Answer, Call, DrawScript, Request, pack, unpack};
use crate::Shard;
use crate::plan::whom::Id;

/// The most batches out at once: two, so that this process works on the
/// replies of one while Redis works on the other. More would only move the
/// queue of a flood from here, where tenants take turns, to the connection,
/// where the first come are answered first.
const MAX_OUT: usize = 2;

/// The most decisions out alone at once (while no batch is out): twelve,
/// so that a process deciding a few at a time pays no batch's overhead (a
/// hop through the task here, and a batch of two costs the server more
/// than two decisions alone), while a busy one sends batches. Measured on
/// two cores beside the server (BENCHMARKS.md): a process that batches
/// goes on batching until it is idle, at most two batches out, each about
/// half of its decisions, and batches of five or six were slower than the
/// same decisions alone (0.61 of the one-key script against 0.79 at 12
/// tasks with four here); with twelve, up to twelve tasks decide as
/// unbatched, 13 and 14 make batches of six (0.68 against 0.77 unbatched),
/// and from 16 on batches of eight and more beat unbatched.
const MOST_ALONE: usize = 12;

/// Where a limiter's decisions wait for their batch; dropping it ends the
/// task that gathers them, once the decisions waiting have left.
#[derive(Debug)]
pub(super) struct Batcher {
    sender: mpsc::UnboundedSender<Event>,
    hasher: RandomState,
    counts: Arc<Counts>,
    deadline: Duration,
}

/// What a limiter's callers and the task gathering batches both count.
#[derive(Debug)]
struct Counts {
    /// Batches out.
    out: AtomicUsize,
    /// Decisions gone alone and out.
    alone: AtomicUsize,
    /// The decisions out, in batches or alone.
    deciding: AtomicUsize,
    /// Decisions sent to the task and not yet taken into a batch.
    waiting: AtomicUsize,
    /// The task gathering batches, to wake when a batch is back (weak: the
    /// task ends once every `Batcher` is dropped).
    task: mpsc::WeakUnboundedSender<Event>,
}

impl Counts {
    /// A batch of `decisions` is back.
    fn back(&self, decisions: usize) {
        self.deciding.fetch_sub(decisions, SeqCst);
        self.out.fetch_sub(1, SeqCst);
        self.wake();
    }

    /// A decision gone alone is back (answered, or given up on).
    fn back_alone(&self) {
        self.deciding.fetch_sub(1, SeqCst);
        self.alone.fetch_sub(1, SeqCst);
        self.wake();
    }

    /// Decisions that came meanwhile may leave now.
    fn wake(&self) {
        if self.waiting.load(SeqCst) > 0
            && let Some(task) = self.task.upgrade()
        {
            let _ = task.send(Event::Back);
        }
    }
}

/// A decision gone alone (see [`Batcher::alone`]): counted out until
/// [answered](Self::answered), or, when its caller leaves first (its call
/// may still be in Redis), until the deadline, as a batch out is.
#[derive(Debug)]
pub(super) struct Alone<'a> {
    batcher: &'a Batcher,
    since: Instant,
    answered: bool,
}

impl Alone<'_> {
    /// Redis answered, or the call failed: the decision is no longer out.
    pub(super) fn answered(mut self) {
        self.answered = true;
    }
}

impl Drop for Alone<'_> {
    fn drop(&mut self) {
        let counts = &self.batcher.counts;
        if !self.answered
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            // Its caller left mid-call: out until the deadline, held by a
            // task (and freed if that task is dropped unrun, at shutdown).
            let out = Out(Arc::clone(counts));
            let until = super::after(self.since, self.batcher.deadline);
            runtime.spawn(async move {
                tokio::time::sleep_until(until).await;
                drop(out);
            });
            return;
        }
        counts.back_alone();
    }
}

/// A decision gone alone whose caller left, out while this lives.
struct Out(Arc<Counts>);

impl Drop for Out {
    fn drop(&mut self) {
        self.0.back_alone();
    }
}

/// What the task gathering batches hears.
#[derive(Debug)]
enum Event {
    /// A decision to send.
    Job(Job),
    /// A batch is back, or a decision that went alone.
    Back,
}

/// A decision waiting for its batch.
#[derive(Debug)]
struct Job {
    /// Whose it is, for taking tenants in turn.
    tenant: u64,
    /// When it came.
    at: Instant,
    request: Request,
    reply: oneshot::Sender<Result<Answer, Error>>,
}

/// What the task that sends batches needs.
struct Sending<Conn> {
    counts: Arc<Counts>,
    connection: Conn,
    script: BatchScript,
    max: usize,
    window: Duration,
    deadline: Duration,
}

impl Batcher {
    /// Starts the task that sends the batches of at most `max` decisions,
    /// each `window` after its first decision at the latest, through
    /// `connection`, on the keys of `script`; a batch unanswered by the
    /// `deadline` fails every decision in it. It runs on the current tokio
    /// runtime.
    pub(super) fn start<Conn>(
        connection: Conn,
        script: &DrawScript,
        max: u32,
        (window, deadline): (Duration, Duration),
    ) -> Self
    where
        Conn: ConnectionLike + Clone + Send + Sync + 'static,
    {
        let (sender, receiver) = mpsc::unbounded_channel();
        let counts = Arc::new(Counts {
            out: AtomicUsize::new(0),
            alone: AtomicUsize::new(0),
            deciding: AtomicUsize::new(0),
            waiting: AtomicUsize::new(0),
            task: sender.downgrade(),
        });
        let sending = Sending {
            counts: Arc::clone(&counts),
            connection,
            script: BatchScript::of(script),
            max: max as usize,
            window,
            deadline,
        };
        tokio::spawn(sending.run(receiver));
        Batcher {
            sender,
            hasher: RandomState::new(),
            counts,
            deadline,
        }
    }

    /// Leave to draw alone, now, from the caller's task, while no batch is
    /// out, no decision waits and fewer than [`MOST_ALONE`] are out alone:
    /// counted out until the guard is [answered](Alone::answered) (or,
    /// dropped unanswered, until the deadline). `None` when the decision
    /// should wait for a batch.
    pub(super) fn alone(&self) -> Option<Alone<'_>> {
        let counts = &self.counts;
        if counts.waiting.load(SeqCst) > 0 || counts.out.load(SeqCst) > 0 {
            return None;
        }
        let more = |alone: usize| (alone < MOST_ALONE).then_some(alone + 1);
        (counts.alone.fetch_update(SeqCst, SeqCst, more).ok()).map(|_| {
            counts.deciding.fetch_add(1, SeqCst);
            Alone {
                batcher: self,
                since: Instant::now(),
                answered: false,
            }
        })
    }

    /// The script's answer to `request`, made for `id` over `shard`, once
    /// its batch is answered.
    pub(super) async fn draw(
        &self,
        (id, shard): (Id<'_>, &Shard),
        request: Request,
    ) -> Result<Answer, Error> {
        let (reply, answer) = oneshot::channel();
        let job = Job {
            tenant: self.tenant(id, shard),
            at: Instant::now(),
            request,
            reply,
        };
        self.counts.waiting.fetch_add(1, SeqCst);
        if self.sender.send(Event::Job(job)).is_err() {
            self.counts.waiting.fetch_sub(1, SeqCst);
            return Err(gone());
        }
        answer.await.unwrap_or_else(|_| Err(gone()))
    }

    /// A number for whose decision it is: the tenant's (its users count as
    /// the tenant), or a fixed shard's first bucket.
    fn tenant(&self, id: Id<'_>, shard: &Shard) -> u64 {
        let mut hasher = self.hasher.build_hasher();
        match id {
            Id::Tenant(tenant) | Id::User(tenant, _) => tenant.hash(&mut hasher),
            Id::Fixed => shard.buckets()[0].hash(&mut hasher),
        }
        hasher.finish()
    }
}

/// The error of a decision whose batch could not be sent: the task that
/// sends them is gone (its runtime shut down).
fn gone() -> Error {
    Error::GaveUp {
        detail: "the batch of this decision was never sent: the task sending batches \
                 has stopped (its tokio runtime shut down, or it panicked)"
            .to_owned(),
    }
}

impl<Conn> Sending<Conn>
where
    Conn: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// Gathers batches and sends each, until every `Batcher` is dropped: a
    /// batch leaves as soon as no other is out; while one is, once as many
    /// decisions wait as it holds, `max` wait, or `window` after the first
    /// of them, whichever comes first; while [`MAX_OUT`] are, once one is
    /// back.
    async fn run(self, mut receiver: mpsc::UnboundedReceiver<Event>) {
        let this = Arc::new(self);
        let mut waiting = Waiting::default();
        let mut closed = false;
        loop {
            let out = this.counts.out.load(SeqCst);
            if let Some(since) = waiting.since {
                // As many wait as are out: Redis has the next batch before
                // it is done with the one out.
                let deciding = this.counts.deciding.load(SeqCst);
                let due = waiting.len() >= this.max.min(deciding)
                    || Instant::now() >= super::after(since, this.window);
                if closed || out == 0 || (out < MAX_OUT && due) {
                    // Whoever arrived meanwhile takes their turn in this batch.
                    while let Ok(event) = receiver.try_recv() {
                        waiting.note(event);
                    }
                    let before = waiting.len();
                    let batch = waiting.take(this.max);
                    // Taken, or dropped for a caller gone.
                    (this.counts.waiting).fetch_sub(before - waiting.len(), SeqCst);
                    if !batch.is_empty() {
                        this.counts.deciding.fetch_add(batch.len(), SeqCst);
                        this.counts.out.fetch_add(1, SeqCst);
                        tokio::spawn(Arc::clone(&this).send(batch));
                    }
                    continue;
                }
            } else if closed {
                return;
            }
            let event = match waiting.since {
                Some(since) if out < MAX_OUT => {
                    match timeout_at(super::after(since, this.window), receiver.recv()).await {
                        Ok(event) => event,
                        Err(_) => continue,
                    }
                }
                _ => receiver.recv().await,
            };
            match event {
                Some(event) => waiting.note(event),
                None => closed = true,
            }
        }
    }

    /// One script call for `batch`, each decision's answer to its caller,
    /// and word to the task gathering batches, if decisions wait, that this
    /// one is back. A batch of one is the decision alone: the script of one
    /// decision, which costs the server less.
    async fn send(self: Arc<Self>, batch: Vec<Job>) {
        let mut connection = self.connection.clone();
        let count = batch.len();
        let answers: Vec<Result<Answer, Error>> = if let [job] = &batch[..] {
            let call = job.request.call();
            let answer =
                timeout(self.deadline, self.script.alone.run(&mut connection, &call)).await;
            vec![answer.unwrap_or(Err(Error::Timeout {
                after: self.deadline,
            }))]
        } else {
            self.batch(&batch, &mut connection).await
        };
        for (job, answer) in batch.into_iter().zip(answers) {
            // A caller that is gone has nothing to hear: the decision counted.
            let _ = job.reply.send(answer);
        }
        self.counts.back(count);
    }

    /// The answers of the batch script to `batch`, in order.
    async fn batch(&self, batch: &[Job], connection: &mut Conn) -> Vec<Result<Answer, Error>> {
        let calls = || batch.iter().map(|job| job.request.call());
        let cmd = self.script.cmd(calls(), None);
        let script = &self.script.script;
        match timeout(self.deadline, query_value(script, &cmd, connection)).await {
            Ok(Ok(replies)) => answers(&replies, calls()),
            Ok(Err(error)) => {
                let error = Error::from_redis(error);
                batch.iter().map(|_| Err(error.clone())).collect()
            }
            Err(_) => (batch.iter())
                .map(|_| {
                    Err(Error::Timeout {
                        after: self.deadline,
                    })
                })
                .collect(),
        }
    }
}

/// Each call's answer from the batch script's reply, in order.
pub(super) fn answers<'a>(
    reply: &Value,
    calls: impl ExactSizeIterator<Item = Call<'a>>,
) -> Vec<Result<Answer, Error>> {
    let count = calls.len();
    let unreadable = || Error::Reply {
        detail: format!("not the reply of a batch of {count}: {reply:?}"),
    };
    let (packed, errors) = match reply {
        Value::Array(replies) => match replies.split_first() {
            Some((Value::BulkString(packed), errors)) => (&packed[..], errors),
            _ => return (0..count).map(|_| Err(unreadable())).collect(),
        },
        _ => return (0..count).map(|_| Err(unreadable())).collect(),
    };
    let mut numbers = unpack(packed);
    let mut answers = Vec::with_capacity(count);
    for call in calls {
        let answer = match numbers.next() {
            // As Redis turns a Lua number into an integer reply: truncated.
            Some(length) if length >= 0.0 => {
                let reply: Vec<i64> = numbers
                    .by_ref()
                    .take(length as usize)
                    .map(|n| n as i64)
                    .collect();
                Answer::of(&reply, &call)
            }
            // An error's place, -i for errors[i]; anything else (NaN, a
            // fraction above -1) is unreadable, not an overflow.
            Some(error) => match ((-error) as usize)
                .checked_sub(1)
                .and_then(|i| errors.get(i))
            {
                Some(Value::ServerError(error)) => {
                    Err(Error::from_redis(RedisError::from(error.clone())))
                }
                _ => Err(unreadable()),
            },
            None => Err(unreadable()),
        };
        answers.push(answer);
    }
    answers
}

/// The batch script with the keys of every bucket (the one-slot layout's:
/// one quota key for all), and the script of one decision alone.
pub(super) struct BatchScript {
    pub(super) script: Lua,
    alone: DrawScript,
    keys: Arc<[String]>,
    quota_key: String,
}

impl BatchScript {
    pub(super) fn of(draw: &DrawScript) -> Self {
        BatchScript {
            script: draw.batch_script(),
            alone: draw.clone(),
            keys: draw.shared_keys(),
            quota_key: draw.quota_key(0).to_owned(),
        }
    }

    /// The script call of `calls`, in order, on the server's clock or at
    /// `now` µs: each bucket key once, the numbers packed (see
    /// `draw_batch.lua`).
    pub(super) fn cmd<'a>(&self, calls: impl Iterator<Item = Call<'a>>, now: Option<u64>) -> Cmd {
        // Position in KEYS (1-based, after the quota and hold-offs keys) of
        // each bucket.
        let mut positions: HashMap<u32, usize> = HashMap::new();
        let mut buckets = Vec::new();
        let mut packed = Vec::new();
        let mut count = 0;
        for call in calls {
            count += 1;
            let ranked = call.ids.len();
            pack(&mut packed, (1 + ranked + call.arguments()) as u64);
            pack(&mut packed, ranked as u64);
            for &b in call.ids {
                let position = *positions.entry(b).or_insert_with(|| {
                    buckets.push(b);
                    buckets.len() + 2
                });
                pack(&mut packed, position as u64);
            }
            call.for_each_argument(|n| pack(&mut packed, n));
        }
        let mut cmd = command(&self.script, 2 + buckets.len(), 5 + buckets.len());
        cmd.arg(self.quota_key.as_str());
        cmd.arg(self.alone.held_key().unwrap_or(&self.quota_key));
        for &b in &buckets {
            cmd.arg(self.keys[b as usize].as_str());
        }
        cmd.arg(count);
        match now {
            Some(now) => cmd.arg(now),
            None => cmd.arg(""),
        };
        cmd.arg(packed);
        cmd
    }
}

/// The decisions waiting, by tenant, with the order tenants take turns in.
#[derive(Default)]
struct Waiting {
    by_tenant: HashMap<u64, VecDeque<(u64, Job)>>,
    /// Tenants with decisions waiting, the next to take a turn first.
    turns: VecDeque<u64>,
    len: usize,
    /// Arrivals so far, to keep a batch in arrival order.
    arrived: u64,
    /// When the decision waiting longest came; `None` when none waits.
    since: Option<Instant>,
}

impl Waiting {
    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn len(&self) -> usize {
        self.len
    }

    /// A decision joins (a batch back only wakes the task, which reads
    /// the count of batches out again).
    fn note(&mut self, event: Event) {
        if let Event::Job(job) = event {
            self.push(job);
        }
    }

    fn push(&mut self, job: Job) {
        self.since.get_or_insert(job.at);
        let queue = self.by_tenant.entry(job.tenant).or_default();
        if queue.is_empty() {
            self.turns.push_back(job.tenant);
        }
        queue.push_back((self.arrived, job));
        self.arrived += 1;
        self.len += 1;
    }

    /// Up to `max` decisions whose callers still wait, one per tenant in
    /// turn, in the order they arrived; those whose callers are gone are
    /// dropped on the way.
    fn take(&mut self, max: usize) -> Vec<Job> {
        let mut batch = Vec::with_capacity(max.min(self.len));
        while batch.len() < max
            && let Some(tenant) = self.turns.pop_front()
        {
            let Some(queue) = self.by_tenant.get_mut(&tenant) else {
                continue;
            };
            while let Some((arrived, job)) = queue.pop_front() {
                self.len -= 1;
                if !job.reply.is_closed() {
                    batch.push((arrived, job));
                    break;
                }
            }
            if queue.is_empty() {
                self.by_tenant.remove(&tenant);
            } else {
                self.turns.push_back(tenant);
            }
        }
        self.since = (self.turns.iter())
            .filter_map(|tenant| Some(self.by_tenant.get(tenant)?.front()?.1.at))
            .min();
        batch.sort_unstable_by_key(|&(arrived, _)| arrived);
        batch.into_iter().map(|(_, job)| job).collect()
    }
}

#[cfg(test)]
mod tests;
