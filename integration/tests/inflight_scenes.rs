//! The in-flight limit's two scenes, under tokio's paused time: a tenant
//! whose calls hang starves only the tenants holding its exact pools
//! (beside one shared semaphore, where everyone stalls), and a tenant at
//! 20 times the others' load takes only its own pools' share.
//!
//! 40 permits, N = 8 pools of 5, k = 2; tenants `tenant-0` ... The
//! numbers are in the in-flight guide (`src/guide/inflight.md`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use shuffle_limiter::blast::BlastRadius;
use shuffle_limiter::inflight::InFlight;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::{Instant, sleep, sleep_until, timeout};

const RUN: Duration = Duration::from_secs(20);

/// What calls go through: the shuffle-sharded pools, or one semaphore.
#[derive(Clone)]
enum Gate {
    Pools(Arc<InFlight>),
    Shared(Arc<Semaphore>),
}

impl Gate {
    fn pools() -> Gate {
        let inflight = InFlight::builder()
            .concurrency(40)
            .pools(8)
            .per_tenant(2)
            .build()
            .unwrap();
        Gate::Pools(Arc::new(inflight))
    }

    fn shared() -> Gate {
        Gate::Shared(Arc::new(Semaphore::new(40)))
    }

    /// One call of `tenant` that takes `takes` once it holds a permit,
    /// waiting at most `max_wait` for it; whether it got one.
    async fn call(&self, tenant: &str, max_wait: Option<Duration>, takes: Duration) -> bool {
        match self {
            Gate::Pools(inflight) => {
                let acquire = inflight.acquire(tenant);
                let permit = match max_wait {
                    Some(max_wait) => acquire.within(max_wait).await,
                    None => acquire.await,
                };
                let Ok(_permit) = permit else { return false };
                sleep(takes).await;
            }
            Gate::Shared(semaphore) => {
                let permit = match max_wait {
                    Some(max_wait) => timeout(max_wait, semaphore.acquire()).await.ok(),
                    None => Some(semaphore.acquire().await),
                };
                let Some(Ok(_permit)) = permit else {
                    return false;
                };
                sleep(takes).await;
            }
        }
        true
    }
}

/// One tenant's load.
#[derive(Debug, Clone, Copy)]
enum Load {
    /// Keeps `calls` calls going, each taking `takes`, waiting as long as
    /// it takes.
    Closed { calls: u32, takes: Duration },
    /// Sends a call every `every` (the first after `offset`), each taking
    /// `takes`, each waiting at most `max_wait` for its permit.
    Open {
        every: Duration,
        offset: Duration,
        takes: Duration,
        max_wait: Duration,
    },
}

