#![doc = include_str!("per_upstream.md")]
