//! `simulate`'s report as tables.

use std::fmt;

use super::{DOWN_AT_MOST, SimulateReport, UNAFFECTED_AT_LEAST};
use crate::common;

impl fmt::Display for SimulateReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (n, k, t) = (self.buckets, self.per_tenant, self.tenants);
        writeln!(
            f,
            "N = {n}, k = {k}: {t} tenants tenant-0 … tenant-{}; salt = {:?} + seed {} (8 bytes LE)",
            t - 1,
            self.salt,
            self.seed
        )?;
        writeln!(f, "live limiter: {}", self.isolation)?;
        writeln!(
            f,
            "bad tenant tenant-0 has buckets {:?}",
            self.bad_tenant_shard
        )?;
        writeln!(f)?;
        writeln!(f, "buckets shared with tenant-0, over the other {}:", t - 1)?;
        writeln!(f, "  shared    observed      expected         σ        z")?;
        for j in 0..self.observed.len() {
            writeln!(
                f,
                "  {j:<6} {:>11} {:>13.2} {:>9.2} {:>8.2}{}",
                self.observed[j],
                self.expected[j],
                self.sigma[j],
                self.z[j],
                if self.flagged[j] {
                    "   <-- more than 4σ off"
                } else {
                    ""
                }
            )?;
        }
        if self.within_4_sigma {
            writeln!(f, "  every row within 4σ of the expectation")?;
        } else {
            writeln!(f, "  SOME ROWS ARE MORE THAN 4σ FROM THE EXPECTATION")?;
        }
        writeln!(f)?;
        let l = &self.live;
        let seconds = f64::from(l.steps) * l.step_ms as f64 / 1000.0;
        writeln!(
            f,
            "live: {} tenants for {seconds} s on a manual clock ({} steps of {} ms), \
             budget {}/s with burst {}",
            l.tenants, l.steps, l.step_ms, l.rate_per_second, l.burst
        )?;
        writeln!(
            f,
            "  tenant-0 retries until denied every step (granted {}); the others send 1 request \
             every {} ms",
            l.flood_granted, l.request_every_ms
        )?;
        l.predicted.head(f)?;
        let by_label = if self.borrowing.is_some() {
            "by the model (this assignment)"
        } else {
            "by overlap (this assignment)"
        };
        l.by_overlap.row(f, by_label)?;
        l.measured.row(f, "measured (granted share)")?;
        writeln!(
            f,
            "  (measured: fully down if granted <= {:.0}% of requests, unaffected if >= {:.0}%)",
            DOWN_AT_MOST * 100.0,
            UNAFFECTED_AT_LEAST * 100.0
        )?;
        if self.borrowing.is_some() {
            writeln!(
                f,
                "  (with borrowing, by assignment: fully down = its own and spill buckets are \
                 the flooder's;\n   unaffected = none of its own is among the flooder's k+d)"
            )?;
        } else {
            writeln!(
                f,
                "  (degraded = lost 1..k-1 of its buckets; the limiter draws from whichever bucket \
                 has room, so a light load still fits in the rest)"
            )?;
        }
        common::shares_by_overlap(f, &l.mean_share_by_overlap)?;
        common::section(f, self.borrowing.as_ref())?;
        common::section(f, self.redis.as_ref())?;
        common::section(f, self.noisy.as_ref())?;
        common::section(f, self.nested.as_ref())?;
        common::section(f, self.resize.as_ref())?;
        common::section(f, self.hung.as_ref())?;
        Ok(())
    }
}
