//! The config, and how it maps envoyproxy/ratelimit's.
#![doc = include_str!("../README.md")]
