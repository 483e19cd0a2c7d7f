//! A `redis-server` of our own for the tests and the benchmark: on a free
//! 127.0.0.1 port, without persistence, killed on drop.
#![allow(dead_code)] // each user takes what it needs

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use redis::aio::MultiplexedConnection;

/// A `redis-server` child process on a free port, killed on drop.
pub(crate) struct RedisServer {
    child: Option<Child>,
    pub(crate) port: u16,
    args: Vec<String>,
}

impl RedisServer {
    pub(crate) fn start() -> RedisServer {
        RedisServer::start_with(&[])
    }

    /// A server with extra command-line arguments, e.g. `--requirepass x`.
    pub(crate) fn start_with(extra: &[&str]) -> RedisServer {
        RedisServer::start_on(free_port(), extra)
    }

    /// A server on `port`, for arguments that must name the port.
    pub(crate) fn start_on(port: u16, extra: &[&str]) -> RedisServer {
        let mut server = RedisServer {
            child: None,
            port,
            args: extra.iter().map(|s| s.to_string()).collect(),
        };
        server.spawn();
        server
    }

    fn spawn(&mut self) {
        let binary = std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
        let port = self.port.to_string();
        let dir = std::env::temp_dir();
        let child = Command::new(&binary)
            .args(["--port", &port, "--bind", "127.0.0.1", "--save", ""])
            .args([
                "--appendonly",
                "no",
                "--daemonize",
                "no",
                "--loglevel",
                "warning",
            ])
            .arg("--dir")
            .arg(&dir)
            .args(&self.args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start {binary:?} ({e}): install it (apt-get install redis-server) \
                     or set REDIS_SERVER to its path"
                )
            });
        self.child = Some(child);
        self.wait_ready();
    }

    /// Polls until the server answers PING (or asks for a password).
    fn wait_ready(&mut self) {
        let addr = ([127, 0, 0, 1], self.port).into();
        for _ in 0..250 {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!(
                    "redis-server on port {} exited at start: {status}",
                    self.port
                );
            }
            if let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_millis(100)) {
                let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
                let mut reply = [0u8; 16];
                if s.write_all(b"PING\r\n").is_ok() && matches!(s.read(&mut reply), Ok(n) if n > 0)
                {
                    return;
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!(
            "redis-server on port {} did not answer within 5 s",
            self.port
        );
    }

    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.as_ref().expect("server running").id()
    }

    pub(crate) fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([signal, &self.pid().to_string()])
            .status()
            .expect("kill(1)");
        assert!(status.success(), "kill {signal} failed");
    }

    pub(crate) fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub(crate) fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// A plain connection of the test's own.
    pub(crate) async fn connection(&self) -> MultiplexedConnection {
        redis::Client::open(self.url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap()
    }

    /// The server's `INFO commandstats` since the last look, which resets
    /// them (read with [`stat`]). A command the server runs between the
    /// two (one this process sent from a task of its own) is counted in
    /// neither look: where one may, read [`command_totals`](Self::command_totals).
    pub(crate) async fn command_stats(&self) -> String {
        let stats = self.command_totals().await;
        let mut connection = self.connection().await;
        let () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query_async(&mut connection)
            .await
            .unwrap();
        stats
    }

    /// The server's `INFO commandstats` since they were last reset, without
    /// resetting them.
    pub(crate) async fn command_totals(&self) -> String {
        redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut self.connection().await)
            .await
            .unwrap()
    }

    /// The calls of the limiter's script (`EVALSHA`) and of its function
    /// (`FCALL`) since the last look, which resets them.
    pub(crate) async fn script_calls(&self) -> (u64, u64) {
        let stats = self.command_stats().await;
        (
            stat(&stats, "evalsha", "calls"),
            stat(&stats, "fcall", "calls"),
        )
    }
}

/// One field of one command's line of `INFO commandstats` (0 if none).
pub(crate) fn stat(stats: &str, command: &str, field: &str) -> u64 {
    (stats.lines())
        .find_map(|line| line.strip_prefix(&format!("cmdstat_{command}:")))
        .and_then(|line| {
            (line.split(','))
                .find_map(|f| f.strip_prefix(&format!("{field}=")))?
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

/// A port nobody listens on at the moment of asking.
pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port on 127.0.0.1")
        .port()
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        // SIGKILL also ends a stopped process.
        self.kill();
    }
}
