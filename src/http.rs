//! The HTTP endpoints: `/metrics` (Prometheus text), `/healthz`, `/readyz` and
//! `/check` (freno-compatible throttle check, see [`crate::check`]).
//!
//! A deliberately tiny HTTP/1.x server on a tokio `TcpListener`: GET and HEAD only, one
//! request per connection (`Connection: close`), request heads up to 8 KiB read within
//! 5 s. That is all a Prometheus scraper and a kubelet probe need, and it keeps a web
//! framework (and its compile time) out of a daemon whose job is elsewhere. It never
//! talks to the database: every answer comes from the last [`Snapshot`] the controller
//! published, so a slow or hung server can never make a scrape hang.
//!
//! Binds 127.0.0.1 by default (`[http] listen`); exposing it further is a deliberate
//! act (`--listen 0.0.0.0:29104`, e.g. in a pod, where the kubelet probes the pod IP).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::config::CheckConfig;
use crate::metrics::{healthz, readyz, render, Snapshot};

/// Largest request head accepted.
const MAX_HEAD: usize = 8 * 1024;
/// Time a client gets to send its request head.
const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// Time a client gets to take the answer.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// Where the endpoints read from: the controller publishes, the server reads.
pub type SnapshotRx = watch::Receiver<Arc<Snapshot>>;

/// An HTTP failure at start (the address cannot be bound).
#[derive(Debug, thiserror::Error)]
#[error("cannot listen on {addr} for /metrics and health checks: {source} (set [http] listen, --listen, or [http] enabled = false)")]
pub struct BindError {
    pub addr: String,
    #[source]
    pub source: std::io::Error,
}

/// Binds the listener. Done before the controller starts, so a taken port fails fast,
/// before anything on the database is touched.
pub async fn bind(addr: &str) -> Result<TcpListener, BindError> {
    TcpListener::bind(addr).await.map_err(|source| BindError {
        addr: addr.to_string(),
        source,
    })
}

/// Serves until the task is dropped or aborted. `stale_after` is the `/healthz` limit,
/// `check` the `/check` limits.
pub fn spawn(
    listener: TcpListener,
    rx: SnapshotRx,
    stale_after: Duration,
    check: CheckConfig,
) -> tokio::task::JoinHandle<()> {
    let check = Arc::new(check);
    tokio::spawn(async move {
        loop {
            let (stream, peer) = match listener.accept().await {
                Ok(c) => c,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    tracing::warn!("http accept: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let rx = rx.clone();
            let check = check.clone();
            tokio::spawn(async move {
                if let Err(e) = handle(stream, &rx, stale_after, &check).await {
                    tracing::debug!(%peer, "http: {e}");
                }
            });
        }
    })
}

/// A parsed request line.
#[derive(Debug, PartialEq, Eq)]
pub struct Request<'a> {
    pub method: &'a str,
    pub path: &'a str,
}

/// Parses the request line of a head; `None` when it is not HTTP.
pub fn parse_request(head: &str) -> Option<Request<'_>> {
    let line = head.lines().next()?;
    let mut parts = line.split(' ');
    let method = parts.next()?;
    let target = parts.next()?;
    let version = parts.next()?;
    if !version.starts_with("HTTP/1.") || parts.next().is_some() {
        return None;
    }
    // Query strings are ignored: `/metrics?x=y` is `/metrics`.
    let path = target.split('?').next().unwrap_or(target);
    Some(Request { method, path })
}

/// Status, content type and body for a request, from a snapshot.
pub fn respond(
    req: &Request<'_>,
    s: &Snapshot,
    now: Instant,
    stale_after: Duration,
    check: &CheckConfig,
) -> (u16, &'static str, String) {
    const TEXT: &str = "text/plain; charset=utf-8";
    if req.method != "GET" && req.method != "HEAD" {
        return (405, TEXT, "only GET and HEAD\n".into());
    }
    // freno's clients ask `/check/<app>/<store-type>/<store-name>`: one answer for all.
    if check.enabled && (req.path == "/check" || req.path.starts_with("/check/")) {
        let v = crate::check::check(s, now, stale_after, check);
        return (v.status, "application/json", format!("{}\n", v.body));
    }
    match req.path {
        "/metrics" => (
            200,
            "text/plain; version=0.0.4; charset=utf-8",
            render(s, now),
        ),
        "/healthz" => {
            let h = healthz(s, now, stale_after);
            (if h.ok { 200 } else { 503 }, TEXT, h.message + "\n")
        }
        "/readyz" => {
            let h = readyz(s);
            (if h.ok { 200 } else { 503 }, TEXT, h.message + "\n")
        }
        "/" => (
            200,
            TEXT,
            "innopilot: /metrics (Prometheus), /healthz (fresh samples), /readyz (started), \
             /check (may background work proceed: 200 or 429)\n"
                .into(),
        ),
        _ => (
            404,
            TEXT,
            "not found: try /metrics, /healthz or /readyz\n".into(),
        ),
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        429 => "Too Many Requests",
        405 => "Method Not Allowed",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        _ => "Unknown",
    }
}

