#![doc = include_str!("users_and_tiers.md")]
