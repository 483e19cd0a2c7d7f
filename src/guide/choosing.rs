#![doc = include_str!("choosing.md")]
