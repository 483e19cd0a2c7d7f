//! Runs the built `shuffle-lab plot` and checks the SVG it writes and the
//! points it lists.

use std::path::PathBuf;

#[path = "support/lab.rs"]
mod lab;
use lab::{assert_close, json, run, text};

/// A path in the temp directory that no other test run uses.
fn temp_svg(tag: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    std::env::temp_dir().join(format!(
        "shuffle-lab-{tag}-{}-{nanos}.svg",
        std::process::id()
    ))
}

/// Runs `shuffle-lab plot` with `args` and `--svg` a fresh path, asserts that
/// it succeeded, and returns the SVG it wrote (the file is removed).
fn plot_svg(tag: &str, args: &[&str]) -> String {
    let path = temp_svg(tag);
    let mut argv = vec!["plot"];
    argv.extend_from_slice(args);
    argv.extend_from_slice(&["--svg", path.to_str().unwrap()]);
    let out = run(&argv);
    let svg = std::fs::read_to_string(&path);
    let _ = std::fs::remove_file(&path);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    svg.expect("the SVG was written")
}

#[test]
fn plot_writes_an_svg() {
    let svg = plot_svg("plot", &["--buckets", "16"]);
    assert!(svg.starts_with("<svg"), "{}", &svg[..80.min(svg.len())]);
    assert!(svg.trim_end().ends_with("</svg>"));
    assert!(svg.contains("k, buckets per tenant"));
    assert!(svg.contains("P(identical shard)"));
    assert!(svg.contains("bucket blast radius"));
    assert!(svg.contains("<circle"), "points are drawn");

    // Far below f64's range the curve is still drawn (it plots the exponent).
    let svg = plot_svg(
        "plot-wide",
        &["--buckets", "2000", "--per-tenant-max", "512"],
    );
    assert!(svg.contains("1e-400"), "the axis reaches below f64's range");
}

#[test]
fn plot_json_lists_the_points_it_drew() {
    let path = temp_svg("plot-json");
    let p = path.to_str().unwrap();
    let table = text(&[
        "plot",
        "--buckets",
        "12",
        "--per-tenant-max",
        "5",
        "--svg",
        p,
    ]);
    let v = json(&[
        "plot",
        "--buckets",
        "12",
        "--per-tenant-max",
        "5",
        "--svg",
        p,
    ]);
    let svg = std::fs::read_to_string(&path);
    let _ = std::fs::remove_file(&path);
    assert!(svg.expect("the SVG was written").contains("<circle"));
    assert_eq!(
        table,
        format!(
            "wrote {} (k = 1..={}, N = {})\n",
            v["svg"].as_str().unwrap(),
            v["per_tenant_max"],
            v["buckets"]
        )
    );
    let points = v["points"].as_array().unwrap();
    assert_eq!(points.len(), 5);
    for (i, pt) in points.iter().enumerate() {
        let k = i as u64 + 1;
        assert_eq!(pt["per_tenant"], k);
        assert_close(&pt["bucket_blast_radius"], k as f64 / 12.0);
    }
    // 1/C(12, 1) = 1/12 and 1/C(12, 5) = 1/792, as exponents.
    assert_close(&points[0]["log10_p_identical"], -(12f64.log10()));
    assert_close(&points[4]["log10_p_identical"], -(792f64.log10()));
}
