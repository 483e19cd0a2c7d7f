//! How the loom targets (`tests/loom.rs`, `tests/loom_changes.rs`) explore
//! their models.

/// Every interleaving of `f` with at most three forced switches.
pub(crate) fn model(f: impl Fn() + Sync + Send + 'static) {
    model_bounded(3, f);
}

/// Explores every interleaving with at most `preemptions` forced switches.
#[allow(dead_code)] // not every target bounds a model of its own
pub(crate) fn model_bounded(preemptions: usize, f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(preemptions);
    builder.check(f);
}