/// Calls sent and served per tenant, over a run of `RUN`.
async fn run(gate: &Gate, loads: &[(String, Load)]) -> Vec<(u64, u64)> {
    let counts: Arc<Vec<[AtomicU64; 2]>> =
        Arc::new(loads.iter().map(|_| Default::default()).collect());
    let start = Instant::now();
    let end = start + RUN;
    let mut tasks = JoinSet::new();
    for (i, (tenant, load)) in loads.iter().cloned().enumerate() {
        let (gate, counts) = (gate.clone(), counts.clone());
        match load {
            Load::Closed { calls, takes } => {
                for _ in 0..calls {
                    let (gate, counts, tenant) = (gate.clone(), counts.clone(), tenant.clone());
                    tasks.spawn(async move {
                        while Instant::now() < end {
                            counts[i][0].fetch_add(1, Ordering::Relaxed);
                            if gate.call(&tenant, None, takes).await {
                                counts[i][1].fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    });
                }
            }
            Load::Open {
                every,
                offset,
                takes,
                max_wait,
            } => {
                let mut calls = JoinSet::new();
                tasks.spawn(async move {
                    let mut next = start + offset;
                    while next < end {
                        sleep_until(next).await;
                        let (gate, counts, tenant) = (gate.clone(), counts.clone(), tenant.clone());
                        counts[i][0].fetch_add(1, Ordering::Relaxed);
                        calls.spawn(async move {
                            if gate.call(&tenant, Some(max_wait), takes).await {
                                counts[i][1].fetch_add(1, Ordering::Relaxed);
                            }
                        });
                        next += every;
                    }
                    calls.join_all().await;
                });
            }
        }
    }
    // The open loads end within their waits and calls; the closed ones
    // (a hung tenant) are cut at the end, their permits dropped.
    sleep_until(end + Duration::from_secs(1)).await;
    tasks.abort_all();
    while tasks.join_next().await.is_some() {}
    if let Gate::Pools(inflight) = gate {
        assert_eq!(inflight.available(), 40, "every permit came back");
    }
    counts
        .iter()
        .map(|[sent, served]| (sent.load(Ordering::Relaxed), served.load(Ordering::Relaxed)))
        .collect()
}

fn tenant(i: usize) -> String {
    format!("tenant-{i}")
}

/// A light tenant's load: a call every 40 ms, offset by its number, of
/// 10 ms, waiting at most 100 ms.
fn light(i: usize) -> Load {
    Load::Open {
        every: Duration::from_millis(40),
        offset: Duration::from_millis(i as u64),
        takes: Duration::from_millis(10),
        max_wait: Duration::from_millis(100),
    }
}

/// Which of tenants 1.. hold exactly tenant-0's pools.
fn twins(tenants: usize) -> Vec<bool> {
    let Gate::Pools(inflight) = Gate::pools() else {
        unreachable!()
    };
    let hung = inflight.shard("tenant-0");
    (0..tenants)
        .map(|i| i > 0 && inflight.shard(tenant(i)).same_set(&hung))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_hung_tenant_starves_only_the_tenants_holding_its_exact_pools() {
    let hung = Load::Closed {
        calls: 40,
        takes: Duration::from_secs(10),
    };
    let others: Vec<(String, Load)> = (1..40).map(|i| (tenant(i), light(i))).collect();
    let with_hung: Vec<(String, Load)> = [(tenant(0), hung)]
        .into_iter()
        .chain(others.clone())
        .collect();

    // Alone, without the hung tenant: every call of every tenant is served.
    let alone = run(&Gate::pools(), &others).await;
    for (i, &(sent, served)) in alone.iter().enumerate() {
        assert_eq!((sent, served), (500, 500), "{} alone", tenant(i + 1));
    }

    let twin = twins(40);
    let pools = run(&Gate::pools(), &with_hung).await;
    let shared = run(&Gate::shared(), &with_hung).await;
    let (mut starved, mut worst, mut best_shared) = (0, 1.0f64, 0.0f64);
    for i in 1..40 {
        let served = |counts: &[(u64, u64)]| counts[i].1 as f64 / alone[i - 1].1 as f64;
        let (sharded, one) = (served(&pools), served(&shared));
        if twin[i] {
            // Its two pools are the hung tenant's: nothing comes through.
            assert!(
                sharded < 0.01,
                "{} holds tenant-0's pools: {sharded}",
                tenant(i)
            );
            starved += 1;
            println!("{}, tenant-0's twin: {sharded:.3}", tenant(i));
        } else {
            worst = worst.min(sharded);
            assert!(
                sharded >= 0.99,
                "{} keeps {sharded} of its throughput",
                tenant(i)
            );
        }
        best_shared = best_shared.max(one);
        // One shared semaphore: the hung tenant holds all 40 permits.
        assert!(
            one < 0.05,
            "{} through one semaphore keeps {one}",
            tenant(i)
        );
    }
    // The hung tenant holds its two pools' 10 permits, never more.
    assert!(pools[0].1 <= 40 + 10, "tenant-0 served {}", pools[0].1);
    // Those starved are the ones the blast radius predicts: 1 in C(8, 2)
    // of the others hold the hung tenant's exact pair. Here 39 / 28 are
    // expected; over many tenants the share is 1/28.
    let blast = BlastRadius::new(8, 2).unwrap();
    assert_eq!(blast.p_identical_exact().to_string(), "1/28");
    assert!(starved <= 5, "{starved} starved of 39");
    let many = twins(28_000).iter().filter(|&&t| t).count() as f64;
    let (mean, sd) = (
        28_000.0 * blast.p_identical(),
        (28_000.0f64 * (1.0 / 28.0) * (27.0 / 28.0)).sqrt(),
    );
    assert!(
        (many - mean).abs() < 4.0 * sd,
        "{many} twins of 28 000, {mean} predicted"
    );
    println!(
        "hung tenant: {starved} of 39 starved (39/28 = 1.4 predicted); the others keep at \
         least {worst:.3}; through one semaphore at most {best_shared:.3}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_tenant_at_twenty_times_the_load_takes_only_its_pools_share() {
    // 20 tenants; every call takes 60 ms. A light tenant sends 10 calls
    // a second (0.6 permits on average), the heavy one 200 (12 permits on
    // average, more than its two pools' 10), each call waiting at most
    // 200 ms.
    let load = |every_us: u64, offset: u64| Load::Open {
        every: Duration::from_micros(every_us),
        offset: Duration::from_millis(offset),
        takes: Duration::from_millis(60),
        max_wait: Duration::from_millis(200),
    };
    let lights: Vec<(String, Load)> = (1..20)
        .map(|i| (tenant(i), load(100_000, 5 * i as u64)))
        .collect();
    let with_heavy: Vec<(String, Load)> = [(tenant(0), load(5_000, 0))]
        .into_iter()
        .chain(lights.clone())
        .collect();
    let alone = run(&Gate::pools(), &lights).await;
    let flooded = run(&Gate::pools(), &with_heavy).await;
    let twins = twins(20);
    for i in 1..20 {
        let kept = flooded[i].1 as f64 / alone[i - 1].1 as f64;
        println!(
            "{}: {kept:.3} of what it gets without the heavy tenant",
            tenant(i)
        );
        if !twins[i] {
            assert!(kept >= 0.9, "{} keeps {kept}", tenant(i));
        }
    }
    // The heavy tenant gets at most its two pools: 10 permits of 60 ms,
    // for the run and the last calls' 200 ms of waiting.
    let most = 10 * (RUN.as_millis() as u64 + 200).div_ceil(60);
    let (sent, served) = flooded[0];
    assert!(
        served <= most,
        "heavy served {served} of {sent}, at most {most}"
    );
    assert!(
        served >= most * 9 / 10,
        "and it uses them: {served} of {most}"
    );
}
