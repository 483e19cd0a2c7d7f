#![doc = include_str!("tower.md")]
