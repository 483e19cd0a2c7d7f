#![doc = include_str!("borrowing.md")]
