//! No code: this package holds the tests (`tests/`), examples (`examples/`)
//! and benchmarks (`benches/`) of `shuffle-limiter` that need its optional
//! features (`wait`, `tower`, `config`, `metrics`, `redis`), a heavy crate
//! (axum, reqwest, criterion, governor, metrics-util, TOML, the Redis
//! Cluster client) or a `redis-server`. They live apart from the library so
//! that its own tests do not build reqwest, criterion, governor, the Redis
//! Cluster client or tokio's full runtime. TESTING.md says where a new
//! test goes.
