//! What the server holds: the rules now served, swapped whole on a reload.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use arc_swap::ArcSwap;
use tokio::sync::Mutex;

use crate::config::Config;
use crate::metrics::Metrics;
use crate::rules::{Rules, StoreChoice};

/// The rules being served, the config file they came from, and the server's
/// metrics.
pub(crate) struct State {
    pub(crate) rules: ArcSwap<Rules>,
    pub(crate) metrics: Metrics,
    path: PathBuf,
    store: StoreChoice,
    /// One reload at a time, and the file's modification time it read.
    reloading: Mutex<Option<SystemTime>>,
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

fn log_warnings(config: &Config) {
    for warning in &config.warnings {
        tracing::warn!("{warning}");
    }
}

impl State {
    /// Reads the config and builds its rules.
    pub(crate) async fn load(path: &Path, store: StoreChoice) -> Result<State, crate::Error> {
        let seen = modified(path);
        let config = Config::read(path)?;
        log_warnings(&config);
        let metrics = Metrics::new();
        let rules = Rules::build(&config, None, &store, &metrics)
            .await
            .map_err(crate::Error::Build)?;
        metrics.rules.set(rules.len() as f64);
        Ok(State {
            rules: ArcSwap::from_pointee(rules),
            metrics,
            path: path.to_owned(),
            store,
            reloading: Mutex::new(seen),
        })
    }

    /// Reads the config again and serves it, keeping the limiters of the
    /// rules that stay; on any error keeps serving the old one.
    pub(crate) async fn reload(&self) -> Result<(), crate::Error> {
        let mut seen = self.reloading.lock().await;
        *seen = modified(&self.path);
        let result = async {
            let config = Config::read(&self.path)?;
            log_warnings(&config);
            let old = self.rules.load_full();
            Rules::build(&config, Some(&old), &self.store, &self.metrics)
                .await
                .map_err(crate::Error::Build)
        }
        .await;
        match result {
            Ok(rules) => {
                self.metrics.rules.set(rules.len() as f64);
                self.rules.store(Arc::new(rules));
                self.metrics.reload_ok.increment(1);
                tracing::info!(config = %self.path.display(), "reloaded");
                Ok(())
            }
            Err(e) => {
                self.metrics.reload_error.increment(1);
                tracing::error!("reload failed, the old config stays: {e}");
                Err(e)
            }
        }
    }

    /// Reloads when the file's modification time is not the one last read.
    pub(crate) async fn reload_if_changed(&self) {
        let changed = *self.reloading.lock().await != modified(&self.path);
        if changed {
            let _ = self.reload().await;
        }
    }
}
