//! Changing `limits.toml` while a load runs: the partner raises us from
//! 200/s to 800/s, then an incident cuts us to 100/s, and each change takes
//! effect at once, with no burst handed out on the way.
//!
//! ```text
//! cargo run -p integration --example reload
//! ```
//!
//! The load, 20 tenants asking 2000 requests/s in all, runs on a simulated
//! clock (`ManualClock`), so the run is instant and its numbers exact; the
//! config file is real, written to a temporary directory and read back
//! after each change.

use std::fs;
use std::sync::Arc;
use std::time::Duration;

use shuffle_limiter::set::{LimiterSet, SetConfig};
use shuffle_limiter::{ManualClock, ShardedLimiter};

/// The file as an operator would write it.
fn limits(rate: &str) -> String {
    format!(
        "# The partner's budget for all our tenants together.\n\
         [limiters.partner]\n\
         rate = \"{rate}\"\n\
         burst = 100\n"
    )
}

/// One simulated second of the load, in 10 ms steps: how many were granted.
fn one_second(partner: &ShardedLimiter<ManualClock>, clock: &ManualClock) -> u32 {
    let mut granted = 0;
    for _ in 0..100 {
        clock.advance(Duration::from_millis(10));
        for tenant in 0..20 {
            granted += u32::from(partner.check(format!("tenant-{tenant}")).is_ok());
        }
    }
    granted
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("shuffle-limiter-reload-{}", std::process::id()));
    fs::create_dir_all(&dir)?;
    let path = dir.join("limits.toml");
    let read = || -> Result<SetConfig, Box<dyn std::error::Error>> {
        Ok(toml::from_str(&fs::read_to_string(&path)?)?)
    };

    fs::write(&path, limits("200/s"))?;
    let clock = ManualClock::new();
    let mut set = LimiterSet::from_config_with_clock(&read()?, clock.clone())?;
    // What a layer or a worker holds: the limiter itself, kept across
    // reloads.
    let partner = Arc::clone(set.get("partner").expect("in limits.toml"));

    println!(
        "{}: {}",
        path.display(),
        limits("200/s").lines().nth(2).unwrap_or("")
    );
    println!("\nsecond  rate in force  granted");
    let changes = [(3, "800/s"), (6, "100/s")];
    let mut rate = "200/s";
    for second in 0..9 {
        if let Some(&(_, new)) = changes.iter().find(|(at, _)| *at == second) {
            fs::write(&path, limits(new))?;
            let reload = set.reload(&read()?, clock.clone())?;
            println!(
                "        limits.toml now says rate = \"{new}\": changed {:?}",
                reload.changed()
            );
            set = reload.into_set();
            rate = new;
        }
        println!(
            "{second:>6}  {rate:>13}  {:>7}",
            one_second(&partner, &clock)
        );
    }
    println!(
        "\nThe first second spends the burst of 100 too. After each change the\n\
         limiter grants the new rate at once (give or take a token per bucket\n\
         where a second's edges cut its intervals): a raise does not wait, and\n\
         neither change hands out a fresh burst, as a rebuilt limiter would."
    );
    fs::remove_dir_all(&dir)?;
    Ok(())
}
