//! `shuffle-lab`: size a shuffle-sharded limiter before you deploy it, check the
//! real assignment against the math, and plot the trade-off of choosing `k`.
//!
//! ```text
//! shuffle-lab size     --buckets 16 --per-tenant 2 [--tenants 400] [--failed 2]
//!                      [--borrow-from 2 [--lender-reserve 0.5]] [--noisy 2] [--per-user 1]
//!                      [--resize-to 17] [--json]
//! shuffle-lab sweep    --per-tenant 2 --buckets 4..4096 [--json]
//! shuffle-lab simulate --buckets 16 --per-tenant 2 --tenants 20000 --seed 1 [--salt X]
//!                      [--borrow-from 2 [--lender-reserve 0.5] | --noisy 2 | --per-user 1]
//!                      [--resize-to 17] [--concurrency 40 [--hung-calls 40]]
//!                      [--redis-url URL] [--json]
//! shuffle-lab plot     --buckets 16 [--per-tenant-max 8] --svg tradeoff.svg [--json]
//! shuffle-lab page     [--out lab.html | --serve [127.0.0.1:8000]]
//! ```
//!
//! In this repository, run it with `cargo run --release -p shuffle-lab -- size ...`,
//! or install it with `cargo install --path shuffle-lab` (add
//! `--features redis` for `simulate --redis-url`).
//!
//! `--nodes` is still accepted for `--buckets`. Each subcommand computes a
//! report struct first; the table is its `Display` and `--json` its
//! `Serialize`, so both always show the same numbers.
//!
//! Bad arguments print one line on stderr and exit with status 2; a file that
//! cannot be written exits with status 1.

mod borrow;
mod borrow_live;
mod common;
mod hung;
mod nested;
mod nested_live;
mod page;
mod plot;
mod redis_live;
mod resize;
mod simulate;
mod size;
mod sweep;

use std::fmt::Display;
use std::io::{self, Write as _};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::{Args, Parser, Subcommand};
use serde::Serialize;

use common::Failure;

/// Size a shuffle-sharded rate limiter: N buckets, k of them per tenant.
#[derive(Debug, Parser)]
#[command(name = "shuffle-lab", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The exact blast-radius report for one N and k.
    Size(SizeArgs),
    /// One row per N for a fixed k: the table to scan when picking N.
    Sweep(SweepArgs),
    /// Check the limiter's real assignment against the math, then run a live flood.
    Simulate(SimulateArgs),
    /// Draw the trade-off of k for one N as an SVG.
    Plot(PlotArgs),
    /// Write the lab as one HTML page that works from disk, or serve it.
    Page(PageArgs),
}

#[derive(Debug, Args)]
struct SizeArgs {
    /// N: buckets in all.
    #[arg(long, alias = "nodes")]
    buckets: u32,
    /// k: buckets per tenant.
    #[arg(long)]
    per_tenant: u32,
    /// T: tenants in all; adds the expected fallout of one flooding tenant.
    #[arg(long)]
    tenants: Option<u64>,
    /// M: failed buckets; adds the chance a tenant loses all / any of its buckets.
    #[arg(long)]
    failed: Option<u32>,
    #[command(flatten)]
    borrow: BorrowArgs,
    #[command(flatten)]
    nested: NestedArgs,
    /// N2: adds the share of tenants whose shard changes when N becomes N2,
    /// buckets added or removed at the end.
    #[arg(long, value_name = "N2")]
    resize_to: Option<u32>,
    /// One JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct SweepArgs {
    /// k: buckets per tenant.
    #[arg(long)]
    per_tenant: u32,
    /// N range `A..B`, both ends included (`A..=B` too); values below k are skipped.
    /// A wide range is sampled in about 25 geometric steps.
    #[arg(long, alias = "nodes", value_name = "A..B", value_parser = parse_range)]
    buckets: BucketRange,
    /// One JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct SimulateArgs {
    /// N: buckets in all.
    #[arg(long, alias = "nodes")]
    buckets: u32,
    /// k: buckets per tenant.
    #[arg(long)]
    per_tenant: u32,
    /// T: tenants `tenant-0` … `tenant-(T−1)`; `tenant-0` is the flooder.
    #[arg(long)]
    tenants: u64,
    /// Mixed into the salt: salt = the `--salt` bytes, then the seed as 8 little-endian bytes.
    #[arg(long)]
    seed: u64,
    /// The salt prefix (default: empty).
    #[arg(long, default_value = "")]
    salt: String,
    #[command(flatten)]
    borrow: BorrowArgs,
    /// Also run the live flood against a RedisLimiter at this Redis URL, in
    /// real time for 2 s with up to 200 tenants (needs the `redis` feature).
    #[arg(long, value_name = "URL")]
    redis_url: Option<String>,
    #[command(flatten)]
    nested: NestedArgs,
    /// N2: also counts, over the T tenants, whose shard changes when N
    /// becomes N2 (buckets added or removed at the end), beside the exact share.
    #[arg(long, value_name = "N2")]
    resize_to: Option<u32>,
    #[command(flatten)]
    hung: HungArgs,
    /// One JSON object instead of tables.
    #[arg(long)]
    json: bool,
}

/// Borrowing, as the limiter's `borrow_from` and `lender_reserve` set it.
#[derive(Debug, Args)]
struct BorrowArgs {
    /// d: spill buckets per tenant, which it may borrow from when its own are
    /// empty (0 = borrowing off); k + d must not exceed N.
    #[arg(long, value_name = "D")]
    borrow_from: Option<u32>,
    /// r: the share of each bucket's burst borrowers leave to its owners,
    /// 0 ≤ r < 1 (default 0.5); needs --borrow-from.
    #[arg(long, value_name = "R", allow_negative_numbers = true)]
    lender_reserve: Option<f64>,
}

