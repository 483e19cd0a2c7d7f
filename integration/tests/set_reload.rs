//! Reloading a running `LimiterSet`: unchanged limiters keep their state,
//! changed quotas and N change live for whoever holds the limiter, removed
//! ones leave, new ones start; a setting that cannot change live is refused
//! before anything changes.

use std::sync::Arc;
use std::time::Duration;

use shuffle_limiter::set::{LimiterSet, SetConfig};
use shuffle_limiter::{ManualClock, Quota, ShardedLimiter};

fn config(text: &str) -> SetConfig {
    toml::from_str(text).unwrap()
}

const BEFORE: &str = r#"
    [limiters.amazon]
    rate = "100/s"
    buckets = 4
    per_tenant = 2

    [limiters.ebay]
    rate = "10/s"

    [limiters.etsy]
    rate = "1/s"
"#;

#[test]
fn a_reload_keeps_changes_adds_and_removes_as_the_config_says() {
    let clock = ManualClock::new();
    let set = LimiterSet::from_config_with_clock(&config(BEFORE), clock.clone()).unwrap();
    let amazon = Arc::clone(set.get("amazon").unwrap());
    let ebay = Arc::clone(set.get("ebay").unwrap());
    for _ in 0..30 {
        amazon.check("t").unwrap();
    }
    for _ in 0..2 {
        ebay.check("t").unwrap();
    }
    let ebay_before = ebay.snapshot();
    let reload = set
        .reload(
            &config(
                r#"
                [limiters.amazon]
                rate = "400/s"
                buckets = 4
                per_tenant = 2

                [limiters.ebay]
                rate = "10/s"

                [limiters.walmart]
                rate = "5/s"
                "#,
            ),
            clock.clone(),
        )
        .unwrap();
    assert_eq!(reload.changed(), ["amazon"]);
    assert_eq!(reload.added(), ["walmart"]);
    assert_eq!(reload.removed(), ["etsy"]);
    let new = reload.set();
    assert_eq!(
        new.names().collect::<Vec<_>>(),
        ["amazon", "ebay", "walmart"]
    );
    // The same limiters, shared: the one a layer holds is the one changed.
    assert!(Arc::ptr_eq(new.get("amazon").unwrap(), &amazon));
    assert!(Arc::ptr_eq(new.get("ebay").unwrap(), &ebay));
    assert_eq!(amazon.quota(), Quota::per_second(400));
    // Unchanged: not a bucket moved.
    assert_eq!(ebay.snapshot(), ebay_before);
    // Changed: the tenant had 20 of its 50, a share of 0.4, and keeps it
    // of 200.
    assert_eq!(amazon.remaining("t"), 80);
    // Added: full.
    assert_eq!(new.get("walmart").unwrap().remaining("t"), 2);
    // The old set is the old set, but for the quota changed in place.
    assert!(set.get("etsy").is_some() && set.get("walmart").is_none());
}

#[test]
fn a_setting_a_running_limiter_keeps_is_refused_and_nothing_changes() {
    let clock = ManualClock::new();
    let set = LimiterSet::from_config_with_clock(&config(BEFORE), clock.clone()).unwrap();
    let changes = [
        (
            "buckets = 4",
            "buckets = 4\n    max_buckets = 8",
            "max_buckets",
        ),
        ("per_tenant = 2", "per_tenant = 3", "per_tenant"),
        ("per_tenant = 2", "per_tenant = 2\n    salt = \"s\"", "salt"),
        (
            "per_tenant = 2",
            "per_tenant = 2\n    borrow_from = 1",
            "borrow_from",
        ),
    ];
    for (from, to, field) in changes {
        // ebay's rate changes too, and must not have changed after.
        let text = BEFORE.replace(from, to).replace("10/s", "20/s");
        let err = set.reload(&config(&text), clock.clone()).unwrap_err();
        assert_eq!(
            (err.limiter(), err.field()),
            ("amazon", Some(field)),
            "{err}"
        );
        assert!(
            err.to_string().contains("only the rate, the burst and N"),
            "{err}"
        );
        assert_eq!(set.get("ebay").unwrap().quota(), Quota::per_second(10));
    }
    // More buckets than the limiter was built with room for.
    let text = BEFORE
        .replace("buckets = 4", "buckets = 5")
        .replace("10/s", "20/s");
    let err = set.reload(&config(&text), clock.clone()).unwrap_err();
    assert_eq!(
        (err.limiter(), err.field()),
        ("amazon", Some("max_buckets"))
    );
    assert!(err.to_string().contains(".max_buckets(5)"), "{err}");
    assert_eq!(set.get("ebay").unwrap().quota(), Quota::per_second(10));
    // A burst the buckets cannot take: refused before any change too.
    let text = BEFORE
        .replace("10/s", "20/s")
        .replace("\"1/s\"", "\"1/s\"\n    burst = 0");
    let err = set.reload(&config(&text), clock.clone()).unwrap_err();
    assert_eq!(
        (err.limiter(), err.field()),
        ("etsy", Some("burst")),
        "{err}"
    );
    assert_eq!(set.get("ebay").unwrap().quota(), Quota::per_second(10));
    // A default N that follows the burst counts as a change of N, and a
    // default k that follows N as a change of k: 1/s has N = k = 1, 2/s
    // N = k = 2.
    let text = BEFORE.replace("\"1/s\"", "\"2/s\"");
    let err = set.reload(&config(&text), clock.clone()).unwrap_err();
    assert_eq!(
        (err.limiter(), err.field()),
        ("etsy", Some("per_tenant")),
        "{err}"
    );
}

