//! Every `shuffle-lab` transcript the guides show (```text blocks
//! of src/guide/*.md) is what the built command prints today. Each output
//! line of a transcript must be a line of the command's real output
//! ("…"/"..." elide lines). Redis runs and `plot` are skipped.
//!
//! The in-flight scenes run real threads, so what they measure moves a
//! little from run to run: a line also matches one that differs only in
//! its numbers, each within 1 % or three units of its last printed digit
//! (0.815 for 0.816, 11.99 for 12.00), so the guides' numbers are held to
//! what the tool prints without the test failing on noise.

use std::process::Command;

const GUIDES: &[(&str, &str)] = &[
    ("choosing.md", include_str!("../../src/guide/choosing.md")),
    ("borrowing.md", include_str!("../../src/guide/borrowing.md")),
    ("inflight.md", include_str!("../../src/guide/inflight.md")),
    (
        "users_and_tiers.md",
        include_str!("../../src/guide/users_and_tiers.md"),
    ),
    ("live.md", include_str!("../../src/guide/live.md")),
];

/// (command args, expected output lines) for each shuffle-lab command in a text block.
fn transcripts(doc: &str) -> Vec<(Vec<String>, Vec<String>)> {
    let mut out = Vec::new();
    let mut in_text = false;
    let mut current: Option<(Vec<String>, Vec<String>)> = None;
    for line in doc.lines() {
        let t = line.trim_end();
        if t.starts_with("```") {
            if in_text {
                out.extend(current.take());
            }
            in_text = t == "```text";
            continue;
        }
        if !in_text {
            continue;
        }
        let cmd = t
            .strip_prefix("$ shuffle-lab ")
            .or_else(|| t.strip_prefix("cargo run --release -p shuffle-lab -- "));
        if let Some(cmd) = cmd {
            out.extend(current.take());
            let cmd = cmd.split('#').next().unwrap();
            let args: Vec<String> = cmd.split_whitespace().map(String::from).collect();
            if !args.iter().any(|a| a == "--redis-url" || a == "--svg") && args[0] != "plot" {
                current = Some((args, Vec::new()));
            }
            continue;
        }
        if t.starts_with("$ ") || t.starts_with("cargo ") {
            out.extend(current.take());
            continue;
        }
        if let Some((_, lines)) = current.as_mut()
            && !t.is_empty()
            && t != "…"
            && t != "..."
        {
            lines.push(t.to_string());
        }
    }
    out
}

#[test]
fn every_guide_transcript_is_what_shuffle_lab_prints() {
    let mut failures = Vec::new();
    let mut checked = 0;
    for (name, doc) in GUIDES {
        for (args, want) in transcripts(doc) {
            eprintln!(
                "{name}: shuffle-lab {} ({} lines)",
                args.join(" "),
                want.len()
            );
            let out = Command::new(env!("CARGO_BIN_EXE_shuffle-lab"))
                .args(&args)
                .output()
                .unwrap();
            assert!(out.status.success(), "{name}: {args:?} failed");
            let got = String::from_utf8(out.stdout).unwrap();
            let got: Vec<&str> = got.lines().map(str::trim_end).collect();
            for line in &want {
                checked += 1;
                if !got.iter().any(|g| same_but_noise(line, g)) {
                    failures.push(format!(
                        "{name}: shuffle-lab {}\n  doc says: {line}",
                        args.join(" ")
                    ));
                }
            }
        }
    }
    assert!(checked > 100, "only {checked} lines found");
    assert!(
        failures.is_empty(),
        "{} stale transcript lines:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// A word of a line: text, or a number with the unit of its last printed
/// digit.
type Word<'a> = (Option<&'a str>, Option<(f64, f64)>);

/// A line's words, each number as `None` text and its value with the unit
/// of its last printed digit.
fn words(line: &str) -> Vec<Word<'_>> {
    let mut out = Vec::new();
    let mut rest = line;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits > 0 {
            out.push((Some(&rest[..digits]), None));
        }
        rest = &rest[digits..];
        let end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number = rest[..end].trim_end_matches('.');
        if !number.is_empty() {
            let decimals = number.split_once('.').map_or(0, |(_, d)| d.len());
            let value: f64 = number.parse().unwrap();
            out.push((None, Some((value, 10f64.powi(-(decimals as i32))))));
        }
        rest = &rest[number.len()..];
    }
    out
}

/// Whether `got` is `want`, or differs from it only in numbers within
/// their noise.
fn same_but_noise(want: &str, got: &str) -> bool {
    if want == got {
        return true;
    }
    let (want, got) = (words(want), words(got));
    want.len() == got.len()
        && want.iter().zip(&got).all(|(w, g)| match (w, g) {
            ((Some(a), _), (Some(b), _)) => a == b,
            ((None, Some((a, unit))), (None, Some((b, _)))) => {
                (a - b).abs() <= (0.01 * a.abs()).max(3.0 * unit)
            }
            _ => false,
        })
}

#[test]
fn noise_in_a_measured_number_is_no_change_but_a_new_number_is() {
    let line = "measured 12.00 (2.00) on average, 0: 0.816  2: 0.000, 56013 calls";
    assert!(same_but_noise(
        line,
        "measured 11.99 (2.00) on average, 0: 0.815  2: 0.001, 56015 calls"
    ));
    assert!(!same_but_noise(
        line,
        "measured 10.00 (2.00) on average, 0: 0.816  2: 0.000, 56013 calls"
    ));
    assert!(!same_but_noise(
        line,
        "measured 12.00 (2.00) in total, 0: 0.816  2: 0.000, 56013 calls"
    ));
    assert!(!same_but_noise(
        line,
        "measured 12.00 (2.00) on average, 0: 0.816  2: 0.050, 56013 calls"
    ));
}
