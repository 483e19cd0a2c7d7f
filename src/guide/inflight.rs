#![doc = include_str!("inflight.md")]
