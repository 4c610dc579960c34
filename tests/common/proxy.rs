//! A tiny TCP proxy on loopback for fault tests: forwards bytes between innopilot and a
//! private server, and on command stalls (stops forwarding without closing, like a hung
//! server or a black-holed network) or cuts a connection right after it forwarded a
//! `SET GLOBAL` (the server applies it, the client never hears back).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

#[derive(Default)]
pub struct ProxyState {
    /// While true, nothing is forwarded in either direction.
    pub stall: AtomicBool,
    /// While true, a connection is cut right after a `SET GLOBAL` packet has been
    /// forwarded to the server, before its answer can reach the client.
    pub cut_after_set: AtomicBool,
    /// Connections accepted so far.
    pub accepted: AtomicU64,
    /// Connections cut by `cut_after_set`.
    pub cuts: AtomicU64,
    /// Every `SET GLOBAL ...` statement forwarded, in order.
    pub sets: Mutex<Vec<String>>,
}

pub struct Proxy {
    pub port: u16,
    pub state: Arc<ProxyState>,
    task: JoinHandle<()>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Proxy {
    /// Listens on a free loopback port and forwards to `127.0.0.1:upstream`.
    pub async fn start(upstream: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(ProxyState::default());
        let st = state.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    return;
                };
                st.accepted.fetch_add(1, Ordering::SeqCst);
                let st = st.clone();
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)).await else {
                        return;
                    };
                    pump(client, server, st).await;
                });
            }
        });
        Proxy { port, state, task }
    }

    pub fn dsn(&self) -> String {
        format!("mysql://root@127.0.0.1:{}/", self.port)
    }

    pub fn stall(&self, on: bool) {
        self.state.stall.store(on, Ordering::SeqCst);
    }

    pub fn cut_after_set(&self, on: bool) {
        self.state.cut_after_set.store(on, Ordering::SeqCst);
    }

    pub fn sets(&self) -> Vec<String> {
        self.state.sets.lock().unwrap().clone()
    }
}

async fn wait_unstalled(st: &ProxyState) {
    while st.stall.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One direction's reader: what the peer sent, held back while the proxy is stalled
/// (a stall stops traffic without closing anything).
struct Unstalled<R> {
    from: R,
    buf: Vec<u8>,
    st: Arc<ProxyState>,
}

impl<R: AsyncReadExt + Unpin> Unstalled<R> {
    fn new(from: R, st: &Arc<ProxyState>) -> Self {
        Self {
            from,
            buf: vec![0u8; 64 * 1024],
            st: st.clone(),
        }
    }

    /// The next chunk the peer sent; `None` once it closed.
    async fn next(&mut self) -> Option<&[u8]> {
        let n = match self.from.read(&mut self.buf).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => n,
        };
        wait_unstalled(&self.st).await;
        Some(&self.buf[..n])
    }
}

async fn pump(client: TcpStream, server: TcpStream, st: Arc<ProxyState>) {
    let (cr, mut cw) = client.into_split();
    let (sr, mut sw) = server.into_split();
    let mut from_client = Unstalled::new(cr, &st);
    let mut from_server = Unstalled::new(sr, &st);
    // Set when a SET is about to be cut: from then on the server's answer is dropped.
    let cutting = Arc::new(AtomicBool::new(false));
    let cutting_up = cutting.clone();
    let st_up = st.clone();
    let up = async move {
        while let Some(chunk) = from_client.next().await {
            // A COM_QUERY packet: 3-byte length, sequence id, 0x03, then the SQL text.
            let n = chunk.len();
            let is_set = n > 5
                && chunk[4] == 0x03
                && String::from_utf8_lossy(&chunk[5..])
                    .to_ascii_uppercase()
                    .starts_with("SET GLOBAL");
            if is_set {
                st_up
                    .sets
                    .lock()
                    .unwrap()
                    .push(String::from_utf8_lossy(&chunk[5..]).into_owned());
            }
            let cut = is_set && st_up.cut_after_set.load(Ordering::SeqCst);
            if cut {
                cutting_up.store(true, Ordering::SeqCst);
            }
            if sw.write_all(chunk).await.is_err() {
                return;
            }
            if cut {
                // Let the server read and apply it, then drop both directions.
                tokio::time::sleep(Duration::from_millis(100)).await;
                st_up.cuts.fetch_add(1, Ordering::SeqCst);
                return;
            }
        }
    };
    let down = async move {
        while let Some(chunk) = from_server.next().await {
            if cutting.load(Ordering::SeqCst) {
                continue;
            }
            if cw.write_all(chunk).await.is_err() {
                return;
            }
        }
    };
    // Whichever direction ends first ends the connection (a cut closes both halves).
    tokio::select! {
        _ = up => {}
        _ = down => {}
    }
}
