//! A rate-limit service any Envoy can call: Envoy's RLS v3
//! (`envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`) over
//! gRPC, and the same over HTTP/JSON, on shuffle-limiter: each descriptor's
//! one budget, shuffle-sharded between its values, so that one value
//! cannot take it all.
//!
//! The binary `shuffle-limiter-server --config FILE [--grpc ADDR] [--http
//! ADDR] [--redis URL]` is [`start`] with [`Options`]; the config format,
//! and how every field of envoyproxy/ratelimit's maps, is in [`guide`].
//!
//! ```no_run
//! # async fn run() -> Result<(), shuffle_limiter_server::Error> {
//! use shuffle_limiter_server::{Options, start};
//!
//! let server = start(Options::new("server/examples/partner_api.yaml")).await?;
//! println!("gRPC on {}, HTTP on {}", server.grpc_addr(), server.http_addr());
//! server.wait().await
//! # }
//! ```
#![forbid(unsafe_code)]

mod config;
mod decide;
mod engine;
mod grpc;
pub mod guide;
mod http;
mod metrics;
mod names;
mod rules;
mod serve;
mod state;
mod wire;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

pub use config::{Config, ConfigError, MAX_CONFIG_STRING};
pub use decide::{MAX_DESCRIPTORS, MAX_ENTRIES, MAX_VALUE_LEN};
pub use grpc::{MAX_MESSAGE, MAX_STREAMS};

use rules::StoreChoice;
use state::State;

/// Why the server could not start or reload.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The config file cannot be read or is wrong (file, line, field).
    Config(ConfigError),
    /// A limiter could not be built, or (on a reload) changed live (over
    /// Redis: the server refused, or is away).
    Build(String),
    /// An address could not be bound, or a listener failed.
    Io(std::io::Error),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Config(e) => write!(f, "config: {e}"),
            Error::Build(e) => write!(f, "cannot build a limiter: {e}"),
            Error::Io(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<ConfigError> for Error {
    fn from(e: ConfigError) -> Self {
        Error::Config(e)
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Io(e)
    }
}

/// How to start the server.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Options {
    /// The config file.
    pub config: PathBuf,
    /// Where gRPC listens (default `127.0.0.1:8081`).
    pub grpc: SocketAddr,
    /// Where HTTP listens (default `127.0.0.1:8080`).
    pub http: SocketAddr,
    /// A Redis URL: the buckets live there, shared by every replica.
    pub redis: Option<String>,
    /// How often the config file's modification time is read; `None`: not
    /// watched (default every 2 s).
    pub watch: Option<Duration>,
    /// Reload on SIGHUP (default on; Unix only).
    pub sighup: bool,
}

impl Options {
    /// Serves `config` on the default addresses, in process, watched.
    pub fn new(config: impl Into<PathBuf>) -> Options {
        Options {
            config: config.into(),
            grpc: SocketAddr::from(([127, 0, 0, 1], 8081)),
            http: SocketAddr::from(([127, 0, 0, 1], 8080)),
            redis: None,
            watch: Some(Duration::from_secs(2)),
            sighup: true,
        }
    }
}

/// A running server: its addresses, reload, and stop.
#[derive(Debug)]
pub struct Running {
    grpc: SocketAddr,
    http: SocketAddr,
    state: Arc<State>,
    stop: watch::Sender<bool>,
    tasks: JoinSet<Result<(), Error>>,
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("State").finish_non_exhaustive()
    }
}

/// Reads the config, builds its limiters, binds both addresses and serves
/// them until [`Running::shutdown`].
///
/// # Errors
/// [`Error::Config`] for a config that is wrong, [`Error::Build`] when
/// Redis refuses, [`Error::Io`] for an address that cannot be bound.
pub async fn start(options: Options) -> Result<Running, Error> {
    let store = match &options.redis {
        Some(url) => StoreChoice::Redis(url.clone()),
        None => StoreChoice::Local,
    };
    let state = Arc::new(State::load(&options.config, store).await?);
    let grpc_listener = TcpListener::bind(options.grpc).await?;
    let http_listener = TcpListener::bind(options.http).await?;
    let grpc = grpc_listener.local_addr()?;
    let http = http_listener.local_addr()?;
    let (stop, stopped) = watch::channel(false);
    let until = |mut stopped: watch::Receiver<bool>| async move {
        let _ = stopped.wait_for(|&s| s).await;
    };
    let mut tasks = JoinSet::new();
    let incoming = serve::Incoming::new(grpc_listener);
    let router = grpc::router(Arc::clone(&state));
    let grpc_stop = until(stopped.clone());
    tasks.spawn(async move {
        router
            .serve_with_incoming_shutdown(incoming, grpc_stop)
            .await
            .map_err(|e| Error::Io(std::io::Error::other(e)))
    });
    let app = http::router(Arc::clone(&state));
    let http_stop = until(stopped.clone());
    tasks.spawn(async move {
        serve::http(http_listener, app, http_stop)
            .await
            .map_err(Error::Io)
    });
    if let Some(every) = options.watch {
        let state = Arc::clone(&state);
        let mut stopped = stopped.clone();
        tasks.spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = tick.tick() => state.reload_if_changed().await,
                    _ = stopped.changed() => return Ok(()),
                }
            }
        });
    }
    #[cfg(unix)]
    if options.sighup {
        use tokio::signal::unix::{SignalKind, signal};
        let mut hup = signal(SignalKind::hangup())?;
        let state = Arc::clone(&state);
        let mut stopped = stopped.clone();
        tasks.spawn(async move {
            loop {
                tokio::select! {
                    Some(()) = hup.recv() => { let _ = state.reload().await; }
                    _ = stopped.changed() => return Ok(()),
                }
            }
        });
    }
    tracing::info!(%grpc, %http, config = %options.config.display(), "serving");
    Ok(Running {
        grpc,
        http,
        state,
        stop,
        tasks,
    })
}

impl Running {
    /// The address gRPC listens on (the port the OS chose for port 0).
    pub fn grpc_addr(&self) -> SocketAddr {
        self.grpc
    }

    /// The address HTTP listens on.
    pub fn http_addr(&self) -> SocketAddr {
        self.http
    }

    /// Reads the config file again and serves it, as SIGHUP does: every
    /// rule that stays keeps its buckets' state; on an error (a config
    /// that does not read or build, or a live change of a rate or N that
    /// cannot be made) the old config stays in force (and `/metrics`
    /// counts the failure).
    ///
    /// # Errors
    /// What made the new config unusable.
    pub async fn reload(&self) -> Result<(), Error> {
        self.state.reload().await
    }

    /// Stops serving: closes the listeners, lets open connections finish
    /// for a few seconds (a stalled one is dropped by then: every request,
    /// head and preface has a timeout), and returns.
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        let drained = async { while self.tasks.join_next().await.is_some() {} };
        if tokio::time::timeout(serve::GRACE, drained).await.is_err() {
            self.tasks.abort_all();
            while self.tasks.join_next().await.is_some() {}
        }
    }

    /// Serves until a listener fails.
    ///
    /// # Errors
    /// The listener's error.
    pub async fn wait(mut self) -> Result<(), Error> {
        while let Some(done) = self.tasks.join_next().await {
            match done {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(e),
                Err(e) => return Err(Error::Io(std::io::Error::other(e))),
            }
        }
        Ok(())
    }
}
