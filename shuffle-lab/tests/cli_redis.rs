//! `shuffle-lab simulate --redis-url`: the live flood against a real
//! `redis-server` on 127.0.0.1, measured beside the prediction.

use std::process::{Command, Output};
use std::sync::{Mutex, MutexGuard};

use serde_json::Value;

#[path = "../../tests/support/redis_server.rs"]
mod redis_server;
use redis_server::{RedisServer, free_port};

/// One flood at a time: two at once on a small host would measure the host.
fn one_at_a_time() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_shuffle-lab"))
        .args(args)
        .output()
        .expect("the shuffle-lab binary runs")
}

/// N = 8, k = 2, 100 tenants, seed 1: three tenants share `tenant-0`'s
/// whole shard, 49 share none of its buckets.
const SCENE: &[&str] = &[
    "simulate",
    "--buckets",
    "8",
    "--per-tenant",
    "2",
    "--tenants",
    "100",
    "--seed",
    "1",
];

fn count(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("{v} is not a count"))
}

#[test]
fn simulate_floods_a_real_redis_and_measures_it_beside_the_math() {
    let _serial = one_at_a_time();
    let server = RedisServer::start();
    let url = server.url();
    let args: Vec<&str> = SCENE
        .iter()
        .copied()
        .chain(["--redis-url", &url, "--json"])
        .collect();
    let out = run(&args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let r = &v["redis"];
    eprintln!("{r}");

    assert_eq!(r["tenants"], 100);
    assert_eq!(r["requests_per_tenant"], 20);
    let by = &r["by_overlap"];
    let (down, untouched) = (count(&by["fully_down"]), count(&by["unaffected"]));
    // The fixture has tenants of both kinds.
    assert!(down >= 1 && untouched >= 20, "{by}");
    let me = &r["measured"];
    let measured: u64 = ["fully_down", "degraded", "unaffected"]
        .iter()
        .map(|k| count(&me[k]))
        .sum();
    assert_eq!(measured, 99);
    // Every tenant sharing no bucket with the flooder kept its requests:
    // the flood reached none of them through Redis, the executor or the
    // breaker. (integration/tests/redis_fleet.rs holds them to 99 % across
    // processes; here a reply the busy host makes late is lost to the policy
    // too.)
    let shares = &r["mean_share_by_overlap"];
    assert!(shares[0].as_f64().unwrap() >= 0.98, "{shares}");
    assert!(count(&me["unaffected"]) >= untouched, "{me} vs {by}");
    // The flood really ran against its buckets in Redis: it took most of
    // what its two buckets refilled (3960/s over 8 buckets, for 2 s) …
    let refilled = 2.0 * 3960.0 / 8.0 * 2.0;
    assert!(count(&r["flood_granted"]) as f64 >= 0.85 * refilled, "{r}");
    // … and the tenants with its very shard lost requests. Not all of them,
    // in real time: a bucket refills a token every 2 ms, and a light request
    // that lands between a refill and the flooder's next try takes it.
    assert!(shares[2].as_f64().unwrap() <= 0.9, "{shares}");
    assert!(
        count(&me["fully_down"]) + count(&me["degraded"]) >= down,
        "{me}"
    );
    // The flood looped far faster than Redis was asked: cached denials.
    assert!(
        count(&r["flood_checks"]) > 10 * count(&r["from_redis"]),
        "{r}"
    );
    assert!(count(&r["from_cache"]) > 0, "{r}");
    // The in-process run is unchanged beside it.
    assert_eq!(
        v["live"]["measured"]["fully_down"],
        v["live"]["by_overlap"]["fully_down"]
    );
}

#[test]
fn simulate_over_redis_prints_the_measured_row_beside_the_prediction() {
    let _serial = one_at_a_time();
    let server = RedisServer::start();
    let url = server.url();
    let args: Vec<&str> = SCENE.iter().copied().chain(["--redis-url", &url]).collect();
    let out = run(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let section = text
        .split_once("live over Redis: 100 tenants for 2 s in real time")
        .unwrap_or_else(|| panic!("no Redis section: {text}"))
        .1;
    for row in [
        "predicted (math)",
        "by assignment",
        "measured over Redis",
        "cached denials",
    ] {
        assert!(section.contains(row), "no {row:?} in {section}");
    }
}

#[test]
fn a_redis_url_that_does_not_answer_is_a_one_line_error_naming_the_flag() {
    let _serial = one_at_a_time();
    let url = format!("redis://127.0.0.1:{}", free_port());
    let args: Vec<&str> = SCENE.iter().copied().chain(["--redis-url", &url]).collect();
    let out = run(&args);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with("shuffle-lab: error: --redis-url: "),
        "{stderr}"
    );
    assert!(stderr.contains("point --redis-url at one"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");

    let args: Vec<&str> = SCENE
        .iter()
        .copied()
        .chain(["--redis-url", "http://nowhere"])
        .collect();
    let out = run(&args);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with("shuffle-lab: error: --redis-url: "),
        "{stderr}"
    );
}
