//! Without the `redis` feature: the Redis keys of a `[limiters.NAME]` table
//! are still known, and refused with a message that says which feature to
//! enable.

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess};

use super::config::{LimiterConfig, REDIS_KEYS};

/// Without the `redis` feature the Redis keys are still known, and refused
/// with a message that says which feature to enable.
#[derive(Default)]
pub(super) struct RedisKeys {}

impl RedisKeys {
    /// Refuses a Redis key (inside its value's deserializer, so that TOML
    /// points at it); `false` for any other key.
    pub(super) fn read<'de, A: MapAccess<'de>>(
        &mut self,
        map: &mut A,
        limiter: &str,
        key: &str,
    ) -> Result<bool, A::Error> {
        if !REDIS_KEYS.contains(&key) {
            return Ok(false);
        }
        map.next_value_seed(NoRedis { limiter, key })?;
        Ok(true)
    }

    pub(super) fn finish<E: de::Error>(
        self,
        _limiter: &str,
        _config: &mut LimiterConfig,
    ) -> Result<(), E> {
        Ok(())
    }
}

struct NoRedis<'a> {
    limiter: &'a str,
    key: &'a str,
}

impl<'de> DeserializeSeed<'de> for NoRedis<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, _: D) -> Result<(), D::Error> {
        let (limiter, key) = (self.limiter, self.key);
        Err(de::Error::custom(format_args!(
            "limiters.{limiter}.{key}: a Redis limiter needs the `redis` feature of \
             shuffle-limiter: enable it in Cargo.toml (features = [\"config\", \"redis\"])"
        )))
    }
}
