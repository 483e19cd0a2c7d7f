//! The Redis bench's table: a row per decision and number of tasks, the
//! servers' counts, and the summary over the rounds.

use redis::aio::MultiplexedConnection;

/// The summary of each cell (its row's label and tasks) over the rounds,
/// each against the cell of `baseline_of(label)` at the same tasks, round by
/// round.
pub(crate) fn summary(
    cells: &[(&str, usize)],
    all: &[Vec<Row>],
    baseline_of: impl Fn(&str) -> &'static str,
) {
    for (&(label, t), rows) in cells.iter().zip(all) {
        // Each against the baseline of its own setting and tasks.
        let baseline_label = baseline_of(label);
        let baseline = (cells.iter())
            .position(|&(b, bt)| b == baseline_label && bt == t)
            .map(|b| &all[b]);
        // The median and the range over the rounds.
        let spread = |values: Vec<f64>, digits: usize| {
            let (low, high) = values
                .iter()
                .fold((f64::MAX, 0.0f64), |(l, h), &v| (l.min(v), h.max(v)));
            format!(
                "{:.digits$} ({low:.digits$}–{high:.digits$})",
                median(values)
            )
        };
        let of = |f: fn(&Row) -> f64| rows.iter().map(f).collect::<Vec<f64>>();
        // No ratio when the rows run (`BENCH_ONLY`) leave the baseline out.
        let ratio = match baseline {
            Some(baseline) => spread(
                (rows.iter().zip(baseline.iter()))
                    .map(|(r, b)| r.per_second / b.per_second)
                    .collect(),
                3,
            ),
            None => "— (no baseline run)".to_owned(),
        };
        println!(
            "  {label:<38} {t:>3} tasks {}/s  ×{ratio}  p50 {} µs  p99 {} µs  server {} µs  {}/call",
            spread(of(|r| r.per_second), 0),
            spread(of(|r| r.p50), 0),
            spread(of(|r| r.p99), 0),
            spread(of(|r| r.server_micros), 2),
            spread(of(|r| 1.0 / r.evalsha_per_decision), 1),
        );
    }
}

/// One line of the table.
pub(crate) struct Row {
    pub(crate) per_second: f64,
    pub(crate) p50: f64,
    pub(crate) p99: f64,
    pub(crate) evalsha_per_decision: f64,
    /// Server time per `EVALSHA` or `FCALL`, by `INFO commandstats`.
    pub(crate) server_micros: f64,
    /// Decisions of the limiter that missed the deadline, in the run and
    /// the latency samples.
    pub(crate) by_policy: u64,
}

impl Row {
    pub(crate) fn print(&self, label: &str, tasks: usize, round: u64) {
        let policy = match self.by_policy {
            0 => String::new(),
            n => format!(", {n} late: by the policy"),
        };
        println!(
            "{label:<40} {tasks:>5} {:>12.0} {:>8.1} {:>8.1} {:>13.3} {:>10.2}   (round {round}{policy})",
            self.per_second, self.p50, self.p99, self.evalsha_per_decision, self.server_micros
        );
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// `EVALSHA` and `FCALL` calls the servers have counted so far, and the
/// microseconds they spent in them.
pub(crate) async fn evalsha_stats(admins: &mut [MultiplexedConnection]) -> (u64, u64) {
    let (mut calls, mut usec) = (0, 0);
    for admin in admins {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(admin)
            .await
            .unwrap();
        // The script by `EVALSHA`, or its function by `FCALL`.
        for command in ["cmdstat_evalsha:", "cmdstat_fcall:"] {
            let Some(line) = info.lines().find_map(|l| l.strip_prefix(command)) else {
                continue;
            };
            let field = |name: &str| {
                line.split(',')
                    .find_map(|f| f.strip_prefix(name))
                    .and_then(|n| n.parse::<u64>().ok())
                    .unwrap_or(0)
            };
            calls += field("calls=");
            usec += field("usec=");
        }
    }
    (calls, usec)
}

/// The numbers of concurrent tasks measured: `BENCH_TASKS`, such as
/// `1,16,64` (the default).
pub(crate) fn task_counts() -> Vec<usize> {
    let list = std::env::var("BENCH_TASKS").unwrap_or_else(|_| "1,16,64".to_owned());
    let mut tasks: Vec<usize> = list
        .split(',')
        .filter_map(|t| t.trim().parse().ok())
        .collect();
    tasks.sort_unstable();
    tasks.dedup();
    tasks.retain(|&t| t > 0);
    if tasks.is_empty() { vec![64] } else { tasks }
}

/// Whether the row `label` is measured: `BENCH_ONLY` lists substrings of
/// the labels, separated by `;` (all rows when unset).
pub(crate) fn only(label: &str) -> bool {
    std::env::var("BENCH_ONLY").map_or(true, |list| {
        list.split(';').any(|p| label.contains(p.trim()))
    })
}
