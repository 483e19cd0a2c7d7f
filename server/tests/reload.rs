//! Reloads: the buckets of rules that stay keep their state, a rate or N
//! changed applies live, a bad config keeps the old one, and the file is
//! watched.

mod support;

use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use support::*;

fn config(rate: &str, extra: &str) -> String {
    format!(
        r#"
domain: d
descriptors:
  - key: k
    value: v
    rate_limit: {{rate: "{rate}"}}
{extra}"#
    )
}

const OTHER: &str = r#"  - key: other
    rate_limit: {rate: "1/h"}
    shuffle: {buckets: 1}
"#;

#[tokio::test]
async fn a_reload_keeps_the_state_of_a_rule_that_stays() {
    let file = ConfigFile::new(&config("5/h", ""));
    let server = serve(&file).await;
    let mut client = client(&server).await;
    let asked = request("d", &[("k", "v")], 1);
    assert_eq!(codes(&mut client, &asked, 3).await, [Code::Ok; 3]);
    // Another rule added: k=v keeps its 2 tokens left, not a fresh 5.
    file.write(&config("5/h", OTHER));
    server.reload().await.unwrap();
    assert_eq!(
        codes(&mut client, &asked, 3).await,
        [Code::Ok, Code::Ok, Code::OverLimit]
    );
    let other = request("d", &[("other", "x")], 1);
    assert_eq!(
        codes(&mut client, &other, 2).await,
        [Code::Ok, Code::OverLimit]
    );
    server.shutdown().await;
}

#[tokio::test]
async fn a_new_rate_applies_live_keeping_the_share_used() {
    let file = ConfigFile::new(&config("4/h", ""));
    let server = serve(&file).await;
    let mut client = client(&server).await;
    let asked = request("d", &[("k", "v")], 1);
    assert_eq!(codes(&mut client, &asked, 2).await, [Code::Ok; 2]);
    // Half of 4 used; at 8 the bucket holds half of 8: 4 more, not 8.
    file.write(&config("8/h", ""));
    server.reload().await.unwrap();
    let after = codes(&mut client, &asked, 6).await;
    assert_eq!(
        after.iter().filter(|&&c| c == Code::Ok).count(),
        4,
        "{after:?}"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn a_bad_reload_keeps_the_old_config_and_counts_the_error() {
    let file = ConfigFile::new(&config("2/h", ""));
    let server = serve(&file).await;
    let mut client = client(&server).await;
    let asked = request("d", &[("k", "v")], 1);
    assert_eq!(code(&ask(&mut client, asked.clone()).await), Code::Ok);
    file.write(&config("2/w", ""));
    let err = server.reload().await.unwrap_err().to_string();
    assert!(err.contains(".yaml:6:"), "{err}");
    assert!(err.contains("descriptors[0].rate_limit.rate: "), "{err}");
    // The old rule, with its state: 1 token left.
    assert_eq!(
        codes(&mut client, &asked, 2).await,
        [Code::Ok, Code::OverLimit]
    );
    let errors = r#"shuffle_limiter_server_reloads_total{result="error"}"#;
    assert_eq!(metric(&server, errors).await, Some(1.0));
    server.shutdown().await;
}

#[tokio::test]
async fn a_changed_file_is_read_again() {
    let file = ConfigFile::new(&config("1/h", ""));
    let mut options = options(&file);
    options.watch = Some(Duration::from_millis(20));
    let server = shuffle_limiter_server::start(options).await.unwrap();
    let mut client = client(&server).await;
    let asked = request("d", &[("k", "v")], 1);
    assert_eq!(
        codes(&mut client, &asked, 2).await,
        [Code::Ok, Code::OverLimit]
    );
    // Unlimited now. The file system's clock may be coarse: write until
    // the server has read it, bounded.
    let ok = r#"shuffle_limiter_server_reloads_total{result="ok"}"#;
    let mut read = false;
    for _ in 0..200 {
        file.write("domain: d\ndescriptors:\n  - key: k\n    value: v\n    rate_limit: {unlimited: true}\n");
        tokio::time::sleep(Duration::from_millis(25)).await;
        if metric(&server, ok).await >= Some(1.0) {
            read = true;
            break;
        }
    }
    assert!(read, "the watch never reloaded");
    assert_eq!(code(&ask(&mut client, asked).await), Code::Ok);
    server.shutdown().await;
}

#[cfg(unix)]
#[tokio::test]
async fn sighup_reloads() {
    let file = ConfigFile::new(&config("1/h", ""));
    let mut options = options(&file);
    // The handler is installed before start returns, so the signal below
    // cannot end the test process.
    options.sighup = true;
    let server = shuffle_limiter_server::start(options).await.unwrap();
    let ok = r#"shuffle_limiter_server_reloads_total{result="ok"}"#;
    assert_eq!(metric(&server, ok).await, Some(0.0));
    let pid = std::process::id().to_string();
    let sent = std::process::Command::new("kill")
        .args(["-HUP", &pid])
        .status()
        .unwrap();
    assert!(sent.success());
    let mut reloaded = false;
    for _ in 0..200 {
        if metric(&server, ok).await >= Some(1.0) {
            reloaded = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(reloaded, "SIGHUP did not reload");
    server.shutdown().await;
}
