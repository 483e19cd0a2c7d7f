//! Borrowing in a `LimiterSet` config: `borrow_from` and `lender_reserve`
//! read from TOML and JSON, passed to the builder (a lone tenant borrows once
//! its own buckets are empty, down to the reserve), off by default, and every
//! bad value refused at its place with what to write. The same over Redis is
//! in tests/set_redis.rs.

use shuffle_limiter::set::{LimiterConfig, LimiterSet, Reserve, SetConfig};
use shuffle_limiter::{ConfigError, ManualClock, ShardedLimiter};

/// Three limiters of 8 buckets with 2 tokens each (a tenant owns 2 buckets,
/// 4 tokens): one lending everything, one lending down to the default half,
/// one not lending.
const LENDING: &str = r#"
[limiters.lend_all]
rate = "8/s"
burst = 16
borrow_from = 2
lender_reserve = 0

[limiters.lend_half]
rate = "8/s"
burst = 16
borrow_from = 2

[limiters.no_borrowing]
rate = "8/s"
burst = 16
"#;

fn toml_err(text: &str) -> String {
    toml::from_str::<SetConfig>(text).unwrap_err().to_string()
}

/// A lone tenant's answers until the first denial: whether each grant was
/// borrowed. The clock never moves, so nothing refills.
fn borrowed_until_denied(limiter: &ShardedLimiter<ManualClock>) -> Vec<bool> {
    let mut answers = Vec::new();
    while let Ok(grant) = limiter.check("tenant-42") {
        answers.push(grant.borrowed());
        assert!(
            answers.len() <= 16,
            "more grants than the burst: {answers:?}"
        );
    }
    answers
}

#[test]
fn borrowing_keys_are_read_from_toml_and_json() {
    let config: SetConfig = toml::from_str(LENDING).unwrap();
    let lend_all = &config.limiters["lend_all"];
    assert_eq!(lend_all.borrow_from, Some(2));
    assert_eq!(lend_all.lender_reserve, Some(Reserve::new(0.0).unwrap()));
    let lend_half = &config.limiters["lend_half"];
    assert_eq!(
        (lend_half.borrow_from, lend_half.lender_reserve),
        (Some(2), None)
    );
    let off = &config.limiters["no_borrowing"];
    assert_eq!((off.borrow_from, off.lender_reserve), (None, None));

    let json = r#"{ "limiters": {
        "lend_all": { "rate": "8/s", "burst": 16, "borrow_from": 2, "lender_reserve": 0 },
        "lend_half": { "rate": "8/s", "burst": 16, "borrow_from": 2 },
        "no_borrowing": { "rate": "8/s", "burst": 16 }
    } }"#;
    assert_eq!(serde_json::from_str::<SetConfig>(json).unwrap(), config);

    // A fraction reads back as written, and configs compare by it.
    let config: SetConfig =
        toml::from_str("[limiters.a]\nrate = \"8/s\"\nborrow_from = 1\nlender_reserve = 0.1\n")
            .unwrap();
    let reserve = config.limiters["a"].lender_reserve.unwrap();
    assert_eq!(
        (reserve.get(), reserve.to_string()),
        (0.1, "0.1".to_owned())
    );
    let mut in_code = LimiterConfig::new("8/s".parse().unwrap());
    in_code.borrow_from = Some(1);
    in_code.lender_reserve = Some(Reserve::new(0.1).unwrap());
    assert_eq!(config.limiters["a"], in_code);
    in_code.lender_reserve = Some(Reserve::new(0.2).unwrap());
    assert_ne!(config.limiters["a"], in_code);
}

#[test]
fn a_set_from_config_borrows_only_when_told_and_down_to_the_reserve() {
    let config: SetConfig = toml::from_str(LENDING).unwrap();
    let set = LimiterSet::from_config_with_clock(&config, ManualClock::new()).unwrap();

    // Its own 2 buckets pay first (4 tokens); then its 2 spill buckets, all
    // of their 2 tokens each with a reserve of 0 ...
    let lend_all = set.get("lend_all").unwrap();
    assert_eq!(
        borrowed_until_denied(lend_all),
        [false, false, false, false, true, true, true, true]
    );
    // ... 1 each with the default reserve, a half ...
    let lend_half = set.get("lend_half").unwrap();
    assert_eq!(
        borrowed_until_denied(lend_half),
        [false, false, false, false, true, true]
    );
    // ... and none without borrow_from: borrowing is off by default.
    let off = set.get("no_borrowing").unwrap();
    assert_eq!(borrowed_until_denied(off), [false; 4]);

    // borrow_from = 0 is off too, exactly as unset.
    let text = LENDING.replace("borrow_from = 2\n\n", "borrow_from = 0\n\n");
    let set: LimiterSet = toml::from_str(&text).unwrap();
    assert_eq!(
        set.get("lend_half").unwrap().shard("t").spill(),
        &[] as &[u32]
    );
    assert_eq!(set.get("lend_all").unwrap().shard("t").spill().len(), 2);
}

