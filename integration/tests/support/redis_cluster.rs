//! A Redis Cluster of our own for the tests and the benchmark: three masters
//! without replicas on free 127.0.0.1 ports, joined with
//! `redis-cli --cluster create`, killed (and their directories removed) on
//! drop. It needs `redis-server` 7 or later (for `--cluster-port`) and
//! `redis-cli`, or their paths in `REDIS_SERVER` and `REDIS_CLI`.
#![allow(dead_code)] // each user takes what it needs

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;

use crate::redis_server::{RedisServer, free_port};

/// How long the cluster may take to form before the test gives up.
const FORM_WITHIN: Duration = Duration::from_secs(20);

/// Three masters on free ports, each in a directory of its own, killed (and
/// the directories removed) on drop.
pub(crate) struct RedisCluster {
    pub(crate) nodes: Vec<RedisServer>,
    dirs: Vec<PathBuf>,
    /// `(first slot, last slot, index into nodes)`, read once the cluster is
    /// up: nothing reshards it during a test.
    slots: Vec<(u16, u16, usize)>,
}

impl RedisCluster {
    pub(crate) fn start() -> RedisCluster {
        // Filled as the nodes start, so that a failure half-way still kills
        // the ones already running.
        let mut cluster = RedisCluster {
            nodes: Vec::new(),
            dirs: Vec::new(),
            slots: Vec::new(),
        };
        let mut taken = Vec::new();
        let mut fresh_port = || loop {
            let port = free_port();
            if !taken.contains(&port) {
                taken.push(port);
                return port;
            }
        };
        for _ in 0..3 {
            // The cluster bus gets a port of its own: the default, the
            // client port + 10000, may be taken or past 65535.
            let (port, bus) = (fresh_port(), fresh_port());
            let dir = std::env::temp_dir().join(format!(
                "shuffle-limiter-cluster-{}-{port}",
                std::process::id()
            ));
            std::fs::create_dir_all(&dir).expect("a temporary directory");
            cluster.dirs.push(dir.clone());
            let config = dir.join(format!("nodes-{port}.conf"));
            let (config, dir, bus) = (
                config.to_str().expect("a UTF-8 temporary path").to_owned(),
                dir.to_str().expect("a UTF-8 temporary path").to_owned(),
                bus.to_string(),
            );
            cluster.nodes.push(RedisServer::start_on(
                port,
                &[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    &config,
                    "--cluster-port",
                    &bus,
                    "--dir",
                    &dir,
                ],
            ));
        }
        cluster.create();
        cluster.wait_until_ok();
        cluster.slots = cluster.read_slots();
        cluster
    }

    /// `redis-cli --cluster create`, bounded in time.
    fn create(&self) {
        let binary = std::env::var("REDIS_CLI").unwrap_or_else(|_| "redis-cli".into());
        let mut child = Command::new(&binary)
            .args(["--cluster", "create"])
            .args(self.nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)))
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start {binary:?} ({e}): install it (apt-get install redis-tools, \
                     which redis-server pulls in) or set REDIS_CLI to its path"
                )
            });
        let started = Instant::now();
        // Its few kilobytes of output fit in the pipes while it runs.
        while child.try_wait().expect("wait for redis-cli").is_none() {
            if started.elapsed() > FORM_WITHIN {
                let _ = child.kill();
                let output = child.wait_with_output().expect("redis-cli output");
                panic!(
                    "redis-cli --cluster create ran longer than {FORM_WITHIN:?}: {}",
                    String::from_utf8_lossy(&output.stdout)
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let output = child.wait_with_output().expect("redis-cli output");
        assert!(
            output.status.success(),
            "redis-cli --cluster create failed ({}): {}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// Polls `CLUSTER INFO` until every node says `cluster_state:ok`.
    fn wait_until_ok(&self) {
        let started = Instant::now();
        let mut last = String::new();
        while started.elapsed() < FORM_WITHIN {
            let mut ok = 0;
            for node in &self.nodes {
                match cluster_command(node, "INFO") {
                    Ok(info) if info.contains("cluster_state:ok") => ok += 1,
                    Ok(info) => last = format!("port {}: {info}", node.port),
                    Err(e) => last = format!("port {}: {e}", node.port),
                }
            }
            if ok == self.nodes.len() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("the cluster was not ok within {FORM_WITHIN:?}; last seen {last}");
    }

    /// The slot ranges of each node, from `CLUSTER NODES`.
    fn read_slots(&self) -> Vec<(u16, u16, usize)> {
        let nodes = cluster_command(&self.nodes[0], "NODES").expect("CLUSTER NODES");
        let mut slots = Vec::new();
        // <id> <ip:port@bus> <flags> <master> <ping> <pong> <epoch> <link> <slot>...
        for line in nodes.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let Some(address) = fields.get(1) else {
                continue;
            };
            let port: u16 = address
                .split('@')
                .next()
                .and_then(|a| a.rsplit(':').next())
                .and_then(|p| p.parse().ok())
                .unwrap_or_else(|| panic!("no port in {line:?}"));
            let node = self
                .nodes
                .iter()
                .position(|n| n.port == port)
                .unwrap_or_else(|| panic!("an unknown node in {line:?}"));
            // Migrating slots ("[slot->-id]") do not occur in a fresh cluster.
            for range in fields.iter().skip(8).filter(|r| !r.starts_with('[')) {
                let (first, last) = range.split_once('-').unwrap_or((range, range));
                slots.push((first.parse().unwrap(), last.parse().unwrap(), node));
            }
        }
        let covered: usize = slots
            .iter()
            .map(|(first, last, _)| usize::from(last - first) + 1)
            .sum();
        assert_eq!(covered, 16384, "every slot has a node: {nodes}");
        slots
    }

    /// The node serving `slot`.
    pub(crate) fn owner(&self, slot: u16) -> &RedisServer {
        let &(_, _, node) = self
            .slots
            .iter()
            .find(|(first, last, _)| (*first..=*last).contains(&slot))
            .expect("every slot has a node");
        &self.nodes[node]
    }

    /// A cluster connection through the `redis` crate's cluster client.
    pub(crate) async fn connect(&self) -> ClusterConnection {
        self.connect_with(Duration::from_secs(2)).await
    }

    /// A cluster connection whose requests give up after `response_timeout`.
    pub(crate) async fn connect_with(&self, response_timeout: Duration) -> ClusterConnection {
        ClusterClient::builder(self.nodes.iter().map(RedisServer::url))
            .connection_timeout(Duration::from_secs(2))
            .response_timeout(response_timeout)
            .build()
            .unwrap()
            .get_async_connection()
            .await
            .unwrap()
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        // Dropping a node kills it; then its files can go.
        self.nodes.clear();
        for dir in &self.dirs {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// `CLUSTER <sub>` on one node, on a blocking connection with timeouts.
pub(crate) fn cluster_command(node: &RedisServer, sub: &str) -> redis::RedisResult<String> {
    let wait = Duration::from_secs(1);
    let mut connection = redis::Client::open(node.url())?.get_connection_with_timeout(wait)?;
    connection.set_read_timeout(Some(wait))?;
    redis::cmd("CLUSTER").arg(sub).query(&mut connection)
}

/// Holds off the other tests while the guard lives: one cluster at a time.
pub(crate) fn one_at_a_time() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}
