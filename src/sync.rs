//! The atomics the limiter's state is made of: std's, or loom's when the
//! crate is built with `--cfg shuffle_limiter_loom` to model-check every interleaving
//! (`tests/loom.rs`).

#[cfg(shuffle_limiter_loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, Ordering};
#[cfg(not(shuffle_limiter_loom))]
pub(crate) use std::sync::atomic::{AtomicU64, Ordering};