#[test]
fn a_bad_borrowing_value_is_named_where_it_is_written() {
    let not_a_share = "is not a share of a bucket's burst: use a number from 0 (lend \
                       everything) up to but not including 1, such as 0.5";
    let cases = [
        (
            "lender_reserve = 1",
            format!("lender_reserve: 1 {not_a_share}"),
        ),
        (
            "lender_reserve = 1.5",
            format!("lender_reserve: 1.5 {not_a_share}"),
        ),
        (
            "lender_reserve = -0.25",
            format!("lender_reserve: -0.25 {not_a_share}"),
        ),
        (
            "lender_reserve = nan",
            format!("lender_reserve: NaN {not_a_share}"),
        ),
        (
            "lender_reserve = inf",
            format!("lender_reserve: inf {not_a_share}"),
        ),
        (
            "lender_reserve = \"50%\"",
            "lender_reserve: invalid type: string \"50%\", expected a share of a \
             bucket's burst from 0 up to but not including 1, such as 0.5"
                .to_owned(),
        ),
        (
            "borrow_from = -1",
            "borrow_from: invalid value: integer `-1`".to_owned(),
        ),
        (
            "borrow_from = 2.5",
            "borrow_from: invalid type: floating point `2.5`".to_owned(),
        ),
    ];
    for (line, message) in cases {
        let e = toml_err(&format!("[limiters.amazon]\nrate = \"5/s\"\n{line}\n"));
        assert!(
            e.contains(&format!("limiters.amazon.{message}")),
            "{line}\n{e}"
        );
        // TOML points at the value, not at the table.
        assert!(e.contains("at line 3, column "), "{line}\n{e}");
    }
    let e = serde_json::from_str::<SetConfig>(
        r#"{"limiters": {"amazon": {"rate": "5/s", "borrow_from": 2, "lender_reserve": 2}}}"#,
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains(&format!("limiters.amazon.lender_reserve: 2 {not_a_share}")),
        "{e}"
    );

    // A reserve that would do nothing is refused, not ignored.
    for borrow in ["", "borrow_from = 0\n"] {
        let e = toml_err(&format!(
            "[limiters.amazon]\nrate = \"5/s\"\n{borrow}lender_reserve = 0.25\n"
        ));
        assert!(
            e.contains(
                "limiters.amazon.lender_reserve: only a limiter that lends takes a reserve: \
                 set borrow_from to 1 or more, such as borrow_from = 2, or remove \
                 lender_reserve"
            ),
            "{borrow:?}\n{e}"
        );
    }
    // And so it is from a config built in code, which would not read back.
    let mut amazon = LimiterConfig::new("5/s".parse().unwrap());
    amazon.lender_reserve = Some(Reserve::new(0.25).unwrap());
    let mut config = SetConfig::default();
    config.limiters.insert("amazon".to_owned(), amazon);
    let err = LimiterSet::from_config(&config).unwrap_err();
    assert_eq!(err.field(), Some("lender_reserve"), "{err}");
    let json = serde_json::to_string(&config).unwrap();
    let read = serde_json::from_str::<SetConfig>(&json).unwrap_err();
    assert!(read.to_string().contains(&err.to_string()), "{read}\n{err}");
    let e = serde_json::from_str::<SetConfig>(
        r#"{"limiters": {"amazon": {"rate": "5/s", "borrow_from": 1, "borrow_from": 2}}}"#,
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("limiters.amazon.borrow_from: given twice"),
        "{e}"
    );
}

#[test]
fn a_spill_set_that_cannot_fit_names_borrow_from() {
    // k + d must fit in the buckets (and in the 8 a shard holds).
    let text = "[limiters.amazon]\nrate = \"5/s\"\nbuckets = 5\nborrow_from = 4\n";
    let config: SetConfig = toml::from_str(text).unwrap();
    let err = LimiterSet::from_config(&config).unwrap_err();
    assert_eq!(
        (err.limiter(), err.field()),
        ("amazon", Some("borrow_from"))
    );
    assert_eq!(
        err.config_error(),
        Some(&ConfigError::SpillTooLarge {
            spill: 4,
            per_tenant: 2,
            max: 3
        })
    );
    assert!(
        err.to_string().starts_with(
            "limiters.amazon.borrow_from: borrow_from(4) with per_tenant(2) gives each \
             tenant 6 buckets"
        ),
        "{err}"
    );
    assert!(
        err.to_string().ends_with("use borrow_from of at most 3"),
        "{err}"
    );
    let e = toml::from_str::<LimiterSet>(text).unwrap_err().to_string();
    assert!(e.contains("limiters.amazon.borrow_from: "), "{e}");
}

#[test]
fn a_reserve_is_a_share_below_one_made_only_in_range() {
    for bad in [1.0, 1.5, -0.1, f64::NAN, f64::INFINITY] {
        let err = Reserve::new(bad).unwrap_err();
        assert_eq!(
            err,
            ConfigError::LenderReserve {
                reserve: bad.to_string()
            }
        );
        assert!(
            err.to_string().contains("up to but not including 1"),
            "{err}"
        );
    }
    // The two zeros are one share.
    assert_eq!(Reserve::new(-0.0).unwrap(), Reserve::new(0.0).unwrap());
    assert_eq!(Reserve::new(-0.0).unwrap().to_string(), "0");
    assert_eq!(
        Reserve::default().get(),
        shuffle_limiter::DEFAULT_LENDER_RESERVE
    );
    assert_eq!(f64::from(Reserve::new(0.75).unwrap()), 0.75);
    assert_eq!(Reserve::new(0.999).unwrap().get(), 0.999);
}

/// A config is untrusted input (issue 24): `borrow_from` at the top of its
/// range is refused with the field's place, and its message counts the
/// buckets it asks for without overflowing (it panicked formatting
/// `spill + per_tenant` in 32 bits).
#[test]
fn a_borrow_from_at_the_top_of_its_range_is_a_typed_error() {
    let config: SetConfig =
        toml::from_str("[limiters.w]\nrate = \"8/s\"\nborrow_from = 4294967295\n").unwrap();
    let err = LimiterSet::from_config(&config).unwrap_err();
    assert_eq!((err.limiter(), err.field()), ("w", Some("borrow_from")));
    assert!(
        err.to_string()
            .contains("gives each tenant 4294967297 buckets"),
        "{err}"
    );
}
