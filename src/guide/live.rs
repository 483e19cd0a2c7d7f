#![doc = include_str!("live.md")]
