//! `shuffle-lab`: size a shuffle-sharded limiter before you deploy it, check the
//! real assignment against the math, and plot the trade-off of choosing `k`.
//!
//! ```text
//! shuffle-lab size     --nodes 16 --per-tenant 2 [--tenants 400] [--failed 2] [--json]
//! shuffle-lab sweep    --per-tenant 2 --nodes 4..4096 [--json]
//! shuffle-lab simulate --nodes 16 --per-tenant 2 --tenants 20000 --seed 1 [--salt X] [--json]
//! shuffle-lab plot     --nodes 16 [--per-tenant-max 8] --svg tradeoff.svg
//! ```
//!
//! Bad arguments print one line on stderr and exit with status 2; a file that
//! cannot be written exits with status 1.

use std::fmt::Write as _;
use std::io::{self, Write as _};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::error::ErrorKind;
use clap::{Args, Parser, Subcommand};
use num_traits::ToPrimitive;
use plotters::prelude::*;
use serde_json::{Map, Value, json};
use shuffle_limiter::blast::{BlastRadius, Impact};
use shuffle_limiter::{ManualClock, Quota, ShardedLimiter};

/// The largest `k` the exact report is computed for: it has `k + 1` exact
/// fractions.
const MAX_K: u32 = 4096;
/// The largest `C(N, k)`, in bits, the exact report is computed for.
const MAX_SHARD_BITS: f64 = 16384.0;
/// `simulate` computes `tenants × nodes` rendezvous scores; this bounds its time.
const MAX_SIMULATION_WORK: u64 = 1 << 31;
/// The live scenario uses at most this many tenants, to stay fast.
const LIVE_TENANTS: u64 = 5000;
/// The live scenario: this many steps of [`STEP`] each.
const LIVE_STEPS: u32 = 200;
const STEP: Duration = Duration::from_millis(10);
/// Each well-behaved tenant sends one request every this many steps.
const LIVE_EVERY: u32 = 10;
/// A tenant granted at most this share is counted fully down ...
const DOWN_AT_MOST: f64 = 0.05;
/// ... and one granted at least this share unaffected.
const UNAFFECTED_AT_LEAST: f64 = 0.95;
/// Rows further than this many standard deviations from the expectation are flagged.
const FLAG_SIGMAS: f64 = 4.0;

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
}

#[derive(Debug, Args)]
struct SizeArgs {
    /// N: buckets in all.
    #[arg(long)]
    nodes: u32,
    /// k: buckets per tenant.
    #[arg(long)]
    per_tenant: u32,
    /// T: tenants in all; adds the expected fallout of one flooding tenant.
    #[arg(long)]
    tenants: Option<u64>,
    /// M: failed buckets; adds the chance a tenant loses all / any of its buckets.
    #[arg(long)]
    failed: Option<u32>,
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
    #[arg(long, value_parser = parse_range)]
    nodes: NodeRange,
    /// One JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct SimulateArgs {
    /// N: buckets in all.
    #[arg(long)]
    nodes: u32,
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
    /// One JSON object instead of tables.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct PlotArgs {
    /// N: buckets in all.
    #[arg(long)]
    nodes: u32,
    /// Plot k = 1 ..= this (default: min(N, 16)).
    #[arg(long)]
    per_tenant_max: Option<u32>,
    /// Where to write the SVG.
    #[arg(long)]
    svg: PathBuf,
}

/// An inclusive range of N.
#[derive(Debug, Clone, Copy)]
struct NodeRange {
    lo: u32,
    hi: u32,
}

fn parse_range(s: &str) -> Result<NodeRange, String> {
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
    Ok(NodeRange { lo, hi })
}

/// Why a command failed: a message for one line of stderr and an exit status.
#[derive(Debug)]
struct Failure {
    message: String,
    status: u8,
}