/// The hung-tenant scene, on an in-flight limit split into the buckets as pools.
#[derive(Debug, Args)]
struct HungArgs {
    /// C: also runs the hung-tenant scene on an in-flight limit of C permits
    /// split into --buckets pools, --per-tenant each: tenant-0's calls hang
    /// 10 s, the others keep 4 calls of 10 ms going, for 20 s on a virtual
    /// clock (at most 200 tenants), beside blast's prediction; with
    /// --borrow-from, tenants borrow from their spill pools too.
    #[arg(long, value_name = "C")]
    concurrency: Option<u32>,
    /// H: the calls tenant-0 keeps going (default C); needs --concurrency.
    #[arg(long, value_name = "H")]
    hung_calls: Option<u32>,
}

/// Several noisy tenants at once, and users nested in tenants.
#[derive(Debug, Args)]
struct NestedArgs {
    /// h: tenants flooding at once; adds the chance that their shards
    /// together cover another tenant's whole shard.
    #[arg(long, value_name = "H")]
    noisy: Option<u32>,
    /// j: buckets per user, 1 ≤ j ≤ k, as the limiter's `per_user`; adds what
    /// one flooding user does to its tenant's other users and to other tenants.
    #[arg(long, value_name = "J")]
    per_user: Option<u32>,
}

#[derive(Debug, Args)]
struct PlotArgs {
    /// N: buckets in all.
    #[arg(long, alias = "nodes")]
    buckets: u32,
    /// Plot k = 1 ..= this (default: min(N, 16)).
    #[arg(long)]
    per_tenant_max: Option<u32>,
    /// Where to write the SVG.
    #[arg(long)]
    svg: PathBuf,
    /// Print the plotted points as one JSON object instead of a summary line.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct PageArgs {
    /// Where to write the page (default: stdout).
    #[arg(long, value_name = "FILE", conflicts_with = "serve")]
    out: Option<PathBuf>,
    /// Serve the page over HTTP on this loopback address instead
    /// (default 127.0.0.1:8000; port 0 takes any free port).
    #[arg(long, value_name = "ADDR", num_args = 0..=1, default_missing_value = "127.0.0.1:8000")]
    serve: Option<SocketAddr>,
}

/// An inclusive range of N.
#[derive(Debug, Clone, Copy)]
struct BucketRange {
    lo: u32,
    hi: u32,
}

fn parse_range(s: &str) -> Result<BucketRange, String> {
    let (a, b) = s
        .split_once("..=")
        .or_else(|| s.split_once(".."))
        .ok_or_else(|| format!("expected a range like 4..64, got '{s}'"))?;
    let num = |x: &str| {
        x.trim()
            .parse::<u32>()
            .map_err(|e| format!("'{x}' in '{s}' is not a bucket count: {e}"))
    };
    let (lo, hi) = (num(a)?, num(b)?);
    if lo == 0 || lo > hi {
        return Err(format!(
            "the range '{s}' must run from 1 or more up to at least its start"
        ));
    }
    Ok(BucketRange { lo, hi })
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            // Help and version are not errors; a bare `shuffle-lab` shows help.
            if !err.use_stderr()
                || err.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
            {
                err.exit();
            }
            return fail(&Failure {
                message: one_line(&err.to_string()),
                status: 2,
            });
        }
    };
    let out = match &cli.command {
        Command::Size(a) => size::run(a).and_then(|r| render(&r, a.json)),
        Command::Sweep(a) => sweep::run(a).and_then(|r| render(&r, a.json)),
        Command::Simulate(a) => simulate::run(a).and_then(|r| render(&r, a.json)),
        Command::Plot(a) => plot::run(a).and_then(|r| render(&r, a.json)),
        Command::Page(a) => page::run(a),
    };
    match out {
        Ok(out) => match io::stdout().lock().write_all(out.as_bytes()) {
            Ok(()) => ExitCode::SUCCESS,
            // A reader that went away (`| head`) is not worth a message.
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
            Err(e) => fail(&Failure {
                message: format!("cannot write to stdout: {e}"),
                status: 1,
            }),
        },
        Err(f) => fail(&f),
    }
}

/// One report, as one line of JSON or as its table without trailing spaces.
fn render<R: Display + Serialize>(report: &R, json: bool) -> Result<String, Failure> {
    if json {
        let mut s = serde_json::to_string(report).map_err(|e| Failure {
            message: format!("error: cannot write the report as JSON: {e}"),
            status: 1,
        })?;
        s.push('\n');
        Ok(s)
    } else {
        Ok(report
            .to_string()
            .lines()
            .map(|l| format!("{}\n", l.trim_end()))
            .collect())
    }
}

fn fail(f: &Failure) -> ExitCode {
    let _ = writeln!(io::stderr(), "shuffle-lab: {}", f.message);
    ExitCode::from(f.status)
}

/// Clap's multi-line message on one line, without its usage block.
fn one_line(message: &str) -> String {
    let mut parts = Vec::new();
    for line in message.lines().map(str::trim) {
        if line.starts_with("Usage:") || line.starts_with("For more information") {
            break;
        }
        if !line.is_empty() {
            parts.push(line);
        }
    }
    let text = parts.join(" ");
    let text = text.strip_prefix("error: ").unwrap_or(&text);
    format!("error: {text} (see --help)")
}
