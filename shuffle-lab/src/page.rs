//! `page`: the lab as one self-contained HTML page (inline CSS and
//! JavaScript, nothing fetched), written to a file or stdout, or served on
//! the loopback interface by a tiny blocking HTTP server.
//!
//! The page computes everything itself, in the browser: the exact numbers
//! of `size` (BigInt), the plot of `plot`, and a sample of the assignment as
//! `simulate` draws it (SHA-256 and the rendezvous ranking of
//! docs/assignment.md). Its sources are `page/lab.html`, `page/lab.css` and
//! the scripts beside them.
//!
//! The inputs are named as the flags (`buckets`, `per-tenant`, `tenants`,
//! `noisy`, `borrow-from`, `lender-reserve`, `per-user`, `seed`, `salt`) and
//! read from the URL query; a blank seed means the salt alone, as the
//! known-answer vectors use it. The element `#lab-state` holds what the page
//! shows as JSON: the keys of `size --json` for those inputs, plus `sample`
//! (`[[tenant, [buckets…]], …]`), `simulate` (`bad_tenant_shard`,
//! `observed`, `expected`, `sigma`, `z` as `simulate --json` has them, over
//! the `tenants` drawn of `of_tenants`), `plot` (as `plot --json`), `salt`,
//! `seed`, and `sample_note` when no sample could be drawn; or `{"error": …}`
//! for bad input, which the page also shows. The sample is capped (at most
//! 2^20 scores and 5000 tenants per update) so that a large N stays
//! responsive; the math is not.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::time::Duration;

use crate::PageArgs;
use crate::common::{Failure, usage};

const HTML: &str = include_str!("page/lab.html");
const CSS: &str = include_str!("page/lab.css");
/// The scripts, in the order they run: each uses only what comes before it.
const SCRIPTS: [&str; 3] = [
    include_str!("page/math.js"),
    include_str!("page/assign.js"),
    include_str!("page/ui.js"),
];

/// The longest request head the server reads; a browser's is far shorter.
const MAX_HEAD: u64 = 16 * 1024;
/// How long the server waits for one client's request before dropping it.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(5);

/// The whole page, CSS and scripts inlined.
pub(crate) fn html() -> String {
    HTML.replacen("/*LAB_CSS*/", CSS, 1)
        .replacen("/*LAB_JS*/", &SCRIPTS.join("\n"), 1)
}

/// Writes the page to `--out`, or to stdout without it; or serves it with
/// `--serve` (which returns only when the server cannot start).
pub(crate) fn run(a: &PageArgs) -> Result<String, Failure> {
    if let Some(addr) = a.serve {
        return serve(addr).map(|()| String::new());
    }
    let page = html();
    match &a.out {
        None => Ok(page),
        Some(path) => {
            write(path, &page)?;
            Ok(format!(
                "wrote {} ({} bytes): open it in a browser, from disk\n",
                path.display(),
                page.len()
            ))
        }
    }
}

fn write(path: &Path, page: &str) -> Result<(), Failure> {
    std::fs::write(path, page).map_err(|e| Failure {
        message: format!("error: cannot write {}: {e}", path.display()),
        status: 1,
    })
}

/// Serves the page at `addr`, a loopback address, until the process is
/// stopped. Prints the address it listens on (the OS's choice for port 0).
fn serve(addr: SocketAddr) -> Result<(), Failure> {
    if !addr.ip().is_loopback() {
        return Err(usage(format!(
            "error: --serve {addr} is not a loopback address: the lab serves on this machine \
             only; use 127.0.0.1:PORT (or [::1]:PORT)"
        )));
    }
    let listener = TcpListener::bind(addr).map_err(|e| Failure {
        message: format!("error: cannot listen on {addr}: {e}"),
        status: 1,
    })?;
    let local = listener.local_addr().map_err(|e| Failure {
        message: format!("error: cannot read the address listened on: {e}"),
        status: 1,
    })?;
    let page = html();
    let mut out = io::stdout().lock();
    // The line a script waits for; Ctrl-C stops the server.
    let _ = writeln!(out, "serving the lab at http://{local}/ (Ctrl-C stops)");
    let _ = out.flush();
    drop(out);
    // One bad client must not stop the server: its error is dropped with it.
    for stream in listener.incoming().flatten() {
        let _ = answer(stream, &page);
    }
    Ok(())
}

/// Reads one request head and answers it: the page for `GET /` or
/// `GET /lab.html` (any query), 404 for another path, 405 for another method.
fn answer(stream: TcpStream, page: &str) -> io::Result<()> {
    stream.set_read_timeout(Some(CLIENT_TIMEOUT))?;
    stream.set_write_timeout(Some(CLIENT_TIMEOUT))?;
    let mut reader = BufReader::new(stream.try_clone()?.take(MAX_HEAD));
    let mut request = String::new();
    reader.read_line(&mut request)?;
    // The rest of the head, up to the blank line, within MAX_HEAD.
    let mut line = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line)? == 0 || line == "\r\n" || line == "\n" {
            break;
        }
    }
    let (status, body, kind) = respond(&request, page);
    let mut stream = stream;
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\n\
         Cache-Control: no-store\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    if !request.starts_with("HEAD ") {
        stream.write_all(body.as_bytes())?;
    }
    stream.flush()
}

/// Status line, body and content type for a request line.
fn respond<'a>(request: &str, page: &'a str) -> (&'static str, &'a str, &'static str) {
    let mut parts = request.split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split(['?', '#']).next().unwrap_or("");
    const TEXT: &str = "text/plain; charset=utf-8";
    match (method, path) {
        ("GET" | "HEAD", "/" | "/lab.html") => ("200 OK", page, "text/html; charset=utf-8"),
        ("GET" | "HEAD", _) => ("404 Not Found", "not found: the lab is at /\n", TEXT),
        _ => ("405 Method Not Allowed", "only GET\n", TEXT),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every part is inlined once, and no script can end its element early.
    #[test]
    fn the_page_is_whole() {
        let page = html();
        assert!(!page.contains("/*LAB_CSS*/") && !page.contains("/*LAB_JS*/"));
        assert!(page.contains(CSS));
        for s in SCRIPTS {
            assert!(page.contains(s));
            assert!(!s.to_ascii_lowercase().contains("</script"));
        }
        assert_eq!(page.matches("<script").count(), 1);
        // Nothing comes from the network.
        assert!(!page.contains("src=\"http") && !page.contains("href=\"http"));
    }

    #[test]
    fn requests_get_the_page_or_a_status() {
        let page = "<p>lab</p>";
        assert_eq!(respond("GET / HTTP/1.1\r\n", page).0, "200 OK");
        assert_eq!(
            respond("GET /lab.html?buckets=8 HTTP/1.1\r\n", page).1,
            page
        );
        assert_eq!(
            respond("GET /etc/passwd HTTP/1.1\r\n", page).0,
            "404 Not Found"
        );
        assert_eq!(
            respond("POST / HTTP/1.1\r\n", page).0,
            "405 Method Not Allowed"
        );
        assert_eq!(respond("", page).0, "405 Method Not Allowed");
    }
}
