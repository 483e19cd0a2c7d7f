//! `shuffle-lab page` in a real browser: the page written by the binary,
//! loaded from disk by headless Chromium with inputs in its URL query, must
//! show what `size --json`, `simulate --json` and `plot --json` print for
//! the same inputs, and the shards of docs/assignment.md's vectors. And the
//! server of `page --serve` answers with the same page.
//!
//! Without Chromium the browser tests check nothing, except under CI=true,
//! where they fail (`scripts/test` installs it).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

#[path = "support/browser.rs"]
mod browser;
#[path = "support/lab.rs"]
mod lab;

use browser::{TempDir, assert_same, chromium, dump_dom, lab_state, url, write_page};

/// The keys the page adds to those of `size --json`.
const PAGE_ONLY: &[&str] = &["sample", "simulate", "plot", "salt", "seed", "sample_note"];

/// Loads the page with `query` and returns its state.
fn state_for(query: &str) -> Option<Value> {
    let chromium = chromium()?;
    let dir = TempDir::new("page");
    let page = write_page(&dir.0);
    let dom = dump_dom(&chromium, &dir.0.join("profile"), &url(&page, query));
    Some(lab_state(&dom))
}

/// Query pairs as the CLI's flags, in order.
fn flags(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (format!("--{k}"), v.to_owned()))
        .collect()
}

fn cli_args<'a>(cmd: &'a str, pairs: &'a [(String, String)], only: &[&str]) -> Vec<&'a str> {
    let mut args = vec![cmd];
    for (k, v) in pairs {
        if only.contains(&k.as_str()) {
            args.extend([k.as_str(), v.as_str()]);
        }
    }
    args
}

/// The page's state must equal `size --json` on every key `size` has, the
/// sample must be counted as `simulate --json` counts it, and the plot must
/// carry the points of `plot --json`.
fn agrees_with_the_cli(query: &str) {
    let Some(state) = state_for(query) else {
        return;
    };
    assert!(state.get("error").is_none(), "{query}: {state}");
    let pairs = flags(query);

    let size_flags = [
        "--buckets",
        "--per-tenant",
        "--tenants",
        "--noisy",
        "--borrow-from",
        "--lender-reserve",
        "--per-user",
    ];
    let size = lab::json(&cli_args("size", &pairs, &size_flags));
    let mut shown = state.as_object().unwrap().clone();
    for k in PAGE_ONLY {
        shown.remove(*k);
    }
    assert_same(&Value::Object(shown), &size, query);

    let n = state["buckets"].to_string();
    let dir = TempDir::new("plot");
    let svg = dir.0.join("k.svg");
    let plot = lab::json(&["plot", "--buckets", &n, "--svg", svg.to_str().unwrap()]);
    let (got, want) = (&state["plot"]["points"], &plot["points"]);
    assert_eq!(state["plot"]["per_tenant_max"], plot["per_tenant_max"]);
    assert_eq!(
        got.as_array().unwrap().len(),
        want.as_array().unwrap().len()
    );
    for (g, w) in got.as_array().unwrap().iter().zip(want.as_array().unwrap()) {
        assert_eq!(g["per_tenant"], w["per_tenant"]);
        assert_eq!(
            lab::f(&g["bucket_blast_radius"]),
            lab::f(&w["bucket_blast_radius"])
        );
        // Math.log10 and the C library's may differ in the last bit.
        let (a, b) = (
            lab::f(&g["log10_p_identical"]),
            lab::f(&w["log10_p_identical"]),
        );
        assert!((a - b).abs() <= b.abs() * 1e-14, "log10: page {a}, CLI {b}");
    }

    // simulate over the tenants the page drew (all of them unless capped).
    let m = &state["simulate"];
    let drawn = m["tenants"].to_string();
    let mut sim_pairs: Vec<(String, String)> = pairs
        .iter()
        .filter(|(k, _)| ["--buckets", "--per-tenant", "--seed", "--salt"].contains(&k.as_str()))
        .cloned()
        .collect();
    sim_pairs.push(("--tenants".into(), drawn));
    let only = ["--buckets", "--per-tenant", "--tenants", "--seed", "--salt"];
    let sim = lab::json(&cli_args("simulate", &sim_pairs, &only));
    for key in ["bad_tenant_shard", "observed", "expected", "sigma", "z"] {
        assert_same(&m[key], &sim[key], &format!("{query}: simulate.{key}"));
    }
    let sample = state["sample"].as_array().unwrap();
    assert_eq!(sample.len() as u64, m["tenants"].as_u64().unwrap());
    assert_eq!(sample[0][1], sim["bad_tenant_shard"]);
    for (i, row) in sample.iter().enumerate() {
        assert_eq!(row[0].as_u64(), Some(i as u64), "{query}: sample row {i}");
    }
}