#[test]
fn a_rate_raised_alone_is_set_live_with_n_left_to_its_default() {
    // At 4/s, N's default is 4 (a bucket needs a token), and so is the
    // room; at 8/s it would be 8: the rate is set live, N stays in the
    // room the limiter has.
    let clock = ManualClock::new();
    let set =
        LimiterSet::from_config_with_clock(&config("[limiters.a]\nrate = \"4/s\""), clock.clone())
            .unwrap();
    let reload = set
        .reload(&config("[limiters.a]\nrate = \"8/s\""), clock)
        .unwrap();
    assert_eq!(reload.changed(), ["a"]);
    let a = reload.set().get("a").unwrap();
    assert_eq!((a.quota().count(), a.buckets()), (8, 4));
}

#[test]
fn writing_out_a_default_is_no_change_of_a_fixed_setting() {
    let clock = ManualClock::new();
    let before = config("[limiters.a]\nrate = \"8/s\"\nbuckets = 8\nper_tenant = 2");
    let set = LimiterSet::from_config_with_clock(&before, clock.clone()).unwrap();
    for extra in [
        "borrow_from = 0",
        "max_buckets = 8",
        "tenant_cache = 100000",
    ] {
        let after = config(&format!(
            "[limiters.a]\nrate = \"8/s\"\nbuckets = 8\nper_tenant = 2\n{extra}"
        ));
        let reload = set.reload(&after, clock.clone());
        assert!(reload.is_ok(), "{extra}: {:?}", reload.err());
    }
    // A setting that does differ is still refused, by its name.
    let lending = config("[limiters.a]\nrate = \"8/s\"\nbuckets = 8\nborrow_from = 2");
    let err = set.reload(&lending, clock.clone()).unwrap_err();
    assert_eq!(err.field(), Some("borrow_from"), "{err}");

    // `max_buckets` is the room the running limiter has, whatever the last
    // config said: left out, then written out again, it is no change.
    let roomy = |max: &str| config(&format!("[limiters.a]\nrate = \"8/s\"\nbuckets = 8\n{max}"));
    let set =
        LimiterSet::from_config_with_clock(&roomy("max_buckets = 16"), clock.clone()).unwrap();
    let set = set.reload(&roomy(""), clock.clone()).unwrap().set().clone();
    assert_eq!(set.get("a").unwrap().max_buckets(), 16);
    let again = set.reload(&roomy("max_buckets = 16"), clock.clone());
    assert!(again.is_ok(), "{:?}", again.err());
    let err = set.reload(&roomy("max_buckets = 8"), clock).unwrap_err();
    assert_eq!(err.field(), Some("max_buckets"), "{err}");
}

