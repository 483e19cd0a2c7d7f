//! A `redis-server` of the test's own on a free 127.0.0.1 port, without
//! persistence, killed on drop (a small copy of the library's
//! tests/support/redis_server.rs).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub(crate) struct RedisServer {
    child: Child,
    port: u16,
}

impl RedisServer {
    pub(crate) fn start() -> RedisServer {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port on 127.0.0.1")
            .port();
        let binary = std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
        let child = Command::new(&binary)
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
            ])
            .args([
                "--appendonly",
                "no",
                "--daemonize",
                "no",
                "--loglevel",
                "warning",
            ])
            .arg("--dir")
            .arg(std::env::temp_dir())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start {binary:?} ({e}): install redis-server or set REDIS_SERVER")
            });
        let mut server = RedisServer { child, port };
        server.wait_ready();
        server
    }

    fn wait_ready(&mut self) {
        let addr = ([127, 0, 0, 1], self.port).into();
        for _ in 0..250 {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("redis-server exited at start: {status}");
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
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
