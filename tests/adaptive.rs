//! The adaptive controller (`upstream::Adaptive`) on a `ManualClock`: cuts
//! on throttles at most once per cooldown and never below the floor, steps
//! up after quiet intervals and never above the ceiling, takes an
//! advertised limit as it is, and cuts a shared quota once for two
//! controllers throttled together.

use std::time::Duration;

use shuffle_limiter::upstream::{AdaptError, Adaptive, Signal};
use shuffle_limiter::{ManualClock, Quota, ShardedLimiter};

fn limiter(clock: &ManualClock) -> ShardedLimiter<ManualClock> {
    ShardedLimiter::builder()
        .quota(Quota::per_second(100))
        .buckets(4)
        .per_tenant(2)
        .clock(clock.clone())
        .build()
        .unwrap()
}

fn controller(clock: &ManualClock) -> Adaptive<ManualClock> {
    Adaptive::new(5, Quota::per_second(100))
        .unwrap()
        .clock(clock.clone())
}

#[test]
fn throttles_cut_once_per_cooldown_down_to_the_floor() {
    let clock = ManualClock::new();
    let (limiter, adaptive) = (limiter(&clock), controller(&clock));
    assert_eq!(
        adaptive.observe_now(&limiter, Signal::Throttled),
        Some(Quota::per_second(70))
    );
    // A storm of 429s within the cooldown: one cut.
    for _ in 0..50 {
        assert_eq!(adaptive.observe_now(&limiter, Signal::Throttled), None);
        clock.advance(Duration::from_millis(10));
    }
    assert_eq!(limiter.quota().count(), 70);
    let mut counts = Vec::new();
    for _ in 0..20 {
        clock.advance(Duration::from_secs(1));
        adaptive.observe_now(&limiter, Signal::Throttled);
        counts.push(limiter.quota().count());
    }
    assert_eq!(counts[..6], [49, 34, 23, 16, 11, 7]);
    assert!(counts[6..].iter().all(|&c| c == 5), "{counts:?}");
    // The burst follows the rate, never below N.
    assert_eq!(limiter.quota().burst(), 5);
}

#[test]
fn before_any_throttle_quiet_intervals_step_up_to_the_ceiling() {
    let clock = ManualClock::new();
    let limiter = limiter(&clock);
    limiter.set_quota(Quota::per_second(50)).unwrap();
    let adaptive = controller(&clock);
    let served = |adaptive: &Adaptive<ManualClock>| {
        adaptive
            .observe_now(&limiter, Signal::Served)
            .map(|q| q.count())
    };
    // First sight, quiet since ever: one step of 5 (a twentieth of 100).
    assert_eq!(served(&adaptive), Some(55));
    clock.advance(Duration::from_millis(4_900));
    assert_eq!(served(&adaptive), None);
    clock.advance(Duration::from_millis(100));
    assert_eq!(served(&adaptive), Some(60));
    for _ in 0..20 {
        clock.advance(Duration::from_secs(5));
        served(&adaptive);
    }
    assert_eq!(limiter.quota(), Quota::per_second(100));
    // At the ceiling, nothing to step up to.
    clock.advance(Duration::from_secs(5));
    assert_eq!(served(&adaptive), None);
}

#[test]
fn after_a_throttle_the_rate_climbs_back_on_a_cubic_then_probes_past() {
    let clock = ManualClock::new();
    let limiter = limiter(&clock);
    let adaptive = Adaptive::new(5, Quota::per_second(200))
        .unwrap()
        .clock(clock.clone());
    assert_eq!(
        adaptive.observe_now(&limiter, Signal::Throttled),
        Some(Quota::per_second(70))
    );
    // peak · (1 + 0.3 · (t − 6)³ / 6³), from 100 at the cut, 1.5 s apart.
    let mut climb = Vec::new();
    for _ in 0..9 {
        clock.advance(Duration::from_millis(1_500));
        adaptive.observe_now(&limiter, Signal::Served);
        climb.push(limiter.quota().count());
    }
    assert_eq!(climb, [87, 96, 99, 100, 100, 103, 112, 130, 158]);
    // Concave up to the peak (steps shrink), convex past it (they grow).
    let steps: Vec<i64> = climb
        .windows(2)
        .map(|w| i64::from(w[1]) - i64::from(w[0]))
        .collect();
    assert!(steps[..4].windows(2).all(|w| w[1] <= w[0]), "{steps:?}");
    assert!(steps[4..].windows(2).all(|w| w[1] >= w[0]), "{steps:?}");
    clock.advance(Duration::from_secs(3));
    adaptive.observe_now(&limiter, Signal::Served);
    assert_eq!(limiter.quota().count(), 200, "the ceiling");
    // A throttle 1 s after the last cut's cooldown cuts from where it is,
    // whatever raises came in between.
    assert_eq!(
        adaptive
            .observe_now(&limiter, Signal::Throttled)
            .map(|q| q.count()),
        Some(140)
    );
    // Served never lowers: a rate set above the curve by hand stays.
    limiter.set_quota(Quota::per_second(190)).unwrap();
    clock.advance(Duration::from_secs(1));
    assert_eq!(adaptive.observe_now(&limiter, Signal::Served), None);
}

