//! Decisions coalesced into batches ([`RedisOptions::batch`](super::RedisOptions::batch)):
//! the decisions of one process that wait together go to Redis as one call
//! of `draw_batch.lua`, which applies them in arrival order, each with the
//! draw of `draw.lua` exactly as one call of it alone would.
//!
//! A decision's caller waits on its own reply, under its own deadline; the
//! batch leaves once `max` decisions wait or `window` after the first,
//! whichever comes first, and the next one gathers while it is out. A batch
//! takes the decisions waiting from each tenant in turn, so a flood from one
//! tenant does not keep another's decision out of the next batch (while
//! fewer than `max` tenants wait). A decision whose caller is gone before
//! its batch leaves (it gave up at the deadline, or was dropped) is not
//! sent and takes nothing; one whose batch left counts, as a single
//! decision in flight does, whether or not its caller is there to hear.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, Hash, Hasher, RandomState};
use std::sync::Arc;
use std::time::Duration;

use ::redis::aio::ConnectionLike;
use ::redis::{Cmd, RedisError, Script, Value};
use tokio::sync::{mpsc, oneshot};
use tokio::time::{Instant, timeout, timeout_at};

use super::error::Error;
use super::script::{Answer, Call, DrawScript, Request, evalsha, query_value};
use crate::Shard;
use crate::plan::whom::Id;

/// The batch script: the draw called once per decision.
const BATCH_LUA: &str = concat!(
    include_str!("prelude.lua"),
    include_str!("draw.lua"),
    include_str!("draw_batch.lua")
);

/// Where a limiter's decisions wait for their batch; dropping it ends the
/// task that sends them, once the batches out are answered.
#[derive(Debug)]
pub(super) struct Batcher {
    sender: mpsc::UnboundedSender<Job>,
    hasher: RandomState,
}

/// A decision waiting for its batch.
#[derive(Debug)]
struct Job {
    /// Whose it is, for taking tenants in turn.
    tenant: u64,
    request: Request,
    reply: oneshot::Sender<Result<Answer, Error>>,
}

/// What the task that sends batches needs.
struct Sending<Conn> {
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
        let sending = Sending {
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
        }
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
            request,
            reply,
        };
        self.sender.send(job).map_err(|_| gone())?;
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
    Error::Reply {
        detail: "the batch of this decision was never sent: the task sending batches \
                 has stopped (its tokio runtime shut down)"
            .to_owned(),
    }
}

impl<Conn> Sending<Conn>
where
    Conn: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// Gathers batches and sends each, until every `Batcher` is dropped.
    async fn run(self, mut receiver: mpsc::UnboundedReceiver<Job>) {
        let this = Arc::new(self);
        let mut waiting = Waiting::default();
        loop {
            if waiting.is_empty() {
                match receiver.recv().await {
                    Some(job) => waiting.push(job),
                    None => return,
                }
            }
            let until = Instant::now() + this.window;
            while waiting.len() < this.max {
                match timeout_at(until, receiver.recv()).await {
                    Ok(Some(job)) => waiting.push(job),
                    Ok(None) | Err(_) => break,
                }
            }
            // Whoever arrived meanwhile takes their turn in this batch.
            while let Ok(job) = receiver.try_recv() {
                waiting.push(job);
            }
            let batch = waiting.take(this.max);
            if !batch.is_empty() {
                tokio::spawn(Arc::clone(&this).send(batch));
            }
        }
    }

    /// One script call for `batch`, and each decision's answer to its caller.
    async fn send(self: Arc<Self>, batch: Vec<Job>) {
        let cmd = self
            .script
            .cmd(batch.iter().map(|job| job.request.call()), None);
        let mut connection = self.connection.clone();
        let reply = timeout(
            self.deadline,
            query_value(&self.script.script, &cmd, &mut connection),
        )
        .await;
        let answers: Vec<Result<Answer, Error>> = match reply {
            Ok(Ok(replies)) => answers(&replies, batch.iter().map(|job| job.request.call())),
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
        };
        for (job, answer) in batch.into_iter().zip(answers) {
            // A caller that is gone has nothing to hear: the decision counted.
            let _ = job.reply.send(answer);
        }
    }
}

/// Each call's answer from the batch script's reply, in order.
pub(super) fn answers<'a>(
    reply: &Value,
    calls: impl ExactSizeIterator<Item = Call<'a>>,
) -> Vec<Result<Answer, Error>> {
    let count = calls.len();
    let replies = match reply {
        Value::Array(replies) => &replies[..],
        _ => &[],
    };
    if replies.len() != count {
        let detail = format!("{count} decisions in a batch, {} replies", replies.len());
        return (0..count)
            .map(|_| {
                Err(Error::Reply {
                    detail: detail.clone(),
                })
            })
            .collect();
    }
    (replies.iter().zip(calls))
        .map(|(reply, call)| match reply {
            Value::ServerError(error) => Err(Error::from_redis(RedisError::from(error.clone()))),
            reply => {
                let numbers: Vec<i64> =
                    ::redis::from_redis_value_ref(reply).map_err(|_| Error::Reply {
                        detail: format!("{reply:?}"),
                    })?;
                Answer::of(&numbers, &call)
            }
        })
        .collect()
}

/// The batch script with the keys of every bucket (the one-slot layout's:
/// one quota key for all).
pub(super) struct BatchScript {
    pub(super) script: Script,
    keys: Arc<[String]>,
    quota_key: String,
}

impl BatchScript {
    pub(super) fn of(draw: &DrawScript) -> Self {
        BatchScript {
            script: Script::new(BATCH_LUA),
            keys: draw.shared_keys(),
            quota_key: draw.quota_key(0).to_owned(),
        }
    }

    /// The `EVALSHA` of `calls`, in order, on the server's clock or at
    /// `now` µs.
    pub(super) fn cmd<'a>(
        &self,
        calls: impl Iterator<Item = Call<'a>> + Clone,
        now: Option<u64>,
    ) -> Cmd {
        let (mut keys, mut arguments, mut count) = (1, 2, 0);
        for call in calls.clone() {
            keys += call.ids.len();
            arguments += 1 + call.arguments();
            count += 1;
        }
        let mut cmd = evalsha(&self.script, keys, keys + arguments);
        cmd.arg(self.quota_key.as_str());
        for call in calls.clone() {
            for &b in call.ids {
                cmd.arg(self.keys[b as usize].as_str());
            }
        }
        cmd.arg(count);
        match now {
            Some(now) => cmd.arg(now),
            None => cmd.arg(""),
        };
        for call in calls {
            cmd.arg(call.ids.len());
            call.push_arguments(&mut cmd);
        }
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
}

impl Waiting {
    fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn len(&self) -> usize {
        self.len
    }

    fn push(&mut self, job: Job) {
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
        batch.sort_unstable_by_key(|&(arrived, _)| arrived);
        batch.into_iter().map(|(_, job)| job).collect()
    }
}

#[cfg(test)]
mod tests;
