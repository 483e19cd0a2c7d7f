#![doc = include_str!("redis.md")]
