//! The turns a batch takes: which waiting decisions it holds, in what order.

use tokio::sync::oneshot;

use super::{Job, Waiting};
use crate::redis::script::Request;
use crate::{Quota, Shard};

/// A job of `tenant`, with the receiver its caller would wait on.
fn job(tenant: u64) -> (Job, oneshot::Receiver<Result<super::Answer, super::Error>>) {
    let split = crate::plan::Split::of(Quota::per_second(8), 8).unwrap();
    let mut shard = Shard {
        len: 2,
        spill: 0,
        buckets: [0; 8],
    };
    shard.buckets[1] = 1;
    let (reply, receiver) = oneshot::channel();
    let request = Request::of((0, &split), &shard, 0, (1, tenant), 0);
    (
        Job {
            tenant,
            at: tokio::time::Instant::now(),
            request,
            reply,
        },
        receiver,
    )
}

/// The tenants of a batch, in its order.
fn tenants(batch: &[Job]) -> Vec<u64> {
    batch.iter().map(|job| job.tenant).collect()
}

#[test]
fn a_flood_of_one_tenant_leaves_room_for_another_in_the_next_batch() {
    let mut waiting = Waiting::default();
    let mut callers = Vec::new();
    for _ in 0..1000 {
        let (job, caller) = job(1);
        waiting.push(job);
        callers.push(caller);
    }
    let (late, caller) = job(2);
    waiting.push(late);
    callers.push(caller);
    let batch = waiting.take(64);
    assert_eq!(batch.len(), 64);
    // The other tenant is in the first batch after it arrived, and last in
    // it: it arrived after every decision of the flood taken with it.
    assert_eq!(tenants(&batch).iter().filter(|&&t| t == 2).count(), 1);
    assert_eq!(batch.last().unwrap().tenant, 2);
    assert_eq!(waiting.len(), 1001 - 64);
}

#[test]
fn a_batch_keeps_arrival_order_and_skips_callers_that_left() {
    let mut waiting = Waiting::default();
    let mut kept = Vec::new();
    for (i, tenant) in [7, 7, 8, 9, 7, 8].into_iter().enumerate() {
        let (job, caller) = job(tenant);
        waiting.push(job);
        // The second decision's caller gave up before its batch left.
        if i != 1 {
            kept.push(caller);
        }
    }
    let batch = waiting.take(3);
    // One per tenant in turn: 7 (the first), 8, 9 — the dropped caller of
    // 7's second decision never counts.
    assert_eq!(tenants(&batch), [7, 8, 9]);
    let batch = waiting.take(10);
    assert_eq!(tenants(&batch), [7, 8]);
    assert!(waiting.is_empty());
    assert!(waiting.take(10).is_empty());
}

/// A batch reply whose numbers are not what the script writes (a length
/// of NaN, or a fraction above -1, where an error's place would be) is
/// unreadable for each decision: an error, never a panic.
#[test]
fn a_batch_reply_of_stray_numbers_is_unreadable() {
    let (job, _receiver) = job(1);
    for stray in [f64::NAN, -0.5, -3.0] {
        let reply = ::redis::Value::Array(vec![::redis::Value::BulkString(
            stray.to_le_bytes().to_vec(),
        )]);
        let answers = super::answers(&reply, std::iter::once(job.request.call()));
        assert!(
            matches!(answers[..], [Err(super::Error::Reply { .. })]),
            "{stray}: {answers:?}"
        );
    }
}
