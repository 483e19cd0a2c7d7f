#![doc = include_str!("metrics.md")]
