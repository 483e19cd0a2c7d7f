//! Headless Chromium for the tests of `shuffle-lab page`: where it is, the
//! page written by the real binary, and its `#lab-state` read back.
#![allow(dead_code)] // each user takes what it needs

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::Value;

/// The longest one page load may take, however loaded the machine is.
pub(crate) const LOAD_TIMEOUT: Duration = Duration::from_secs(90);

/// The flags of every headless run: no GPU, no network beyond file:// and
/// loopback, no first-run or background work.
pub(crate) const FLAGS: &[&str] = &[
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
];

/// `path` when it is an executable file here, else the first `name` on PATH.
fn find(path: &str, name: &str) -> Option<PathBuf> {
    let direct = PathBuf::from(path);
    if direct.is_file() {
        return Some(direct);
    }
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
}

/// A program the browser tests need, `None` (with a note) when it is missing
/// on a developer's machine; under CI=true a missing one fails the test, so
/// that a CI without it never passes by skipping.
pub(crate) fn required(path: &str, name: &str) -> Option<PathBuf> {
    let found = find(path, name);
    if found.is_none() {
        let ci = std::env::var("CI").is_ok_and(|v| v == "true");
        assert!(
            !ci,
            "{name} is missing and CI=true: scripts/test installs it (apt-get install chromium \
             chromium-driver)"
        );
        eprintln!("note: {name} is missing, so this browser test checks nothing here");
    }
    found
}

/// Debian's Chromium.
pub(crate) fn chromium() -> Option<PathBuf> {
    required("/usr/bin/chromium", "chromium")
}

/// A fresh directory of this test process, removed on drop.
pub(crate) struct TempDir(pub(crate) PathBuf);

impl TempDir {
    pub(crate) fn new(tag: &str) -> TempDir {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "shuffle-lab-{tag}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Writes the page with the real binary, `shuffle-lab page --out`.
pub(crate) fn write_page(dir: &Path) -> PathBuf {
    let path = dir.join("lab.html");
    let out = Command::new(env!("CARGO_BIN_EXE_shuffle-lab"))
        .args(["page", "--out"])
        .arg(&path)
        .output()
        .expect("the shuffle-lab binary runs");
    assert!(
        out.status.success(),
        "page --out failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    path
}

/// The `file://` URL of `page` with `query` (already URL-encoded).
pub(crate) fn url(page: &Path, query: &str) -> String {
    format!("file://{}?{query}", page.display())
}

/// Waits for `child` to print everything and exit, at most [`LOAD_TIMEOUT`];
/// kills it past that. Its stdout.
pub(crate) fn output_within(mut child: Child, what: &str) -> String {
    let mut stdout = child.stdout.take().expect("stdout is piped");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut s = Vec::new();
        let r = stdout.read_to_end(&mut s).map(|_| s);
        let _ = tx.send(r);
    });
    let got = rx.recv_timeout(LOAD_TIMEOUT);
    if got.is_err() {
        let _ = child.kill();
    }
    let _ = child.wait();
    let bytes = got
        .unwrap_or_else(|_| panic!("{what} took more than {LOAD_TIMEOUT:?}"))
        .expect("reading the browser's output");
    String::from_utf8(bytes).expect("the DOM is UTF-8")
}

/// Loads `url` headless and returns the DOM as it stands after the load
/// (the page computes its state synchronously on load).
pub(crate) fn dump_dom(chromium: &Path, profile: &Path, url: &str) -> String {
    let child = Command::new(chromium)
        .args(FLAGS)
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("--dump-dom")
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromium starts");
    output_within(child, &format!("chromium --dump-dom {url}"))
}

/// The text of the element whose opening tag starts with `open`, with the
/// HTML serializer's escapes of a text node undone.
pub(crate) fn element_text(dom: &str, open: &str) -> Option<String> {
    let start = dom.find(open)?;
    let body = &dom[start..];
    let body = &body[body.find('>')? + 1..];
    let end = body.find("</")?;
    Some(
        body[..end]
            .replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&nbsp;", "\u{a0}")
            .replace("&amp;", "&"),
    )
}

/// The page's `#lab-state`, parsed.
pub(crate) fn lab_state(dom: &str) -> Value {
    let text = element_text(dom, "<pre id=\"lab-state\"")
        .unwrap_or_else(|| panic!("no #lab-state in the page: {dom}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("#lab-state is not JSON ({e}): {text}"))
}

/// Whether two JSON values are equal, numbers compared as `f64`s exactly
/// (JavaScript writes `0` where serde writes `0.0`). Panics with the path
/// of the first difference.
#[track_caller]
pub(crate) fn assert_same(got: &Value, want: &Value, path: &str) {
    match (got, want) {
        (Value::Number(a), Value::Number(b)) => {
            assert_eq!(a.as_f64(), b.as_f64(), "{path}: page {a}, CLI {b}");
        }
        (Value::Array(a), Value::Array(b)) => {
            assert_eq!(a.len(), b.len(), "{path}: page {got}, CLI {want}");
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                assert_same(x, y, &format!("{path}[{i}]"));
            }
        }
        (Value::Object(a), Value::Object(b)) => {
            let (ka, kb): (Vec<_>, Vec<_>) = (a.keys().collect(), b.keys().collect());
            assert_eq!(ka, kb, "{path}: the keys differ");
            for (k, v) in a {
                assert_same(v, &b[k], &format!("{path}.{k}"));
            }
        }
        _ => assert_eq!(got, want, "{path}"),
    }
}
