// PLACEHOLDER until the redis-state branch lands (never shipped).
use ::redis::aio::ConnectionLike;

use super::RedisLimiter;
use super::error::Error;
use crate::Shard;
use crate::clock::Clock;
use crate::limiter::decision::BucketState;

impl<Conn, C> RedisLimiter<Conn, C>
where
    Conn: ConnectionLike + Clone + Send + Sync + 'static,
    C: Clock + 'static,
{
    pub(crate) async fn remaining_in_redis(&self, _shard: Shard) -> Result<u64, Error> {
        unimplemented!("redis-state")
    }
    pub(crate) async fn snapshot_in_redis(&self) -> Result<Vec<BucketState>, Error> {
        unimplemented!("redis-state")
    }
}