#[test]
fn the_page_shows_what_size_and_simulate_print() {
    agrees_with_the_cli("buckets=16&per-tenant=2&tenants=400&seed=1");
    // Every optional model at once, a salt, and k not dividing N.
    agrees_with_the_cli(
        "buckets=15&per-tenant=3&tenants=1000&seed=7&salt=acme&borrow-from=2\
         &lender-reserve=0.25&noisy=3&per-user=2",
    );
    // No reserve: a flooder drains its spill buckets too.
    agrees_with_the_cli(
        "buckets=64&per-tenant=4&tenants=2000&seed=3&borrow-from=3&lender-reserve=0",
    );
}

/// N in the thousands: the math exact, the sample capped (and said so).
#[test]
fn large_n_caps_the_sample_not_the_math() {
    let query = "buckets=5000&per-tenant=8&tenants=20000&seed=1&noisy=4";
    agrees_with_the_cli(query);
    let Some(state) = state_for(query) else {
        return;
    };
    let drawn = state["simulate"]["tenants"].as_u64().unwrap();
    assert!(drawn < 20_000, "{drawn}");
    assert!(state["sample_note"].is_null());
    assert_eq!(state["simulate"]["of_tenants"], 20_000);
}

/// One row of a known-answer table: N, k, salt, tenant number, shard.
type Vector = (u32, u32, String, u64, Vec<u64>);
/// The rows by (N, k, salt): tenant number and shard.
type Groups = BTreeMap<(u32, u32, String), Vec<(u64, Vec<u64>)>>;

/// The rows of docs/assignment.md whose tenant is `tenant-<i>`: the main
/// table (7 cells) and the spill table (8 cells), shard column only.
fn vectors() -> Vec<Vector> {
    let doc = include_str!("../../docs/assignment.md");
    let mut out = Vec::new();
    for line in doc.lines().filter(|l| l.starts_with("| ")) {
        let cells: Vec<&str> = line.trim_matches('|').split(" | ").map(str::trim).collect();
        let (n, k, salt, tenant, shard) = match cells.len() {
            7 => (cells[0], cells[1], cells[2], cells[4], cells[6]),
            8 => (cells[0], cells[1], cells[3], cells[5], cells[6]),
            _ => continue,
        };
        let (Ok(n), Ok(k)) = (n.parse(), k.parse()) else {
            continue;
        };
        let Some(i) = tenant
            .strip_prefix("`tenant-")
            .and_then(|t| t.strip_suffix('`'))
            .and_then(|t| t.parse().ok())
        else {
            continue;
        };
        let salt = match salt {
            "none" => String::new(),
            s => s.trim_matches('`').to_owned(),
        };
        let shard = shard.split(", ").map(|b| b.parse().unwrap()).collect();
        out.push((n, k, salt, i, shard));
    }
    out
}

/// The page's sample, with the seed left blank, is the assignment of the
/// spec: the known-answer shards of tenant-0, tenant-1, … come out in order.
#[test]
fn the_sample_is_the_specified_assignment() {
    let vectors = vectors();
    assert!(vectors.len() >= 20, "{}", vectors.len());
    let mut groups = Groups::new();
    for (n, k, salt, i, shard) in vectors {
        // The page draws at most 2^20 scores per update.
        if (i + 1) * u64::from(n) <= 1 << 20 {
            groups.entry((n, k, salt)).or_default().push((i, shard));
        }
    }
    assert!(groups.keys().any(|g| g.0 == 65536), "{groups:?}");
    let mut checked = 0;
    for ((n, k, salt), rows) in groups {
        let tenants = rows.iter().map(|r| r.0 + 1).max().unwrap().max(2);
        let query = format!("buckets={n}&per-tenant={k}&tenants={tenants}&seed=&salt={salt}");
        let Some(state) = state_for(&query) else {
            return;
        };
        let sample = state["sample"]
            .as_array()
            .unwrap_or_else(|| panic!("{state}"));
        for (i, shard) in rows {
            let got: Vec<u64> = sample[i as usize][1]
                .as_array()
                .unwrap()
                .iter()
                .map(|b| b.as_u64().unwrap())
                .collect();
            assert_eq!(got, shard, "{query}: tenant-{i}");
            checked += 1;
        }
    }
    assert!(checked >= 20, "{checked}");
}

