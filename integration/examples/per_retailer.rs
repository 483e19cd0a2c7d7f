//! One limiter per upstream, from a config file: each retailer's API has its
//! own budget, and within each, its own shuffle sharding of your tenants.
//!
//! ```text
//! cargo run -p integration --example per_retailer
//! cargo run -p integration --example per_retailer -- my-limits.toml
//! ```
//!
//! Without an argument it uses the config below. It prints each limiter, then
//! sends a burst of calls for a few tenants to every retailer and shows who
//! was granted what; then shows what a mistake in the config looks like.

use std::error::Error;

use shuffle_limiter::set::{LimiterSet, SetConfig};

const CONFIG: &str = r#"
# Each retailer's API allows all of our tenants together this much.
[limiters.amazon]
rate = "5/s"
burst = 5
buckets = 5
per_tenant = 2

[limiters.walmart]
rate = "600/m"
burst = 20
buckets = 10
per_tenant = 2

[limiters.etsy]
rate = "3600/h"
burst = 8
buckets = 8
per_tenant = 3
"#;

/// Prints an error the way the library words it (`Display`), not `Debug`.
fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn Error>> {
    let text = match std::env::args().nth(1) {
        Some(path) => std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?,
        None => CONFIG.to_owned(),
    };
    let config: SetConfig = toml::from_str(&text)?;
    let set = LimiterSet::from_config(&config)?;

    for name in set.names() {
        let limiter = set.get(name).expect("listed by names()");
        // A quota prints in its own unit: 3600/h, 600/m, burst 20.
        println!(
            "{name:<8} {}, N = {}, k = {}",
            limiter.quota(),
            limiter.buckets(),
            limiter.per_tenant()
        );
        let isolation = limiter.isolation();
        if isolation.is_weak() {
            println!("         {isolation}");
        }
    }

    // The hot path: look the retailer up by name (no lock), then check.
    println!("\n6 calls at once from each tenant, to each retailer (granted/6):");
    let tenants = ["acme", "globex", "initech"];
    print!("{:<8}", "");
    for tenant in tenants {
        print!(" {tenant:>8}");
    }
    println!();
    for retailer in set.names() {
        print!("{retailer:<8}");
        for tenant in tenants {
            let limiter = set.get(retailer).expect("listed by names()");
            let granted = (0..6).filter(|_| limiter.check(tenant).is_ok()).count();
            print!(" {granted:>8}");
        }
        println!();
    }
    println!("(a tenant that shares a bucket with an earlier one finds it partly spent)");

    println!("\nand a typo in a config:");
    let typo = "[limiters.amazon]\nrate = \"5/sec\"\n";
    if let Err(err) = toml::from_str::<SetConfig>(typo) {
        println!("{err}");
    }
    let too_small = "[limiters.amazon]\nrate = \"5/s\"\nbuckets = 8\n";
    if let Err(err) = toml::from_str::<LimiterSet>(too_small) {
        println!("{err}");
    }
    Ok(())
}