#[test]
fn a_reload_changes_n_live_within_the_room_the_limiter_has() {
    let clock = ManualClock::new();
    let before = BEFORE.replace("buckets = 4", "buckets = 4\n    max_buckets = 8");
    let set = LimiterSet::from_config_with_clock(&config(&before), clock.clone()).unwrap();
    let amazon = Arc::clone(set.get("amazon").unwrap());
    // Buckets of 25: the tenant's two hold 50, and it uses 40 of them.
    for _ in 0..40 {
        amazon.check("t").unwrap();
    }
    let held: u64 = amazon.snapshot().iter().map(|b| b.available()).sum();
    assert_eq!(held, 60);
    // 8 buckets and twice the rate: the quota first (a larger burst), then
    // N; the buckets that stay keep their tokens (up to 25 of 200/8), the
    // 4 added start empty.
    let grown = before
        .replace("buckets = 4\n", "buckets = 8\n")
        .replace("100/s", "200/s");
    let reload = set.reload(&config(&grown), clock.clone()).unwrap();
    assert_eq!(reload.changed(), ["amazon"]);
    assert_eq!(
        (amazon.buckets(), amazon.quota()),
        (8, Quota::per_second(200))
    );
    let after: Vec<u64> = amazon.snapshot().iter().map(|b| b.available()).collect();
    assert!(after[4..].iter().all(|&t| t == 0), "{after:?}");
    assert!(after.iter().all(|&t| t <= 25), "{after:?}");
    assert!(after.iter().sum::<u64>() < 100, "{after:?}");
    // Back to 4 buckets and 50/s: N first, then the smaller burst.
    let shrunk = before.replace("100/s", "50/s");
    let reload = reload.set().reload(&config(&shrunk), clock).unwrap();
    assert_eq!(reload.changed(), ["amazon"]);
    assert_eq!(
        (amazon.buckets(), amazon.quota()),
        (4, Quota::per_second(50))
    );
}

/// Issue 24, item 8: a target that builds from scratch is reachable from
/// any running state, however the quota and N change together; and a
/// reload that is refused changes no limiter, even ones before it.
#[test]
fn a_reload_reaches_any_valid_target_and_a_refused_one_changes_nothing() {
    let clock = ManualClock::new();
    let before = config(
        "[limiters.a]\nrate = \"100/s\"\n\n\
         [limiters.b]\nrate = \"1/s\"\nburst = 8\nbuckets = 2\nmax_buckets = 8",
    );
    let set = LimiterSet::from_config_with_clock(&before, clock.clone()).unwrap();
    let (a, b) = (set.get("a").unwrap().clone(), set.get("b").unwrap().clone());
    for _ in 0..6 {
        b.check("t").unwrap();
    }
    // Builds from scratch; but neither 4294967295/s over b's 2 buckets nor
    // a burst of 8 ... over 8 buckets first would.
    let text = "[limiters.a]\nrate = \"200/s\"\n\n\
                [limiters.b]\nrate = \"4294967295/s\"\nbuckets = 8\nmax_buckets = 8";
    let target = config(text);
    LimiterSet::from_config_with_clock(&target, clock.clone()).unwrap();
    let reload = set.reload(&target, clock.clone()).unwrap();
    assert_eq!(reload.changed(), ["a", "b"]);
    assert_eq!(a.quota(), Quota::per_second(200));
    assert_eq!((b.buckets(), b.quota()), (8, Quota::per_second(u32::MAX)));
    // The change handed out no fresh burst: b's tenant had 2 of its 8
    // tokens left, and the 6 buckets added start empty.
    assert!(b.remaining("t") <= 2, "{}", b.remaining("t"));

    // Back, from the other side: fewer buckets and a burst below the old N.
    let back = config(
        "[limiters.a]\nrate = \"100/s\"\n\n\
         [limiters.b]\nrate = \"1/s\"\nburst = 2\nbuckets = 2\nmax_buckets = 8",
    );
    reload.set().reload(&back, clock.clone()).unwrap();
    assert_eq!(
        (b.buckets(), b.quota()),
        (2, Quota::per_second(1).with_burst(2))
    );
    assert_eq!(a.quota(), Quota::per_second(100));

    // Refused at b: a, before it in name order, is not changed either.
    let refused = config(
        "[limiters.a]\nrate = \"300/s\"\n\n\
         [limiters.b]\nrate = \"1/s\"\nburst = 2\nbuckets = 9\nmax_buckets = 8",
    );
    let err = set.reload(&refused, clock).unwrap_err();
    assert_eq!(err.limiter(), "b", "{err}");
    assert_eq!(a.quota(), Quota::per_second(100));
    assert_eq!(b.buckets(), 2);
}

#[test]
fn a_set_built_in_code_has_no_config_to_reload_from() {
    let limiter = ShardedLimiter::builder()
        .quota(Quota::per_second(10))
        .name("amazon")
        .build()
        .unwrap();
    let set = LimiterSet::from_limiters([limiter]).unwrap();
    let err = set
        .reload(
            &config("[limiters.amazon]\nrate = \"10/s\""),
            Default::default(),
        )
        .unwrap_err();
    assert!(err.to_string().contains("LimiterSet::from_config"), "{err}");
}

