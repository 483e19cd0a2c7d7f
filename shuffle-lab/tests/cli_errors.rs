//! Runs the built `shuffle-lab` with bad arguments: one line on stderr,
//! a nonzero exit, and a message that names only flags that were passed and
//! says what to change.

#[path = "support/lab.rs"]
mod lab;
use lab::run;

#[test]
fn bad_arguments_give_one_line_and_a_nonzero_exit() {
    let cases: &[&[&str]] = &[
        &["size", "--buckets", "5", "--per-tenant", "6"],
        &["size", "--buckets", "5", "--per-tenant", "0"],
        &["size", "--buckets", "0", "--per-tenant", "1"],
        &[
            "size",
            "--buckets",
            "16",
            "--per-tenant",
            "2",
            "--failed",
            "17",
        ],
        &["size", "--buckets", "sixteen", "--per-tenant", "2"],
        &["size", "--buckets", "-3", "--per-tenant", "2"],
        &["size", "--buckets", "16"],
        &["size", "--buckets", "100000", "--per-tenant", "50000"],
        &["size", "--buckets", "16", "--per-tenant", "2", "--bogus"],
        &["frobnicate"],
        &["sweep", "--per-tenant", "2", "--buckets", "9..3"],
        &["sweep", "--per-tenant", "2", "--buckets", "12"],
        &["sweep", "--per-tenant", "2", "--buckets", "a..b"],
        &["sweep", "--per-tenant", "5", "--buckets", "1..4"],
        &["sweep", "--per-tenant", "0", "--buckets", "1..4"],
        &[
            "simulate",
            "--buckets",
            "16",
            "--per-tenant",
            "2",
            "--tenants",
            "1",
            "--seed",
            "1",
        ],
        &[
            "simulate",
            "--buckets",
            "16",
            "--per-tenant",
            "9",
            "--tenants",
            "10",
            "--seed",
            "1",
        ],
        &[
            "simulate",
            "--buckets",
            "16",
            "--per-tenant",
            "2",
            "--tenants",
            "10",
        ],
        &[
            "plot",
            "--buckets",
            "16",
            "--per-tenant-max",
            "17",
            "--svg",
            "x.svg",
        ],
        &["plot", "--buckets", "0", "--svg", "x.svg"],
        &[
            "plot",
            "--buckets",
            "16",
            "--svg",
            "/nonexistent-dir/shuffle-lab/x.svg",
        ],
    ];
    for args in cases {
        let out = run(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert_ne!(out.status.code(), Some(101), "{args:?} panicked: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{args:?}: {stderr}");
        assert!(
            stderr.starts_with("shuffle-lab: error"),
            "{args:?}: {stderr}"
        );
        assert!(out.stdout.is_empty(), "{args:?} printed to stdout");
    }
    // Argument errors exit with 2, a file that cannot be written with 1.
    assert_eq!(run(cases[0]).status.code(), Some(2));
    assert_eq!(run(cases[4]).status.code(), Some(2));
    assert_eq!(run(cases[cases.len() - 1]).status.code(), Some(1));
}

/// The stderr line of a command that must fail with status 2, without the
/// `shuffle-lab: ` prefix.
fn usage_error(args: &[&str]) -> String {
    let out = run(args);
    assert_eq!(out.status.code(), Some(2), "{args:?}");
    let stderr = String::from_utf8(out.stderr).unwrap();
    let line = stderr.trim_end();
    assert_eq!(line.lines().count(), 1, "{args:?}: {stderr}");
    line.strip_prefix("shuffle-lab: ")
        .unwrap_or_else(|| panic!("{args:?}: {stderr}"))
        .to_owned()
}

/// Every `--flag` a message names was passed on the command line.
#[track_caller]
fn names_only_passed_flags(args: &[&str], message: &str) {
    for word in message.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-')) {
        if word.starts_with("--") {
            assert!(
                args.contains(&word),
                "{args:?}: the message names {word}, which was not passed: {message}"
            );
        }
    }
}

#[test]
fn plot_with_zero_buckets_blames_buckets() {
    let args = ["plot", "--buckets", "0", "--svg", "x.svg"];
    let e = usage_error(&args);
    assert!(e.contains("set --buckets to 1 or more"), "{e}");
    names_only_passed_flags(&args, &e);
    // The old spelling is blamed by its new name, the same flag.
    let e = usage_error(&["plot", "--nodes", "0", "--svg", "x.svg"]);
    assert!(e.contains("--buckets is 0"), "{e}");
    assert!(!e.contains("--per-tenant-max"), "{e}");
}