/// Bad arguments: exit status 2.
fn usage(message: impl Into<String>) -> Failure {
    Failure {
        message: message.into(),
        status: 2,
    }
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
    let result = match &cli.command {
        Command::Size(a) => size(a),
        Command::Sweep(a) => sweep(a),
        Command::Simulate(a) => simulate(a),
        Command::Plot(a) => plot(a),
    };
    match result {
        Ok(out) => match io::stdout().lock().write_all(tidy(&out).as_bytes()) {
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

fn fail(f: &Failure) -> ExitCode {
    let _ = writeln!(io::stderr(), "shuffle-lab: {}", f.message);
    ExitCode::from(f.status)
}

/// The output without trailing spaces.
fn tidy(out: &str) -> String {
    out.lines().map(|l| format!("{}\n", l.trim_end())).collect()
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

/// Validates `N` and `k` and computes the report, refusing sizes whose exact
/// report would be huge.
fn radius(nodes: u32, per_tenant: u32) -> Result<BlastRadius, Failure> {
    if per_tenant > MAX_K {
        return Err(usage(format!(
            "error: --per-tenant {per_tenant} is more than this tool handles ({MAX_K}); lower it"
        )));
    }
    if per_tenant <= nodes {
        let r = per_tenant.min(nodes - per_tenant);
        let bits: f64 = (0..r)
            .map(|i| (f64::from(nodes - i) / f64::from(i + 1)).log2())
            .sum();
        if bits > MAX_SHARD_BITS {
            return Err(usage(format!(
                "error: C({nodes}, {per_tenant}) has about {bits:.0} bits, more than this tool \
                 handles ({MAX_SHARD_BITS}); lower --nodes or --per-tenant"
            )));
        }
    }
    BlastRadius::new(nodes, per_tenant).map_err(|e| usage(format!("error: {e}")))
}

/// log10 of a positive big integer, to f64 precision.
fn log10(x: &num_bigint::BigUint) -> f64 {
    let drop = x.bits().saturating_sub(64);
    let top = (x >> drop).to_f64().unwrap_or(f64::INFINITY);
    top.log10() + drop as f64 * std::f64::consts::LOG10_2
}

/// A probability or share, readably.
fn p(x: f64) -> String {
    if x == 0.0 || x == 1.0 {
        format!("{x}")
    } else if x > 0.999 {
        // Close to 1: the distance to 1 is what matters.
        format!("1 - {:.4e}", 1.0 - x)
    } else if x >= 1e-3 {
        let s = format!("{x:.6}");
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        format!("{x:.4e}")
    }
}

/// A big decimal number, abbreviated when long.
fn big(s: &str) -> String {
    if s.len() <= 24 {
        s.to_owned()
    } else {
        format!(
            "{}.{}e{} ({} digits)",
            &s[..1],
            &s[1..4],
            s.len() - 1,
            s.len()
        )
    }
}

fn impact_json(i: &Impact) -> Value {
    json!({
        "fully_down": i.fully_down,
        "degraded": i.degraded,
        "unaffected": i.unaffected,
    })
}

// ------------------------------------------------------------------- size

fn size(a: &SizeArgs) -> Result<String, Failure> {
    let b = radius(a.nodes, a.per_tenant)?;
    let failed = match a.failed {
        Some(m) => Some(b.failed(m).map_err(|e| usage(format!("error: {e}")))?),
        None => None,
    };
    let pmf = b.overlap_pmf();
    let pmf_exact = b.overlap_pmf_exact();
    let impact = a.tenants.map(|t| b.tenants(t));

    if a.json {
        let mut o = Map::new();
        o.insert("nodes".into(), json!(b.buckets()));
        o.insert("per_tenant".into(), json!(b.per_tenant()));
        o.insert("shards".into(), json!(b.shards().to_string()));
        o.insert("p_identical".into(), json!(b.p_identical()));
        o.insert("p_disjoint".into(), json!(b.p_disjoint()));
        o.insert("p_any_overlap".into(), json!(b.p_any_overlap()));
        o.insert("overlap_pmf".into(), json!(pmf));
        let exact: Vec<String> = pmf_exact.iter().map(ToString::to_string).collect();
        o.insert("overlap_pmf_exact".into(), json!(exact));
        o.insert("node_blast_radius".into(), json!(b.bucket_blast_radius()));
        if let Some(t) = &impact {
            o.insert("tenants".into(), json!(t.tenants));
            o.insert(
                "expected_fully_down".into(),
                json!(t.shuffle_sharded.fully_down),
            );
            o.insert(
                "expected_degraded".into(),
                json!(t.shuffle_sharded.degraded),
            );
            o.insert(
                "expected_unaffected".into(),
                json!(t.shuffle_sharded.unaffected),
            );
            let fixed = t.fixed_shards.as_ref().map_or(Value::Null, impact_json);
            o.insert("fixed_shards".into(), fixed);
            o.insert("shared_pool".into(), impact_json(&t.shared_pool));
        }
        if let Some(f) = &failed {
            o.insert("failed".into(), json!(f.failed));
            o.insert("p_all_failed".into(), json!(f.p_all_failed));
            o.insert("p_touched".into(), json!(f.p_touched));
        }
        return Ok(format!("{}\n", Value::Object(o)));
    }

    let (n, k) = (b.buckets(), b.per_tenant());
    let mut s = String::new();
    let exact = |f: shuffle_limiter::blast::Fraction| {
        let f = f.to_string();
        if f.len() <= 40 {
            format!("({f})")
        } else {
            String::new()
        }
    };
    let _ = writeln!(s, "N = {n} buckets, k = {k} per tenant");
    let _ = writeln!(
        s,
        "  distinct shards C(N,k)        {}",
        big(&b.shards().to_string())
    );
    let _ = writeln!(
        s,
        "  P(identical shard) 1/C(N,k)   {:<12} {}",
        p(b.p_identical()),
        exact(b.p_identical_exact())
    );
    let _ = writeln!(
        s,
        "  P(no shared bucket)           {:<12} {}",
        p(b.p_disjoint()),
        exact(b.p_disjoint_exact())
    );
    let _ = writeln!(
        s,
        "  P(some shared bucket)         {:<12} {}",
        p(b.p_any_overlap()),
        exact(b.p_any_overlap_exact())
    );
    let _ = writeln!(
        s,
        "  node blast radius k/N         {:<12} {}",
        p(b.bucket_blast_radius()),
        exact(b.bucket_blast_radius_exact())
    );
    let _ = writeln!(s);
    let _ = writeln!(s, "buckets two tenants share");
    let _ = writeln!(s, "  shared  probability   exact");
    for (j, (x, f)) in pmf.iter().zip(&pmf_exact).enumerate() {
        let f = f.to_string();
        let f = if f.len() <= 60 {
            f
        } else {
            "(see --json)".to_owned()
        };
        let _ = writeln!(s, "  {j:<6}  {:<12}  {f}", p(*x));
    }
    if let Some(t) = &impact {
        let others = t.tenants.saturating_sub(1);
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "one of {} tenants floods its whole shard; expected among the other {others}:",
            t.tenants
        );
        let _ = writeln!(
            s,
            "  design                          fully down    degraded  unaffected"
        );
        let row = |s: &mut String, name: &str, i: &Impact| {
            let _ = writeln!(
                s,
                "  {name:<30} {:>11.2} {:>11.2} {:>11.2}",
                i.fully_down, i.degraded, i.unaffected
            );
        };
        row(
            &mut s,
            &format!("shuffle sharding (k = {k})"),
            &t.shuffle_sharded,
        );
        match &t.fixed_shards {
            Some(i) => row(
                &mut s,
                &format!("fixed shards ({} groups of {k})", n / k),
                i,
            ),
            None => {
                let _ = writeln!(s, "  fixed shards                   (k does not divide N)");
            }
        }
        row(&mut s, "one shared pool", &t.shared_pool);
    }
    if let Some(f) = &failed {
        let _ = writeln!(s);
        let _ = writeln!(s, "with {} of {n} buckets failed:", f.failed);
        let _ = writeln!(
            s,
            "  P(all k buckets of a tenant failed)  {:<12} {}",
            p(f.p_all_failed),
            exact(f.p_all_failed_exact.clone())
        );
        let _ = writeln!(
            s,
            "  P(a tenant lost at least one)        {:<12} {}",
            p(f.p_touched),
            exact(f.p_touched_exact.clone())
        );
    }
    Ok(s)
}

// ------------------------------------------------------------------- sweep

fn sweep(a: &SweepArgs) -> Result<String, Failure> {
    let k = a.per_tenant;
    if k == 0 {
        return Err(usage(
            "error: --per-tenant is 0: every tenant needs at least 1 bucket",
        ));
    }
    let NodeRange { lo, hi } = a.nodes;
    if hi < k {
        return Err(usage(format!(
            "error: every N in {lo}..{hi} is below --per-tenant {k}; raise the range"
        )));
    }
    let lo = lo.max(k);
    let mut ns: Vec<u32> = if hi - lo < 32 {
        (lo..=hi).collect()
    } else {
        let ratio = f64::from(hi) / f64::from(lo);
        (0..=24)
            .map(|i| (f64::from(lo) * ratio.powf(f64::from(i) / 24.0)).round() as u32)
            .collect()
    };
    ns.dedup();
    let mut rows = Vec::new();
    for n in ns {
        let b = radius(n, k)?;
        rows.push((
            n,
            b.shards().to_string(),
            b.p_identical(),
            b.bucket_blast_radius(),
        ));
    }
    if a.json {
        let rows: Vec<Value> = rows
            .iter()
            .map(|(n, c, pi, nb)| {
                json!({"nodes": n, "shards": c, "p_identical": pi, "node_blast_radius": nb})
            })
            .collect();
        return Ok(format!("{}\n", json!({"per_tenant": k, "rows": rows})));
    }
    let mut s = String::new();
    let _ = writeln!(s, "k = {k} buckets per tenant");
    let _ = writeln!(
        s,
        "{:>8}  {:>26}  {:>12}  {:>17}",
        "N", "shards C(N,k)", "P(identical)", "node blast k/N"
    );
    for (n, c, pi, nb) in rows {
        let _ = writeln!(s, "{n:>8}  {:>26}  {:>12}  {:>17}", big(&c), p(pi), p(nb));
    }
    Ok(s)
}

// ------------------------------------------------------------------- simulate

/// Counts of tenants in the three states.
#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    fully_down: u64,
    degraded: u64,
    unaffected: u64,
}

impl Counts {
    fn json(&self) -> Value {
        json!({
            "fully_down": self.fully_down,
            "degraded": self.degraded,
            "unaffected": self.unaffected,
        })
    }
}

fn simulate(a: &SimulateArgs) -> Result<String, Failure> {
    let (n, k, t) = (a.nodes, a.per_tenant, a.tenants);
    let b = radius(n, k)?;
    if t < 2 {
        return Err(usage(
            "error: --tenants must be at least 2: the flooder and one other",
        ));
    }
    if t.saturating_mul(u64::from(n)) > MAX_SIMULATION_WORK {
        return Err(usage(format!(
            "error: --tenants {t} with --nodes {n} would take too long; keep tenants × nodes \
             under {MAX_SIMULATION_WORK}"
        )));
    }
    let mut salt = a.salt.as_bytes().to_vec();
    salt.extend_from_slice(&a.seed.to_le_bytes());

    // The live scenario's budget: four times what the well-behaved tenants ask
    // for, and at least 40/s per bucket, so only the flood can exhaust a bucket.
    let live_tenants = t.min(LIVE_TENANTS);
    let per_tenant_rate = 1_000 / (STEP.as_millis() as u64 * u64::from(LIVE_EVERY)); // requests/s
    let rate = 4 * per_tenant_rate * (live_tenants - 1).max(u64::from(n));
    let rate = u32::try_from(rate).map_err(|_| usage("error: the simulated rate is too large"))?;
    let burst = (rate / 20).max(n);
    let clock = ManualClock::new();
    let limiter = ShardedLimiter::builder()
        .quota(Quota::per_second(rate).with_burst(burst))
        .buckets(n)
        .per_tenant(k)
        .salt(&salt)
        .clock(clock.clone())
        .build()
        .map_err(|e| usage(format!("error: the limiter refused N = {n}, k = {k}: {e}")))?;

    // 1. The real assignment against the math.
    let bad = limiter.shard("tenant-0");
    let mut observed = vec![0u64; k as usize + 1];
    let mut overlap_of = Vec::with_capacity(live_tenants as usize);
    for i in 1..t {
        let j = limiter.shard(format!("tenant-{i}")).overlap(&bad);
        observed[j] += 1;
        if i < live_tenants {
            overlap_of.push(j);
        }
    }
    let others = (t - 1) as f64;
    let pmf = b.overlap_pmf();
    let expected: Vec<f64> = pmf.iter().map(|q| others * q).collect();
    let sigma: Vec<f64> = pmf
        .iter()
        .map(|q| (others * q * (1.0 - q)).sqrt())
        .collect();
    let z: Vec<f64> = observed
        .iter()
        .zip(&expected)
        .zip(&sigma)
        .map(|((&o, &e), &sd)| {
            let d = o as f64 - e;
            if sd > 0.0 {
                d / sd
            } else if d.abs() < 0.5 {
                0.0
            } else {
                f64::INFINITY
            }
        })
        .collect();
    let flagged: Vec<bool> = z.iter().map(|z| z.abs() > FLAG_SIGMAS).collect();

    // 2. A live flood on a manual clock.
    let flooder = limiter.tenant("tenant-0");
    let tenants: Vec<_> = (1..live_tenants)
        .map(|i| limiter.tenant(format!("tenant-{i}")))
        .collect();
    let mut granted = vec![0u32; tenants.len()];
    let mut attempts = vec![0u32; tenants.len()];
    let mut flood_granted = 0u64;
    for step in 0..LIVE_STEPS {
        // The flooder retries until all its buckets are empty.
        for _ in 0..1_000_000 {
            if flooder.check().is_err() {
                break;
            }
            flood_granted += 1;
        }
        for (i, tenant) in tenants.iter().enumerate() {
            if (step as usize + i).is_multiple_of(LIVE_EVERY as usize) {
                attempts[i] += 1;
                granted[i] += u32::from(tenant.check().is_ok());
            }
        }
        clock.advance(STEP);
    }
    let mut by_overlap = Counts::default();
    let mut measured = Counts::default();
    let mut share_sum = vec![0.0f64; k as usize + 1];
    let mut share_n = vec![0u64; k as usize + 1];
    for (i, &j) in overlap_of.iter().enumerate() {
        match j {
            0 => by_overlap.unaffected += 1,
            j if j == k as usize => by_overlap.fully_down += 1,
            _ => by_overlap.degraded += 1,
        }
        let share = f64::from(granted[i]) / f64::from(attempts[i].max(1));
        if share <= DOWN_AT_MOST {
            measured.fully_down += 1;
        } else if share >= UNAFFECTED_AT_LEAST {
            measured.unaffected += 1;
        } else {
            measured.degraded += 1;
        }
        share_sum[j] += share;
        share_n[j] += 1;
    }
    let mean_share: Vec<Option<f64>> = share_sum
        .iter()
        .zip(&share_n)
        .map(|(&s, &c)| (c > 0).then(|| s / c as f64))
        .collect();
    let predicted = b.tenants(live_tenants).shuffle_sharded;
    let live_seconds = STEP.as_secs_f64() * f64::from(LIVE_STEPS);

    if a.json {
        let out = json!({
            "nodes": n,
            "per_tenant": k,
            "tenants": t,
            "seed": a.seed,
            "salt": a.salt,
            "bad_tenant_shard": bad.buckets(),
            "observed": observed,
            "expected": expected,
            "sigma": sigma,
            "z": z.iter().map(|z| if z.is_finite() { json!(z) } else { Value::Null }).collect::<Vec<_>>(),
            "flagged": flagged,
            "within_4_sigma": !flagged.contains(&true),
            "live": {
                "tenants": live_tenants,
                "steps": LIVE_STEPS,
                "step_ms": STEP.as_millis() as u64,
                "requests_per_tenant": LIVE_STEPS / LIVE_EVERY,
                "rate_per_second": rate,
                "burst": burst,
                "flood_granted": flood_granted,
                "predicted": impact_json(&predicted),
                "by_overlap": by_overlap.json(),
                "measured": measured.json(),
                "mean_share_by_overlap": mean_share,
            },
        });
        return Ok(format!("{out}\n"));
    }

    let mut s = String::new();
    let _ = writeln!(
        s,
        "N = {n}, k = {k}: {t} tenants tenant-0 … tenant-{}; salt = {:?} + seed {} (8 bytes LE)",
        t - 1,
        a.salt,
        a.seed
    );
    let _ = writeln!(s, "bad tenant tenant-0 has buckets {:?}", bad.buckets());
    let _ = writeln!(s);
    let _ = writeln!(s, "buckets shared with tenant-0, over the other {}:", t - 1);
    let _ = writeln!(s, "  shared    observed      expected         σ        z");
    for j in 0..=k as usize {
        let _ = writeln!(
            s,
            "  {j:<6} {:>11} {:>13.2} {:>9.2} {:>8.2}{}",
            observed[j],
            expected[j],
            sigma[j],
            z[j],
            if flagged[j] {
                "   <-- more than 4σ off"
            } else {
                ""
            }
        );
    }
    if flagged.contains(&true) {
        let _ = writeln!(s, "  SOME ROWS ARE MORE THAN 4σ FROM THE EXPECTATION");
    } else {
        let _ = writeln!(s, "  every row within 4σ of the expectation");
    }
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "live: {live_tenants} tenants for {live_seconds} s on a manual clock ({LIVE_STEPS} steps of {} ms), \
         budget {rate}/s with burst {burst}",
        STEP.as_millis()
    );
    let _ = writeln!(
        s,
        "  tenant-0 retries until denied every step (granted {flood_granted}); the others send 1 request \
         every {} ms",
        STEP.as_millis() as u32 * LIVE_EVERY
    );
    let _ = writeln!(
        s,
        "                                  fully down    degraded  unaffected"
    );
    let _ = writeln!(
        s,
        "  predicted (math)              {:>11.2} {:>11.2} {:>11.2}",
        predicted.fully_down, predicted.degraded, predicted.unaffected
    );
    let _ = writeln!(
        s,
        "  by overlap (this assignment)  {:>11} {:>11} {:>11}",
        by_overlap.fully_down, by_overlap.degraded, by_overlap.unaffected
    );
    let _ = writeln!(
        s,
        "  measured (granted share)      {:>11} {:>11} {:>11}",
        measured.fully_down, measured.degraded, measured.unaffected
    );
    let _ = writeln!(
        s,
        "  (measured: fully down if granted <= {:.0}% of requests, unaffected if >= {:.0}%)",
        DOWN_AT_MOST * 100.0,
        UNAFFECTED_AT_LEAST * 100.0
    );
    let _ = writeln!(
        s,
        "  (degraded = lost 1..k-1 of its buckets; the limiter draws from whichever bucket has \
         room, so a light load still fits in the rest)"
    );
    let _ = write!(s, "  mean granted share by buckets shared:");
    for (j, m) in mean_share.iter().enumerate() {
        match m {
            Some(m) => {
                let _ = write!(s, "  {j}: {:.1}%", m * 100.0);
            }
            None => {
                let _ = write!(s, "  {j}: -");
            }
        }
    }
    let _ = writeln!(s);
    Ok(s)
}

// ------------------------------------------------------------------- plot

fn plot(a: &PlotArgs) -> Result<String, Failure> {
    let n = a.nodes;
    let kmax = a.per_tenant_max.unwrap_or(n.min(16));
    if kmax == 0 || kmax > n {
        return Err(usage(format!(
            "error: --per-tenant-max {kmax} must be between 1 and --nodes ({n})"
        )));
    }
    if kmax > 512 {
        return Err(usage(format!(
            "error: --per-tenant-max {kmax} is more than a plot can show; use at most 512"
        )));
    }
    // log10 of 1/C(N,k), from the exact count: the probability itself can be
    // below f64's range, its logarithm never is.
    let mut identical = Vec::new();
    let mut blast = Vec::new();
    for k in 1..=kmax {
        let b = radius(n, k)?;
        identical.push((f64::from(k), -log10(b.shards())));
        blast.push((f64::from(k), b.bucket_blast_radius()));
    }
    let lowest = identical.iter().map(|&(_, y)| y).fold(0.0f64, f64::min);
    let y_lo = if lowest > -1.0 { -1.0 } else { lowest.floor() };
    let blast_hi = (f64::from(kmax) / f64::from(n) * 1.1).min(1.05);
    let x_range = 0.5..f64::from(kmax) + 0.5;
    let dot = if kmax <= 40 { 4 } else { 0 };

    let draw = || -> Result<(), String> {
        let e = |e: DrawingAreaErrorKind<_>| e.to_string();
        let root = SVGBackend::new(&a.svg, (900, 760)).into_drawing_area();
        root.fill(&WHITE).map_err(e)?;
        let root = root
            .titled(
                &format!("Choosing k with N = {n} buckets"),
                ("sans-serif", 26),
            )
            .map_err(e)?;
        let (upper, lower) = root.split_vertically(370);
        let int_label = |x: &f64| {
            if x.fract() == 0.0 {
                format!("{x:.0}")
            } else {
                String::new()
            }
        };

        let mut chart = ChartBuilder::on(&upper)
            .caption(
                "Chance another tenant has the identical shard, 1/C(N,k): lower is better",
                ("sans-serif", 18),
            )
            .margin(12)
            .x_label_area_size(44)
            .y_label_area_size(80)
            .build_cartesian_2d(x_range.clone(), y_lo..0.0)
            .map_err(e)?;
        chart
            .configure_mesh()
            .x_desc("k, buckets per tenant")
            .y_desc("P(identical shard), log scale")
            .x_labels(kmax.min(20) as usize + 2)
            .x_label_formatter(&int_label)
            // One label per decade while that stays readable.
            .y_labels(if y_lo >= -12.0 {
                (1.0 - y_lo) as usize
            } else {
                12
            })
            .y_label_formatter(&|y| match *y {
                y if y.fract() != 0.0 => String::new(),
                0.0 => "1".to_owned(),
                y => format!("1e{y:.0}"),
            })
            .light_line_style(TRANSPARENT)
            .axis_desc_style(("sans-serif", 16))
            .label_style(("sans-serif", 14))
            .draw()
            .map_err(e)?;
        chart
            .draw_series(LineSeries::new(
                identical.iter().copied(),
                BLUE.stroke_width(2),
            ))
            .map_err(e)?;
        chart
            .draw_series(PointSeries::of_element(
                identical.iter().copied(),
                dot,
                BLUE.filled(),
                &|c, s, st| Circle::new(c, s, st),
            ))
            .map_err(e)?;

        let mut chart = ChartBuilder::on(&lower)
            .caption(
                "Share of all tenants one exhausted bucket touches, k/N: lower is better",
                ("sans-serif", 18),
            )
            .margin(12)
            .x_label_area_size(44)
            .y_label_area_size(80)
            .build_cartesian_2d(x_range.clone(), 0.0..blast_hi)
            .map_err(e)?;
        chart
            .configure_mesh()
            .x_desc("k, buckets per tenant")
            .y_desc("node blast radius k/N")
            .x_labels(kmax.min(20) as usize + 2)
            .x_label_formatter(&int_label)
            .y_label_formatter(&|y| format!("{:.0}%", y * 100.0))
            .axis_desc_style(("sans-serif", 16))
            .label_style(("sans-serif", 14))
            .draw()
            .map_err(e)?;
        chart
            .draw_series(LineSeries::new(blast.iter().copied(), RED.stroke_width(2)))
            .map_err(e)?;
        chart
            .draw_series(PointSeries::of_element(
                blast.iter().copied(),
                dot,
                RED.filled(),
                &|c, s, st| Circle::new(c, s, st),
            ))
            .map_err(e)?;
        root.present().map_err(e)?;
        Ok(())
    };
    draw().map_err(|m| Failure {
        message: format!("error: cannot write {}: {m}", a.svg.display()),
        status: 1,
    })?;
    let s = format!("wrote {} (k = 1..={kmax}, N = {n})\n", a.svg.display());
    Ok(s)
}
