//! The page's own controls, driven in headless Chromium over WebDriver
//! (chromedriver on 127.0.0.1): typing into an input and moving a slider are
//! real events, and the state must follow them; a bad value typed in shows
//! the CLI's message.
//!
//! Without chromium or chromedriver this checks nothing, except under
//! CI=true, where it fails (`scripts/test` installs both).

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use fantoccini::wd::TimeoutConfiguration;
use fantoccini::{Client, ClientBuilder, Locator, key::Key};
use serde_json::{Value, json};

#[path = "support/browser.rs"]
mod browser;
#[path = "support/lab.rs"]
mod lab;

use browser::{TempDir, assert_same, url, write_page};

/// How long one wait for the page's state may take.
const STATE_TIMEOUT: Duration = Duration::from_secs(20);

/// Stops chromedriver however the test ends.
struct Driver(Child);

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts chromedriver on a free loopback port and waits (bounded) for its
/// "started successfully" line.
fn start_driver(path: &std::path::Path) -> (Driver, u16) {
    // The OS picks the port; chromedriver binds it a moment later.
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    let mut child = Command::new(path)
        .args([format!("--port={port}"), "--allowed-ips=127.0.0.1".into()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromedriver starts");
    let stdout = child.stdout.take().unwrap();
    let driver = Driver(child);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if line.contains("started successfully") {
                let _ = tx.send(());
            }
        }
    });
    rx.recv_timeout(Duration::from_secs(30))
        .expect("chromedriver says it started within 30 s");
    (driver, port)
}

/// Waits, inside the page, until `#lab-state` satisfies `condition` (a JS
/// expression over `s`, the parsed state), and returns the state. The wait
/// is a MutationObserver bounded by the session's script timeout: no polling.
async fn state_when(c: &Client, condition: &str) -> Value {
    let script = format!(
        "const done = arguments[arguments.length - 1];
         const el = document.getElementById('lab-state');
         const check = () => {{
           const s = JSON.parse(el.textContent);
           if ({condition}) {{ done(el.textContent); return true; }}
           return false;
         }};
         if (!check()) {{
           const o = new MutationObserver(() => {{ if (check()) o.disconnect(); }});
           o.observe(el, {{ childList: true, characterData: true, subtree: true }});
         }}"
    );
    let text = c
        .execute_async(&script, vec![])
        .await
        .unwrap_or_else(|e| panic!("the state never satisfied {condition}: {e}"));
    serde_json::from_str(text.as_str().unwrap()).unwrap()
}

/// Clears the input `id` and types `keys` into it, as a person would.
async fn type_into(c: &Client, id: &str, keys: &str) {
    let input = c.find(Locator::Id(id)).await.unwrap();
    input.clear().await.unwrap();
    input.send_keys(keys).await.unwrap();
}

#[tokio::test(flavor = "current_thread")]
async fn the_state_follows_the_controls() {
    let Some(chromium) = browser::chromium() else {
        return;
    };
    let Some(chromedriver) = browser::required("/usr/bin/chromedriver", "chromedriver") else {
        return;
    };
    let dir = TempDir::new("controls");
    let page = write_page(&dir.0);
    let (_driver, port) = start_driver(&chromedriver);

    let mut args: Vec<Value> = browser::FLAGS.iter().map(|f| json!(f)).collect();
    args.push(json!(format!(
        "--user-data-dir={}",
        dir.0.join("profile").display()
    )));
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        json!({ "binary": chromium, "args": args }),
    );
    let c = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{port}"))
        .await
        .expect("a WebDriver session");
    let mut timeouts = TimeoutConfiguration::default();
    timeouts.set_script(Some(STATE_TIMEOUT));
    timeouts.set_page_load(Some(browser::LOAD_TIMEOUT));
    c.update_timeouts(timeouts).await.unwrap();

    c.goto(&url(&page, "buckets=16&per-tenant=2&tenants=400&seed=1"))
        .await
        .unwrap();
    let first = state_when(&c, "s.per_tenant === 2").await;
    assert_eq!(first["shards"], "120");

    // Typing k = 3: the state is size --json and simulate --json for k = 3.
    type_into(&c, "per-tenant", "3").await;
    let state = state_when(&c, "s.per_tenant === 3").await;
    let size = lab::json(&[
        "size",
        "--buckets",
        "16",
        "--per-tenant",
        "3",
        "--tenants",
        "400",
    ]);
    for key in [
        "shards",
        "overlap_pmf",
        "overlap_pmf_exact",
        "expected_degraded",
    ] {
        assert_same(&state[key], &size[key], key);
    }
    let sim = lab::json(&[
        "simulate",
        "--buckets",
        "16",
        "--per-tenant",
        "3",
        "--tenants",
        "400",
        "--seed",
        "1",
    ]);
    assert_same(&state["simulate"]["observed"], &sim["observed"], "observed");
    // The slider follows the number typed.
    let slider = c.find(Locator::Id("per-tenant-slider")).await.unwrap();
    assert_eq!(slider.prop("value").await.unwrap().as_deref(), Some("3"));

    // The N slider, moved with the arrow key: N = 17.
    let slider = c.find(Locator::Id("buckets-slider")).await.unwrap();
    slider
        .send_keys(&String::from(char::from(Key::Right)))
        .await
        .unwrap();
    let state = state_when(&c, "s.buckets === 17").await;
    assert_eq!(state["shards"], "680");
    let field = c.find(Locator::Id("buckets")).await.unwrap();
    assert_eq!(field.prop("value").await.unwrap().as_deref(), Some("17"));

    // A bad value typed in: the CLI's message is shown, the state says so.
    type_into(&c, "per-tenant", "40").await;
    let state = state_when(&c, "s.error !== undefined").await;
    let cli = lab::refused(&["size", "--buckets", "17", "--per-tenant", "40"]);
    let cli = cli.trim().strip_prefix("shuffle-lab: error: ").unwrap();
    assert_eq!(state["error"], cli);
    let alert = c.find(Locator::Id("lab-error")).await.unwrap();
    assert!(alert.is_displayed().await.unwrap());
    assert_eq!(alert.text().await.unwrap(), cli);
    // The numbers of the inputs before are gone, not left to be misread.
    let numbers = c.find(Locator::Id("numbers")).await.unwrap();
    assert_eq!(numbers.text().await.unwrap(), "");

    // Fixed again: the message goes, the numbers come back.
    type_into(&c, "per-tenant", "2").await;
    let state = state_when(&c, "s.per_tenant === 2 && s.buckets === 17").await;
    assert_eq!(state["shards"], "136");
    assert!(!alert.is_displayed().await.unwrap());

    c.close().await.unwrap();
}