async fn read_head(stream: &mut TcpStream) -> std::io::Result<Option<String>> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
        if buf.windows(4).any(|w| w == b"\r\n\r\n") || buf.windows(2).any(|w| w == b"\n\n") {
            break;
        }
        if buf.len() > MAX_HEAD {
            return Ok(None);
        }
    }
    Ok(Some(String::from_utf8_lossy(&buf).into_owned()))
}

async fn handle(
    mut stream: TcpStream,
    rx: &SnapshotRx,
    stale_after: Duration,
    check: &CheckConfig,
) -> std::io::Result<()> {
    let head = match tokio::time::timeout(READ_TIMEOUT, read_head(&mut stream)).await {
        Err(_) => return Ok(()),
        Ok(r) => r?,
    };
    let snapshot = rx.borrow().clone();
    let (status, ctype, body, head_only) = match head.as_deref().map(parse_request) {
        None => (
            431,
            "text/plain",
            "request head too large\n".to_string(),
            false,
        ),
        Some(None) => (400, "text/plain", "bad request\n".to_string(), false),
        Some(Some(req)) => {
            let (s, c, b) = respond(&req, &snapshot, Instant::now(), stale_after, check);
            (s, c, b, req.method == "HEAD")
        }
    };
    let mut out = format!(
        "HTTP/1.1 {status} {}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n",
        reason(status),
        body.len()
    );
    if !head_only {
        out.push_str(&body);
    }
    tokio::time::timeout(WRITE_TIMEOUT, async {
        stream.write_all(out.as_bytes()).await?;
        stream.shutdown().await
    })
    .await
    .unwrap_or(Ok(()))
}

/// The address a listener actually got (for `--listen 127.0.0.1:0` in tests and logs).
pub fn local_addr(l: &TcpListener) -> Option<SocketAddr> {
    l.local_addr().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Phase;

    #[test]
    fn request_lines() {
        assert_eq!(
            parse_request("GET /metrics?a=b HTTP/1.1\r\nHost: x\r\n\r\n"),
            Some(Request {
                method: "GET",
                path: "/metrics"
            })
        );
        assert_eq!(parse_request("GARBAGE"), None);
        assert_eq!(parse_request("GET / SPDY/3\r\n\r\n"), None);
    }

    #[test]
    fn routes() {
        let now = Instant::now();
        let s = Snapshot {
            phase: Phase::Running,
            connected: true,
            last_sample: Some(now),
            ..Snapshot::default()
        };
        let get = |p| Request {
            method: "GET",
            path: p,
        };
        let d = Duration::from_secs(5);
        let c = crate::config::Config::default().check;
        assert_eq!(respond(&get("/healthz"), &s, now, d, &c).0, 200);
        assert_eq!(respond(&get("/readyz"), &s, now, d, &c).0, 200);
        assert_eq!(respond(&get("/nope"), &s, now, d, &c).0, 404);
        let (code, ctype, body) = respond(&get("/metrics"), &s, now, d, &c);
        assert_eq!(code, 200);
        assert!(ctype.contains("0.0.4") && body.contains("innopilot_up 1"));
        let post = Request {
            method: "POST",
            path: "/metrics",
        };
        assert_eq!(respond(&post, &s, now, d, &c).0, 405);
        let stale = now + Duration::from_secs(6);
        assert_eq!(respond(&get("/healthz"), &s, stale, d, &c).0, 503);
        // freno's paths; no signals yet but a fresh sample: nothing is over a limit.
        let (code, ctype, body) = respond(&get("/check/gh-ost/mysql/main"), &s, now, d, &c);
        assert_eq!((code, ctype), (200, "application/json"), "{body}");
        assert_eq!(respond(&get("/check"), &s, stale, d, &c).0, 503);
        let off = crate::config::CheckConfig {
            enabled: false,
            ..c.clone()
        };
        assert_eq!(respond(&get("/check"), &s, now, d, &off).0, 404);
    }

    #[tokio::test]
    async fn serves_over_tcp() {
        let listener = bind("127.0.0.1:0").await.unwrap();
        let addr = local_addr(&listener).unwrap();
        let (tx, rx) = watch::channel(Arc::new(Snapshot::default()));
        let task = spawn(
            listener,
            rx,
            Duration::from_secs(5),
            crate::config::Config::default().check,
        );
        let get = |path: &'static str| async move {
            let mut s = TcpStream::connect(addr).await.unwrap();
            s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
                .await
                .unwrap();
            let mut out = String::new();
            s.read_to_string(&mut out).await.unwrap();
            out
        };
        assert!(get("/readyz").await.starts_with("HTTP/1.1 503"));
        tx.send_replace(Arc::new(Snapshot {
            phase: Phase::Running,
            ..Snapshot::default()
        }));
        let r = get("/readyz").await;
        assert!(
            r.starts_with("HTTP/1.1 200") && r.ends_with("ready\n"),
            "{r}"
        );
        task.abort();
    }
}