#[test]
fn simulate_with_huge_buckets_says_which_flag_to_lower_and_to_what() {
    for n in ["70000", "200000000", "4294967295"] {
        let args = [
            "simulate",
            "--buckets",
            n,
            "--per-tenant",
            "2",
            "--tenants",
            "2",
            "--seed",
            "1",
        ];
        let e = usage_error(&args);
        assert!(e.contains("lower --buckets to at most 65536"), "{e}");
        names_only_passed_flags(&args, &e);
    }
    let args = [
        "simulate",
        "--buckets",
        "16",
        "--per-tenant",
        "9",
        "--tenants",
        "10",
        "--seed",
        "1",
    ];
    let e = usage_error(&args);
    assert!(e.contains("lower --per-tenant to at most 8"), "{e}");
    names_only_passed_flags(&args, &e);
}

#[test]
fn errors_name_only_flags_that_were_passed_and_say_what_to_change() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["size", "--buckets", "0", "--per-tenant", "1"],
            "set --buckets to 1 or more",
        ),
        (
            &["size", "--buckets", "5", "--per-tenant", "0"],
            "set --per-tenant between 1 and --buckets (5)",
        ),
        (
            &["size", "--buckets", "5", "--per-tenant", "6"],
            "lower --per-tenant to at most 5 or raise --buckets to at least 6",
        ),
        (
            &[
                "size",
                "--buckets",
                "16",
                "--per-tenant",
                "2",
                "--failed",
                "17",
            ],
            "lower --failed to at most 16",
        ),
        (
            &["size", "--buckets", "100000", "--per-tenant", "50000"],
            "lower --per-tenant to at most 2410",
        ),
        (
            &["size", "--buckets", "100000", "--per-tenant", "4000"],
            "lower --per-tenant to at most 2410 or --buckets to at most 27222",
        ),
        (
            &["sweep", "--per-tenant", "0", "--buckets", "1..4"],
            "set --per-tenant to 1 or more",
        ),
        (
            &["sweep", "--per-tenant", "5", "--buckets", "1..4"],
            "raise the end of the --buckets range to at least 5 or lower --per-tenant to at most 4",
        ),
        (
            &["sweep", "--per-tenant", "4000", "--buckets", "8000..100000"],
            "or the end of the --buckets range to at most 27222",
        ),
        (
            &[
                "simulate",
                "--buckets",
                "16",
                "--per-tenant",
                "2",
                "--tenants",
                "1",
                "--seed",
                "1",
            ],
            "set --tenants to at least 2",
        ),
        (
            &[
                "size",
                "--buckets",
                "16",
                "--per-tenant",
                "2",
                "--tenants",
                "0",
            ],
            "set --tenants to 1 or more",
        ),
        (
            &[
                "simulate",
                "--buckets",
                "16",
                "--per-tenant",
                "2",
                "--tenants",
                "10",
                "--seed",
                "1",
                "--concurrency",
                "4000000000",
            ],
            "lower --concurrency to at most 100000",
        ),
        (
            &[
                "simulate",
                "--buckets",
                "16",
                "--per-tenant",
                "2",
                "--tenants",
                "300000000",
                "--seed",
                "1",
            ],
            "lower --tenants to at most 134217728 or --buckets to at most 7",
        ),
        (
            &[
                "plot",
                "--buckets",
                "3",
                "--per-tenant-max",
                "0",
                "--svg",
                "x.svg",
            ],
            "set --per-tenant-max between 1 and --buckets (3)",
        ),
        (
            &[
                "plot",
                "--buckets",
                "16",
                "--per-tenant-max",
                "17",
                "--svg",
                "x.svg",
            ],
            "lower --per-tenant-max to at most 16 or raise --buckets to at least 17",
        ),
        (
            &[
                "plot",
                "--buckets",
                "3000",
                "--per-tenant-max",
                "600",
                "--svg",
                "x.svg",
            ],
            "lower --per-tenant-max to at most 512",
        ),
    ];
    for (args, want) in cases {
        let e = usage_error(args);
        assert!(e.contains(want), "{args:?}: want {want:?} in: {e}");
        names_only_passed_flags(args, &e);
    }
    // One past each bound is refused (that the bounds themselves are accepted
    // is checked without computing a huge report, in the binary's unit tests).
    for args in [
        ["size", "--buckets", "100000", "--per-tenant", "2411"],
        ["size", "--buckets", "27223", "--per-tenant", "4000"],
    ] {
        assert_eq!(run(&args).status.code(), Some(2), "{args:?}");
    }
}
