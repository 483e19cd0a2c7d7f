//! A child process of a test (a fleet's worker), waited for with a bound.

use std::process::Child;
use std::time::{Duration, Instant};

/// Waits for `child`, killing it after `limit`; its stdout, once it exited
/// successfully.
pub(crate) fn wait_bounded(mut child: Child, limit: Duration) -> String {
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > limit {
            let _ = child.kill();
            panic!("a child process ran longer than {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "a child process failed: {:?}",
        output.status
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}