#[test]
fn an_advertised_limit_holds_the_probe_until_it_stops_being_advertised() {
    let clock = ManualClock::new();
    let limiter = limiter(&clock);
    let adaptive = controller(&clock).headroom(1.0);
    let advertised = Signal::Advertised {
        limit: 40,
        window: Duration::from_secs(1),
    };
    adaptive.observe_now(&limiter, advertised);
    assert_eq!(limiter.quota().count(), 40);
    for _ in 0..49 {
        clock.advance(Duration::from_millis(100));
        assert_eq!(adaptive.observe_now(&limiter, Signal::Served), None);
    }
    // Still advertised every few seconds: never past it.
    for _ in 0..10 {
        clock.advance(Duration::from_secs(4));
        adaptive.observe_now(&limiter, Signal::Served);
        adaptive.observe_now(&limiter, advertised);
        assert_eq!(limiter.quota().count(), 40);
    }
    // A throttle below it is a burst: no cut.
    assert_eq!(adaptive.observe_now(&limiter, Signal::Throttled), None);
    // The next answer, 5 s on, still came after the last advertisement;
    // the one after it is served without one: probing starts from the
    // limit, as from a peak reached.
    clock.advance(Duration::from_secs(5));
    assert_eq!(adaptive.observe_now(&limiter, Signal::Served), None);
    adaptive.observe_now(&limiter, Signal::Served);
    assert_eq!(limiter.quota().count(), 46, "40 · (1 + 0.3 · 5³ / 6³)");
}

#[test]
fn an_advertised_limit_is_taken_less_the_headroom_within_the_bounds() {
    let clock = ManualClock::new();
    let limiter = limiter(&clock);
    let adaptive = controller(&clock).headroom(1.0);
    let advertised = |limit, secs| Signal::Advertised {
        limit,
        window: Duration::from_secs(secs),
    };
    // 1 200 per minute is 20 per second.
    adaptive.observe_now(&limiter, advertised(1200, 60));
    assert_eq!(limiter.quota().count(), 20);
    adaptive.observe_now(&limiter, advertised(1, 1));
    assert_eq!(limiter.quota().count(), 5, "the floor");
    adaptive.observe_now(&limiter, advertised(u32::MAX, 1));
    assert_eq!(limiter.quota().count(), 100, "the ceiling");
    // A window of zero says nothing.
    assert_eq!(adaptive.observe_now(&limiter, advertised(7, 0)), None);
    // By default it runs at 0.95 of the limit.
    let default = controller(&clock);
    default.observe_now(&limiter, advertised(40, 1));
    assert_eq!(limiter.quota().count(), 38);
}

#[test]
fn two_controllers_throttled_together_cut_a_shared_quota_once() {
    let clock = ManualClock::new();
    let limiter = limiter(&clock);
    let (a, b) = (controller(&clock), controller(&clock));
    // Both have seen the quota before the throttle.
    assert_eq!(a.observe_now(&limiter, Signal::Served), None);
    assert_eq!(b.observe_now(&limiter, Signal::Served), None);
    clock.advance(Duration::from_secs(2));
    a.observe_now(&limiter, Signal::Throttled);
    b.observe_now(&limiter, Signal::Throttled);
    assert_eq!(limiter.quota().count(), 70);
}

#[test]
fn bad_settings_are_refused_with_what_to_change() {
    let ceiling = Quota::per_second(10);
    assert_eq!(
        Adaptive::new(0, ceiling).unwrap_err(),
        AdaptError::ZeroFloor
    );
    let above = Adaptive::new(11, ceiling).unwrap_err();
    assert_eq!(
        above,
        AdaptError::FloorAboveCeiling {
            floor: 11,
            ceiling: 10
        }
    );
    assert!(above.to_string().contains("lower the floor"));
    for factor in [0.0, 1.0, 1.5, -0.2, f64::NAN] {
        let refused = Adaptive::new(1, ceiling)
            .unwrap()
            .decrease(factor)
            .unwrap_err();
        assert!(
            refused.to_string().contains("above 0 and below 1"),
            "{factor}"
        );
    }
    assert_eq!(Signal::of_status(429), Some(Signal::Throttled));
    assert_eq!(Signal::of_status(503), Some(Signal::Throttled));
    assert_eq!(Signal::of_status(200), Some(Signal::Served));
    assert_eq!(Signal::of_status(500), None);
}
