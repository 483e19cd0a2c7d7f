#![doc = include_str!("upstream.md")]
