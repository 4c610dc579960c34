//! The HTTP endpoints: `/metrics` (Prometheus text), `/healthz`, `/readyz` and
//! `/check` (freno-compatible throttle check, see [`crate::check`]).
//!
//! hyper's HTTP/1 server: GET and HEAD only, one request per connection (no
//! keep-alive), request heads up to 8 KiB read within 5 s, every connection ended
//! after 15 s whatever it does, and at most 16 connections at a time — the 17th waits
//! in the listen backlog until one ends, so a flood of idle connections cannot exhaust
//! the daemon's file descriptors or memory. That is all a Prometheus scraper, a
//! kubelet probe or a throttle client needs. It never talks to the database: every
//! answer comes from the last [`Snapshot`] the controller published, so a slow or
//! hung server can never make a scrape hang.
//!
//! Binds 127.0.0.1 by default (`[http] listen`); exposing it further is a deliberate
//! act (`--listen 0.0.0.0:29104`, e.g. in a pod, where the kubelet probes the pod IP).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use std::convert::Infallible;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tokio::time::Instant;

use crate::config::CheckConfig;
use crate::metrics::{healthz, readyz, render, Snapshot};

/// How much the endpoints accept.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections served at once; more wait in the listen backlog.
    pub max_connections: usize,
    /// Time a client gets to send its request head.
    pub header_timeout: Duration,
    /// Time after which a connection is closed, whatever it is doing.
    pub deadline: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            // Few: beyond it new connections wait in the kernel's accept queue, which
            // costs innopilot no file descriptor, so a flood of held-open requests
            // can never use up the descriptors the database connection and the
            // restore need.
            max_connections: 16,
            header_timeout: Duration::from_secs(5),
            deadline: Duration::from_secs(15),
        }
    }
}

/// Largest request head accepted (hyper's smallest buffer).
const MAX_HEAD: usize = 8 * 1024;

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
    spawn_with(listener, rx, stale_after, check, Limits::default())
}

/// [`spawn`] with explicit [`Limits`].
pub fn spawn_with(
    listener: TcpListener,
    rx: SnapshotRx,
    stale_after: Duration,
    check: CheckConfig,
    limits: Limits,
) -> tokio::task::JoinHandle<()> {
    let check = Arc::new(check);
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    tokio::spawn(async move {
        loop {
            // The cap: no accept while every slot is taken.
            let Ok(slot) = slots.clone().acquire_owned().await else {
                return;
            };
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
                let _slot = slot;
                let service = service_fn(move |req: hyper::Request<Incoming>| {
                    let snapshot = rx.borrow().clone();
                    let check = check.clone();
                    async move { Ok::<_, Infallible>(answer(&req, &snapshot, stale_after, &check)) }
                });
                let conn = http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(limits.header_timeout)
                    .keep_alive(false)
                    .max_buf_size(MAX_HEAD)
                    .serve_connection(TokioIo::new(stream), service);
                match tokio::time::timeout(limits.deadline, conn).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => tracing::debug!(%peer, "http: {e}"),
                    Err(_) => tracing::debug!(%peer, "http: connection deadline passed"),
                }
            });
        }
    })
}

/// The response to one request, from the snapshot.
fn answer(
    req: &hyper::Request<Incoming>,
    snapshot: &Snapshot,
    stale_after: Duration,
    check: &CheckConfig,
) -> hyper::Response<Full<Bytes>> {
    let r = Request {
        method: req.method().as_str(),
        path: req.uri().path(),
    };
    let (status, ctype, body) = respond(&r, snapshot, Instant::now(), stale_after, check);
    hyper::Response::builder()
        .status(status)
        .header("Content-Type", ctype)
        .header("Cache-Control", "no-store")
        .body(Full::new(Bytes::from(body)))
        .unwrap_or_else(|_| hyper::Response::new(Full::new(Bytes::new())))
}

/// The parts of a request the endpoints look at.
#[derive(Debug, PartialEq, Eq)]
pub struct Request<'a> {
    pub method: &'a str,
    pub path: &'a str,
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
        "/metrics" => (200, "text/plain; version=0.0.4; charset=utf-8", render(s)),
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

/// The address a listener actually got (for `--listen 127.0.0.1:0` in tests and logs).
pub fn local_addr(l: &TcpListener) -> Option<SocketAddr> {
    l.local_addr().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Phase;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

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

    /// The endpoints on a free loopback port with the default limits.
    async fn serve_defaults() -> (
        std::net::SocketAddr,
        watch::Sender<Arc<Snapshot>>,
        tokio::task::JoinHandle<()>,
    ) {
        let listener = bind("127.0.0.1:0").await.unwrap();
        let addr = local_addr(&listener).unwrap();
        let (tx, rx) = watch::channel(Arc::new(Snapshot::default()));
        let task = spawn(
            listener,
            rx,
            Duration::from_secs(5),
            crate::config::Config::default().check,
        );
        (addr, tx, task)
    }

    #[tokio::test]
    async fn serves_over_tcp() {
        let (addr, tx, task) = serve_defaults().await;
        let get = |path: &'static str| get(addr, path);
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

    async fn get(addr: SocketAddr, path: &str) -> String {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    }

    #[tokio::test]
    async fn connections_are_capped_and_idle_ones_closed() {
        let listener = bind("127.0.0.1:0").await.unwrap();
        let addr = local_addr(&listener).unwrap();
        let (_tx, rx) = watch::channel(Arc::new(Snapshot {
            phase: Phase::Running,
            ..Snapshot::default()
        }));
        let task = spawn_with(
            listener,
            rx,
            Duration::from_secs(5),
            crate::config::Config::default().check,
            Limits {
                max_connections: 2,
                header_timeout: Duration::from_millis(1500),
                deadline: Duration::from_secs(10),
            },
        );
        // Two idle connections take both slots: a third request waits.
        let mut idle1 = TcpStream::connect(addr).await.unwrap();
        let idle2 = TcpStream::connect(addr).await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        let waiting = tokio::spawn(get(addr, "/readyz"));
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(!waiting.is_finished(), "served past the cap");
        // An idle connection is closed once its header timeout passes, which frees
        // its slot: the waiting request is answered.
        let mut buf = [0u8; 64];
        let n = tokio::time::timeout(Duration::from_secs(5), idle1.read(&mut buf))
            .await
            .expect("idle connection closed by the header timeout")
            .unwrap_or(0);
        let head = String::from_utf8_lossy(&buf[..n]).to_string();
        assert!(n == 0 || head.starts_with("HTTP/1.1 408"), "{head}");
        let r = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("the waiting request is served once a slot frees")
            .unwrap();
        assert!(r.starts_with("HTTP/1.1 200"), "{r}");
        drop(idle2);
        task.abort();
    }

    #[tokio::test]
    async fn bad_requests_and_large_heads_are_refused() {
        let (addr, _tx, task) = serve_defaults().await;
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GARBAGE\r\n\r\n").await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        assert!(out.starts_with("HTTP/1.1 400"), "{out}");
        let big = format!("GET / HTTP/1.1\r\nX-Pad: {}\r\n\r\n", "a".repeat(20_000));
        let mut s = TcpStream::connect(addr).await.unwrap();
        let _ = s.write_all(big.as_bytes()).await;
        let mut out = String::new();
        let _ = s.read_to_string(&mut out).await;
        assert!(out.is_empty() || out.starts_with("HTTP/1.1 431"), "{out}");
        task.abort();
    }
}