/// Grants per simulated second of a load that asks far more than the
/// budget, across a reload that halves it: no second grants more than the
/// rate in force, and the second of the change no more than the old rate.
#[test]
fn a_load_across_a_reload_sees_no_spike() {
    let clock = ManualClock::new();
    let text = |rate: &str| format!("[limiters.api]\nrate = \"{rate}\"\nburst = 40\nbuckets = 8");
    let set = LimiterSet::from_config_with_clock(&config(&text("400/s")), clock.clone()).unwrap();
    let api = Arc::clone(set.get("api").unwrap());
    let mut per_second = Vec::new();
    for second in 0..6 {
        if second == 3 {
            set.reload(&config(&text("100/s")), clock.clone()).unwrap();
        }
        let mut granted = 0;
        for _ in 0..100 {
            clock.advance(Duration::from_millis(10));
            for i in 0..50 {
                granted += u32::from(api.check(format!("t{i}")).is_ok());
            }
        }
        per_second.push(granted);
    }
    // The first second spends the burst too. After that, a second holds
    // the rate, give or take a token per bucket where a second's edges cut
    // a bucket's intervals.
    assert!((400..=440).contains(&per_second[0]), "{per_second:?}");
    for &granted in &per_second[1..3] {
        assert!((392..=408).contains(&granted), "{per_second:?}");
    }
    for &granted in &per_second[3..] {
        assert!((92..=108).contains(&granted), "{per_second:?}");
    }
    // The window around the change: R1·1 s + R2·1 s + max(B1, B2), and the
    // last three seconds: R2·3 s + B.
    assert!(
        per_second[2] + per_second[3] <= 400 + 100 + 40,
        "{per_second:?}"
    );
    assert!(
        per_second[3..].iter().sum::<u32>() <= 300 + 40,
        "{per_second:?}"
    );
}

/// Over Redis: a reload that changes a Redis limiter's rate sets the quota
/// in Redis, where another process's limiter decides with it next.
#[cfg(feature = "redis")]
#[test]
fn a_reload_changes_a_redis_limiters_quota_for_the_fleet() {
    #[path = "../../tests/support/redis_server.rs"]
    mod redis_server;
    use shuffle_limiter::Limit;

    let server = redis_server::RedisServer::start();
    let text = |rate: &str| {
        config(&format!(
            "[limiters.partner]\nrate = \"{rate}\"\nbuckets = 4\nper_tenant = 4\n\
             redis = \"{}\"\n\n[limiters.local]\nrate = \"5/s\"",
            server.url()
        ))
    };
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            let ours = LimiterSet::connect(&text("20/10s")).await.unwrap();
            let theirs = LimiterSet::connect(&text("20/10s")).await.unwrap();
            let partner = ours.get_redis("partner").unwrap();
            for _ in 0..10 {
                partner.check("t").await.unwrap();
            }
            // In process, `reload` refuses a Redis change; `reload_connect`
            // makes it.
            let err = ours
                .reload(&text("40/20s"), Default::default())
                .unwrap_err();
            assert_eq!(err.field(), Some("redis"));
            let reload = ours
                .reload_connect(&text("40/20s"), Default::default())
                .await
                .unwrap();
            assert_eq!(reload.changed(), ["partner"]);
            // Half of 20 was left: half of 40 now, for the other process too.
            let other = theirs.get_redis("partner").unwrap();
            let mut left = 0;
            while other.check("t").await.is_ok() && left < 60 {
                left += 1;
            }
            assert!((20..=21).contains(&left), "{left}");
            assert_eq!(other.quota().burst(), 40);
        });
}

/// A reload whose config writes out what the running limiter already is (a
/// default, or the burst and N it has) changes nothing, and says so: no
/// limiter is reported changed, and its buckets are as they were.
#[test]
fn a_reload_that_writes_out_what_runs_reports_no_change() {
    let clock = ManualClock::new();
    let first: SetConfig = toml::from_str("[limiters.p]\nrate = \"200/s\"\n").unwrap();
    let set = LimiterSet::from_config_with_clock(&first, clock.clone()).unwrap();
    let p = Arc::clone(set.get("p").unwrap());
    while p.check("t").is_ok() {}
    let drained = p.remaining("t");
    for extra in [
        "borrow_from = 0",
        "per_tenant = 2",
        "buckets = 8",
        "burst = 200",
        "max_buckets = 8",
    ] {
        let config = config(&format!("[limiters.p]\nrate = \"200/s\"\n{extra}\n"));
        let reload = set.reload(&config, clock.clone()).unwrap();
        assert!(
            reload.changed().is_empty(),
            "{extra}: {:?}",
            reload.changed()
        );
        assert_eq!(p.remaining("t"), drained, "{extra}");
    }
    // A real change is reported.
    let reload = set
        .reload(&config("[limiters.p]\nrate = \"400/s\"\n"), clock)
        .unwrap();
    assert_eq!(reload.changed(), ["p"]);
}