/// Bad input shows a message (the CLI's own where the CLI refuses the same
/// input) and keeps `{"error": …}` as the state; the page is not frozen,
/// since its DOM comes back.
#[test]
fn bad_input_shows_a_message() {
    let Some(chromium) = chromium() else { return };
    let dir = TempDir::new("bad");
    let page = write_page(&dir.0);
    let profile = dir.0.join("profile");
    let refused = |args: &[&str]| {
        let line = lab::refused(args);
        line.trim()
            .strip_prefix("shuffle-lab: error: ")
            .unwrap()
            .to_owned()
    };
    let cases: Vec<(&str, String)> = vec![
        (
            "buckets=4&per-tenant=9",
            refused(&["size", "--buckets", "4", "--per-tenant", "9"]),
        ),
        (
            "buckets=8&per-tenant=2&per-user=3",
            refused(&[
                "size",
                "--buckets",
                "8",
                "--per-tenant",
                "2",
                "--per-user",
                "3",
            ]),
        ),
        (
            "buckets=8&per-tenant=2&lender-reserve=0.5",
            refused(&[
                "size",
                "--buckets",
                "8",
                "--per-tenant",
                "2",
                "--lender-reserve",
                "0.5",
            ]),
        ),
        (
            "buckets=abc&per-tenant=2",
            "--buckets 'abc' is not a whole number".into(),
        ),
        (
            "buckets=16&per-tenant=2&lender-reserve=x&borrow-from=1",
            "not a number".into(),
        ),
        (
            "buckets=99999999999999999999&per-tenant=2",
            "more than this page takes".into(),
        ),
        (
            "buckets=20000&per-tenant=1500",
            "more than this page computes at once".into(),
        ),
        (
            "buckets=60000&per-tenant=3000",
            "more than this tool handles (16384)".into(),
        ),
    ];
    for (query, want) in cases {
        let dom = dump_dom(&chromium, &profile, &url(&page, query));
        let error = lab_state(&dom)["error"].as_str().map(str::to_owned);
        let error = error.unwrap_or_else(|| panic!("{query}: no error in {dom}"));
        assert!(
            error.contains(&want),
            "{query}: {error:?} does not say {want:?}"
        );
        // Shown, not only kept: the alert is in the DOM without `hidden`.
        let shown = browser::element_text(&dom, "<div id=\"lab-error\" role=\"alert\">");
        assert_eq!(shown.as_deref(), Some(error.as_str()), "{query}");
    }
    // More buckets than a limiter holds: the exact math, no sample, a note.
    let dom = dump_dom(
        &chromium,
        &profile,
        &url(&page, "buckets=100000&per-tenant=2&tenants=50"),
    );
    let state = lab_state(&dom);
    assert_eq!(state["shards"], "4999950000");
    assert!(
        state["sample_note"]
            .as_str()
            .unwrap()
            .contains("more than a limiter supports")
    );
    assert!(dom.contains("id=\"sample-note\""));
}

/// `page` without --out prints the page; --out writes the same bytes.
#[test]
fn page_is_one_self_contained_file() {
    let printed = lab::text(&["page"]);
    let dir = TempDir::new("out");
    let path = write_page(&dir.0);
    assert_eq!(std::fs::read_to_string(path).unwrap(), printed);
    assert!(printed.starts_with("<!doctype html>"));
    assert!(printed.contains("id=\"lab-state\""));
    // No network: nothing is loaded from anywhere.
    for needle in ["src=", "<link", "@import", "fetch(", "XMLHttpRequest"] {
        assert!(!printed.contains(needle), "{needle}");
    }
}

/// A file that cannot be written exits 1; --out and --serve together exit 2.
#[test]
fn page_refuses_what_it_cannot_do() {
    let out = lab::run(&["page", "--out", "/nonexistent-dir/lab.html"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.starts_with("shuffle-lab: error: cannot write /nonexistent-dir/lab.html"));
    let both = lab::refused(&["page", "--out", "x.html", "--serve"]);
    assert!(both.contains("cannot be used with"), "{both}");
}

/// `page --serve 127.0.0.1:0` serves the page on a port the OS chose.
#[test]
fn page_is_served_on_loopback() {
    let printed = lab::text(&["page"]);
    let mut child = Command::new(env!("CARGO_BIN_EXE_shuffle-lab"))
        .args(["page", "--serve", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let addr = first
        .split("http://")
        .nth(1)
        .and_then(|s| s.split('/').next())
        .unwrap_or_else(|| panic!("no address in {first:?}"))
        .to_owned();
    let get = |target: &str| {
        let mut s = TcpStream::connect(&addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        write!(s, "GET {target} HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
        let mut reply = String::new();
        s.read_to_string(&mut reply).unwrap();
        reply
    };
    let ok = get("/lab.html?buckets=8");
    let missing = get("/other");
    let _ = child.kill();
    let _ = child.wait();
    let (head, body) = ok.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    assert!(
        head.contains(&format!("Content-Length: {}", printed.len())),
        "{head}"
    );
    assert_eq!(body, printed);
    assert!(missing.starts_with("HTTP/1.1 404"), "{missing}");

    let refused = lab::refused(&["page", "--serve", "0.0.0.0:0"]);
    assert!(refused.contains("not a loopback address"), "{refused}");
}
