//! `plot`: the trade-off of k for one N, drawn as an SVG.

use std::fmt;
use std::path::Path;

use plotters::prelude::*;
use serde::Serialize;

use crate::PlotArgs;
use crate::common::{self, Failure, Flags, usage};

/// The most values of k one plot shows.
const MAX_POINTS: u32 = 512;

const FLAGS: Flags = Flags {
    buckets: "--buckets",
    per_tenant: "--per-tenant-max",
};

/// What `plot` drew: the SVG is drawn from this struct, the JSON is this
/// struct, and the one-line summary is its `Display`.
#[derive(Debug, Serialize)]
pub(crate) struct PlotReport {
    buckets: u32,
    per_tenant_max: u32,
    svg: String,
    /// One point per k, `1..=per_tenant_max`.
    points: Vec<Point>,
}

#[derive(Debug, Clone, Copy, Serialize)]
struct Point {
    per_tenant: u32,
    /// log10 of 1/C(N,k), from the exact count: the probability itself can be
    /// below f64's range, its logarithm never is.
    log10_p_identical: f64,
    bucket_blast_radius: f64,
}

/// Checks the arguments, computes the points, and writes the SVG.
pub(crate) fn run(a: &PlotArgs) -> Result<PlotReport, Failure> {
    let n = a.buckets;
    if n == 0 {
        return Err(common::blast_failure(
            shuffle_limiter::blast::BlastError::NoBuckets,
            FLAGS,
        ));
    }
    // The default always fits; a wrong value can only come from the flag.
    let kmax = a.per_tenant_max.unwrap_or(n.min(16));
    if kmax == 0 {
        return Err(usage(format!(
            "error: --per-tenant-max is 0: set --per-tenant-max between 1 and --buckets ({n})"
        )));
    }
    if kmax > n {
        return Err(usage(format!(
            "error: --per-tenant-max {kmax} is more than --buckets {n}: lower --per-tenant-max \
             to at most {n} or raise --buckets to at least {kmax}"
        )));
    }
    if kmax > MAX_POINTS {
        return Err(usage(format!(
            "error: --per-tenant-max {kmax} is more than a plot can show; lower \
             --per-tenant-max to at most {MAX_POINTS}"
        )));
    }
    let points = (1..=kmax)
        .map(|k| {
            let b = common::radius(n, k, FLAGS)?;
            Ok(Point {
                per_tenant: k,
                log10_p_identical: -b.shards().log10(),
                bucket_blast_radius: b.bucket_blast_radius(),
            })
        })
        .collect::<Result<_, Failure>>()?;
    let report = PlotReport {
        buckets: n,
        per_tenant_max: kmax,
        svg: a.svg.display().to_string(),
        points,
    };
    draw(&report, &a.svg).map_err(|m| Failure {
        message: format!("error: cannot write {}: {m}", a.svg.display()),
        status: 1,
    })?;
    Ok(report)
}

impl fmt::Display for PlotReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "wrote {} (k = 1..={}, N = {})",
            self.svg, self.per_tenant_max, self.buckets
        )
    }
}

/// Draws the two curves of `r` into the file at `path`.
fn draw(r: &PlotReport, path: &Path) -> Result<(), String> {
    let (n, kmax) = (r.buckets, r.per_tenant_max);
    let identical: Vec<(f64, f64)> = r
        .points
        .iter()
        .map(|p| (f64::from(p.per_tenant), p.log10_p_identical))
        .collect();
    let blast: Vec<(f64, f64)> = r
        .points
        .iter()
        .map(|p| (f64::from(p.per_tenant), p.bucket_blast_radius))
        .collect();
    let lowest = identical.iter().map(|&(_, y)| y).fold(0.0f64, f64::min);
    let y_lo = if lowest > -1.0 { -1.0 } else { lowest.floor() };
    let blast_hi = (f64::from(kmax) / f64::from(n) * 1.1).min(1.05);
    let x_range = 0.5..f64::from(kmax) + 0.5;
    let dot = if kmax <= 40 { 4 } else { 0 };

    let e = |e: DrawingAreaErrorKind<_>| e.to_string();
    let root = SVGBackend::new(path, (900, 760)).into_drawing_area();
    root.fill(&WHITE).map_err(e)?;
    let root = root
        .titled(
            &format!("Choosing k with N = {n} buckets"),
            ("sans-serif", 26),
        )
        .map_err(e)?;
    let (upper, lower) = root.split_vertically(370);
    let int_label = |x: &f64| {
        if x.fract() == 0.0 {
            format!("{x:.0}")
        } else {
            String::new()
        }
    };

    let mut chart = ChartBuilder::on(&upper)
        .caption(
            "Chance another tenant has the identical shard, 1/C(N,k): lower is better",
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(80)
        .build_cartesian_2d(x_range.clone(), y_lo..0.0)
        .map_err(e)?;
    chart
        .configure_mesh()
        .x_desc("k, buckets per tenant")
        .y_desc("P(identical shard), log scale")
        .x_labels(kmax.min(20) as usize + 2)
        .x_label_formatter(&int_label)
        // One label per decade while that stays readable.
        .y_labels(if y_lo >= -12.0 {
            (1.0 - y_lo) as usize
        } else {
            12
        })
        .y_label_formatter(&|y| match *y {
            y if y.fract() != 0.0 => String::new(),
            0.0 => "1".to_owned(),
            y => format!("1e{y:.0}"),
        })
        .light_line_style(TRANSPARENT)
        .axis_desc_style(("sans-serif", 16))
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(e)?;
    chart
        .draw_series(LineSeries::new(
            identical.iter().copied(),
            BLUE.stroke_width(2),
        ))
        .map_err(e)?;
    chart
        .draw_series(PointSeries::of_element(
            identical.iter().copied(),
            dot,
            BLUE.filled(),
            &|c, s, st| Circle::new(c, s, st),
        ))
        .map_err(e)?;

    let mut chart = ChartBuilder::on(&lower)
        .caption(
            "Share of all tenants one exhausted bucket touches, k/N: lower is better",
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(80)
        .build_cartesian_2d(x_range, 0.0..blast_hi)
        .map_err(e)?;
    chart
        .configure_mesh()
        .x_desc("k, buckets per tenant")
        .y_desc("bucket blast radius k/N")
        .x_labels(kmax.min(20) as usize + 2)
        .x_label_formatter(&int_label)
        .y_label_formatter(&|y| format!("{:.0}%", y * 100.0))
        .axis_desc_style(("sans-serif", 16))
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(e)?;
    chart
        .draw_series(LineSeries::new(blast.iter().copied(), RED.stroke_width(2)))
        .map_err(e)?;
    chart
        .draw_series(PointSeries::of_element(
            blast.iter().copied(),
            dot,
            RED.filled(),
            &|c, s, st| Circle::new(c, s, st),
        ))
        .map_err(e)?;
    root.present().map_err(e)?;
    Ok(())
}
