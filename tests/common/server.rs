//! The private `mariadbd` process: building its command line, starting it on a free
//! loopback port (retrying when another process takes the port), waiting until root
//! can log in, restarting, stopping (SIGTERM, then SIGKILL) and `Drop`. A server also
//! gets SIGKILL when the test process dies without unwinding (`PR_SET_PDEATHSIG`).
//! DSNs and connection options live here too; queries are in `sql.rs`.

use std::ffi::OsString;
use std::fmt::Write as _;
use std::future::Future;
use std::io;
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::str::FromStr;
use std::sync::atomic::AtomicU64;
use std::sync::{mpsc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use sqlx::mysql::MySqlConnectOptions;
use sqlx::{ConnectOptions, Connection, Executor, Row};

use super::sql::bounded;
use super::template::{copy_dir, required_binary, template_datadir, SERVER_DIR_PREFIX, SETUP_HINT};

/// How long a server may take to accept connections after it was spawned.
pub const DEFAULT_READY_TIMEOUT: Duration = Duration::from_secs(30);

/// How long `stop()` (and `Drop`) wait after SIGTERM before using SIGKILL.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(30);

const READY_POLL: Duration = Duration::from_millis(100);
const DEFAULT_BUFFER_POOL_SIZE: &str = "64M";
const DEFAULT_LOG_FILE_SIZE: &str = "32M";
/// Attempts with a fresh port when another process took the chosen one.
const PORT_ATTEMPTS: usize = 8;

// ---------------------------------------------------------------------------------------
// libc bits (std links libc already; no extra dependency)

pub(super) mod sys {
    use std::os::raw::{c_int, c_uint, c_ulong};

    extern "C" {
        fn kill(pid: c_int, sig: c_int) -> c_int;
        fn geteuid() -> c_uint;
        fn prctl(option: c_int, ...) -> c_int;
    }

    pub const SIGTERM: c_int = 15;
    pub const SIGKILL: c_int = 9;
    const PR_SET_PDEATHSIG: c_int = 1;

    pub fn signal(pid: u32, sig: c_int) -> std::io::Result<()> {
        // SAFETY: plain syscall wrapper.
        if unsafe { kill(pid as c_int, sig) } == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    }

    pub fn is_root() -> bool {
        // SAFETY: plain syscall wrapper.
        unsafe { geteuid() == 0 }
    }

    /// Async-signal-safe: called between fork and exec.
    pub fn die_with_parent() -> std::io::Result<()> {
        // SAFETY: plain syscall wrapper; prctl(PR_SET_PDEATHSIG, sig).
        if unsafe { prctl(PR_SET_PDEATHSIG, SIGKILL as c_ulong) } == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    }
}

/// Spawns from one thread that lives as long as the process, so `PR_SET_PDEATHSIG`
/// (which fires when the *thread* that forked exits) only fires when the test process
/// dies. Test threads and tokio blocking threads come and go; servers must not.
fn spawn_process(mut cmd: Command) -> io::Result<Child> {
    type Request = (Command, mpsc::Sender<io::Result<Child>>);
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<Request>>> = OnceLock::new();
    // SAFETY: the closure only makes one async-signal-safe syscall.
    unsafe {
        cmd.pre_exec(sys::die_with_parent);
    }
    let sender = SPAWNER
        .get_or_init(|| {
            let (tx, rx) = mpsc::channel::<Request>();
            std::thread::Builder::new()
                .name("mariadb-spawner".into())
                .spawn(move || {
                    for (mut cmd, reply) in rx {
                        let _ = reply.send(cmd.spawn());
                    }
                })
                .expect("spawning the mariadb-spawner thread");
            Mutex::new(tx)
        })
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let (reply_tx, reply_rx) = mpsc::channel();
    sender
        .send((cmd, reply_tx))
        .expect("mariadb-spawner thread is gone");
    reply_rx.recv().expect("mariadb-spawner thread is gone")
}

/// A free loopback port (never 3306). Another process may still take it before the
/// server binds it; [`MariaDbBuilder::start`] retries with a new port in that case.
pub fn free_port() -> u16 {
    loop {
        let l = TcpListener::bind("127.0.0.1:0").expect("binding 127.0.0.1:0");
        let port = l.local_addr().expect("local_addr").port();
        if port != 3306 {
            return port;
        }
    }
}

// ---------------------------------------------------------------------------------------
// The server

/// Settings for a private server; see [`MariaDb::builder`].
#[derive(Clone, Debug)]
pub struct MariaDbBuilder {
    buffer_pool_size: String,
    log_file_size: String,
    extra_args: Vec<String>,
    ready_timeout: Duration,
}

impl Default for MariaDbBuilder {
    fn default() -> Self {
        Self {
            buffer_pool_size: DEFAULT_BUFFER_POOL_SIZE.into(),
            log_file_size: DEFAULT_LOG_FILE_SIZE.into(),
            extra_args: Vec::new(),
            ready_timeout: DEFAULT_READY_TIMEOUT,
        }
    }
}

impl MariaDbBuilder {
    /// `--innodb-buffer-pool-size` (default `64M`).
    pub fn buffer_pool_size(mut self, size: impl Into<String>) -> Self {
        self.buffer_pool_size = size.into();
        self
    }

    /// `--innodb-log-file-size` (default `32M`); the template is installed with it.
    pub fn log_file_size(mut self, size: impl Into<String>) -> Self {
        self.log_file_size = size.into();
        self
    }

    /// An extra `mariadbd` argument, e.g. `--innodb-purge-threads=1`. Later arguments
    /// win over the harness's defaults.
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.extra_args.push(arg.into());
        self
    }

    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.extra_args.extend(args.into_iter().map(Into::into));
        self
    }

    /// How long to wait for the server to accept connections (default 30 s).
    pub fn ready_timeout(mut self, timeout: Duration) -> Self {
        self.ready_timeout = timeout;
        self
    }

    /// Installs a datadir, starts the server and waits until it accepts connections.
    /// Panics (with the error log's tail) if it does not come up.
    pub fn start(self) -> MariaDb {
        let mariadbd = required_binary("mariadbd");
        required_binary("mariadb-install-db");
        let template = template_datadir(&mariadbd, &self.log_file_size);

        let dir = tempfile::Builder::new()
            .prefix(SERVER_DIR_PREFIX)
            .tempdir()
            .expect("creating a temporary directory for mariadbd");
        let root = dir.path().to_path_buf();
        let datadir = root.join("data");
        copy_dir(&template, &datadir);
        let tmpdir = root.join("tmp");
        std::fs::create_dir(&tmpdir).expect("creating mariadbd tmpdir");
        let socket = root.join("mysqld.sock");
        // sun_path is 108 bytes including the NUL.
        assert!(
            socket.as_os_str().len() < 100,
            "socket path {} is too long for a unix socket; set TMPDIR to a shorter directory",
            socket.display()
        );

        let mut db = MariaDb {
            pid_file: root.join("mysqld.pid"),
            error_log: root.join("error.log"),
            socket,
            datadir,
            tmpdir,
            port: 0,
            child: None,
            mariadbd,
            config: self,
            dir: Some(dir),
            table_rows: AtomicU64::new(0),
        };
        db.start_with_port_retries(true);
        db
    }
}

/// A private `mariadbd` with its own datadir, socket and loopback port.
/// Stopped and removed on drop.
pub struct MariaDb {
    child: Option<Child>,
    port: u16,
    socket: PathBuf,
    datadir: PathBuf,
    tmpdir: PathBuf,
    pid_file: PathBuf,
    error_log: PathBuf,
    mariadbd: PathBuf,
    config: MariaDbBuilder,
    /// Rows of `test.t` made by `prepare_table`, so the load knows its ids at once.
    pub(super) table_rows: AtomicU64,
    /// Removed on drop, after `Drop::drop` stopped the server.
    dir: Option<tempfile::TempDir>,
}

impl MariaDb {
    /// A server with the default settings (64M buffer pool, 32M redo log).
    pub fn new() -> Self {
        Self::builder().start()
    }

    pub fn builder() -> MariaDbBuilder {
        MariaDbBuilder::default()
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn socket_path(&self) -> &Path {
        &self.socket
    }

    pub fn datadir(&self) -> &Path {
        &self.datadir
    }

    /// The temporary directory holding datadir, socket, pid file and error log.
    pub fn root_dir(&self) -> &Path {
        self.datadir.parent().expect("datadir has a parent")
    }

    pub fn error_log_path(&self) -> &Path {
        &self.error_log
    }

    /// The whole error log (all starts of this server).
    pub fn error_log(&self) -> String {
        std::fs::read(&self.error_log)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }

    /// The last `lines` lines of the error log.
    pub fn error_log_tail(&self, lines: usize) -> String {
        tail(&self.error_log(), lines)
    }

    /// `mysql://root@127.0.0.1:<port>/`: root over TCP, empty password.
    pub fn dsn(&self) -> String {
        format!("mysql://root@127.0.0.1:{}/", self.port)
    }

    /// The DSN for another account over TCP.
    pub fn user_dsn(&self, user: &str, password: &str) -> String {
        if password.is_empty() {
            format!("mysql://{}@127.0.0.1:{}/", url_encode(user), self.port)
        } else {
            format!(
                "mysql://{}:{}@127.0.0.1:{}/",
                url_encode(user),
                url_encode(password),
                self.port
            )
        }
    }

    /// A DSN for root over the unix socket (sqlx's `?socket=` form).
    pub fn socket_dsn(&self) -> String {
        format!(
            "mysql://root@localhost/?socket={}",
            url_encode(&self.socket.to_string_lossy())
        )
    }

    /// Connection options for root over TCP.
    pub fn connect_options(&self) -> MySqlConnectOptions {
        MySqlConnectOptions::from_str(&self.dsn()).expect("harness DSN parses")
    }

    /// The server's pid while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether the mariadbd process is still running (reaps it if it exited).
    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut() {
            None => false,
            Some(c) => match c.try_wait() {
                Ok(None) => true,
                Ok(Some(_)) | Err(_) => {
                    self.child = None;
                    false
                }
            },
        }
    }

    /// Starts the server again on the same datadir and port (after `stop` or `kill`).
    /// Panics if it is already running or does not come up.
    pub fn start(&mut self) {
        assert!(
            !self.is_running(),
            "MariaDb::start: the server is already running"
        );
        self.start_with_port_retries(false);
    }

    /// Clean shutdown: SIGTERM, wait up to [`STOP_TIMEOUT`]; panics (after SIGKILL) if
    /// the server did not stop in time. Does nothing if it is not running.
    pub fn stop(&mut self) {
        if !self.is_running() {
            return;
        }
        let pid = self.pid().expect("running server has a pid");
        let _ = sys::signal(pid, sys::SIGTERM);
        if self.wait_exit(STOP_TIMEOUT).is_none() {
            self.kill();
            panic!(
                "mariadbd (pid {pid}) did not stop within {STOP_TIMEOUT:?} of SIGTERM; killed it.\n{}",
                self.error_log_tail(30)
            );
        }
    }

    /// Crash: SIGKILL and reap. Does nothing if it is not running.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            let c = self.child.as_mut()?;
            match c.try_wait() {
                Ok(Some(status)) => {
                    self.child = None;
                    return Some(status);
                }
                Ok(None) => {}
                Err(_) => {
                    self.child = None;
                    return None;
                }
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn command(&self) -> Command {
        let mut cmd = Command::new(&self.mariadbd);
        let mut args: Vec<OsString> = vec!["--no-defaults".into()];
        if sys::is_root() {
            args.push("--user=root".into());
        }
        let path_arg = |name: &str, p: &Path| {
            let mut s = OsString::from(format!("--{name}="));
            s.push(p.as_os_str());
            s
        };
        args.push(path_arg("datadir", &self.datadir));
        args.push(path_arg("socket", &self.socket));
        args.push(format!("--port={}", self.port).into());
        args.push("--bind-address=127.0.0.1".into());
        args.push(path_arg("pid-file", &self.pid_file));
        args.push(path_arg("log-error", &self.error_log));
        args.push(path_arg("tmpdir", &self.tmpdir));
        args.push("--skip-name-resolve".into());
        args.push("--skip-log-bin".into());
        args.push(format!("--innodb-buffer-pool-size={}", self.config.buffer_pool_size).into());
        args.push(format!("--innodb-log-file-size={}", self.config.log_file_size).into());
        // Faster start and stop; irrelevant to what the tests observe.
        args.push("--innodb-buffer-pool-load-at-startup=OFF".into());
        args.push("--innodb-buffer-pool-dump-at-shutdown=OFF".into());
        args.extend(self.config.extra_args.iter().map(OsString::from));
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        cmd
    }

    /// `fresh`: the port is not fixed yet, so a port taken by someone else is replaced.
    /// Otherwise (restart) the same port is retried for a while.
    fn start_with_port_retries(&mut self, fresh: bool) {
        let mut attempt = 0;
        let restart_deadline = Instant::now() + Duration::from_secs(10);
        loop {
            attempt += 1;
            if fresh {
                self.port = free_port();
            }
            match self.start_once() {
                Ok(()) => return,
                Err(StartError::PortInUse) if fresh && attempt < PORT_ATTEMPTS => continue,
                Err(StartError::PortInUse) if !fresh && Instant::now() < restart_deadline => {
                    std::thread::sleep(Duration::from_millis(250));
                    continue;
                }
                Err(StartError::PortInUse) => panic!(
                    "mariadbd could not bind 127.0.0.1:{} (address in use) after {attempt} attempt(s)\n--- error log tail ({}) ---\n{}",
                    self.port,
                    self.error_log.display(),
                    self.error_log_tail(30)
                ),
                Err(StartError::Other(msg)) => panic!(
                    "{msg}\n--- error log tail ({}) ---\n{}",
                    self.error_log.display(),
                    self.error_log_tail(40)
                ),
            }
        }
    }

    fn start_once(&mut self) -> Result<(), StartError> {
        let log_offset = std::fs::metadata(&self.error_log)
            .map(|m| m.len())
            .unwrap_or(0);
        let started = Instant::now();
        let child = spawn_process(self.command()).map_err(|e| {
            StartError::Other(format!(
                "spawning {}: {e}; {SETUP_HINT}",
                self.mariadbd.display()
            ))
        })?;
        self.child = Some(child);
        let timeout = self.config.ready_timeout;
        let deadline = started + timeout;
        loop {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                self.child = None;
                let new_log = read_from(&self.error_log, log_offset);
                if new_log.contains("Address already in use")
                    || new_log.contains("Do you already have another server running")
                {
                    return Err(StartError::PortInUse);
                }
                return Err(StartError::Other(format!(
                    "mariadbd exited with {status} before accepting connections (port {}, datadir {})",
                    self.port,
                    self.datadir.display()
                )));
            }
            // mariadbd logs this right before its accept loop. Watching the log rather
            // than probing the socket keeps "Aborted connection" warnings (from probes
            // that give up before logging in) out of the error log tests may read.
            if self.socket.exists()
                && read_from(&self.error_log, log_offset).contains("ready for connections")
            {
                break;
            }
            if Instant::now() >= deadline {
                self.kill();
                return Err(StartError::Other(format!(
                    "mariadbd did not get ready for connections within {timeout:?}; killed it"
                )));
            }
            std::thread::sleep(READY_POLL);
        }
        // Make sure root can log in over TCP, as tests will.
        let opts = self.connect_options();
        let who = block_on_fresh_runtime(async move {
            let mut conn = bounded("connect (startup check)", opts.connect())
                .await
                .map_err(|e| e.to_string())?;
            let row = bounded(
                "SELECT CURRENT_USER()",
                conn.fetch_one(sqlx::raw_sql("SELECT CURRENT_USER()")),
            )
            .await
            .map_err(|e| e.to_string())?;
            let who: Option<String> = row.try_get_unchecked(0).map_err(|e| e.to_string())?;
            let _ = conn.close().await;
            Ok::<_, String>(who.unwrap_or_default())
        });
        match who {
            Ok(_) => Ok(()),
            Err(e) => {
                self.kill();
                Err(StartError::Other(format!(
                    "mariadbd is up but `{}` cannot log in over TCP: {e}",
                    self.dsn()
                )))
            }
        }
    }
}

impl Drop for MariaDb {
    fn drop(&mut self) {
        let panicking = std::thread::panicking();
        if let Some(c) = self.child.as_mut() {
            if matches!(c.try_wait(), Ok(None)) {
                if panicking {
                    // The test failed already: no need for a clean shutdown.
                    let _ = c.kill();
                    let _ = c.wait();
                } else {
                    let _ = sys::signal(c.id(), sys::SIGTERM);
                    if self.wait_exit(STOP_TIMEOUT).is_none() {
                        self.kill();
                    }
                }
            }
        }
        self.kill();
        if panicking {
            eprintln!(
                "--- mariadbd error log tail ({}) ---\n{}",
                self.error_log.display(),
                self.error_log_tail(20)
            );
        }
        if std::env::var_os("INNOPILOT_KEEP_TEST_SERVERS")
            .is_some_and(|v| !v.is_empty() && v != "0")
        {
            if let Some(dir) = self.dir.take() {
                eprintln!("keeping test server directory {}", dir.keep().display());
            }
        }
    }
}

enum StartError {
    PortInUse,
    Other(String),
}

fn read_from(path: &Path, offset: u64) -> String {
    let bytes = std::fs::read(path).unwrap_or_default();
    let start = usize::try_from(offset).unwrap_or(0).min(bytes.len());
    String::from_utf8_lossy(&bytes[start..]).into_owned()
}

fn tail(s: &str, lines: usize) -> String {
    let v: Vec<&str> = s.lines().collect();
    v[v.len().saturating_sub(lines)..].join("\n")
}

/// Runs a future to completion on a new current-thread runtime in a new thread, so it
/// works whether or not the caller is inside a tokio runtime.
fn block_on_fresh_runtime<F>(fut: F) -> F::Output
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("building a tokio runtime")
            .block_on(fut)
    })
    .join()
    .expect("harness helper thread panicked")
}

fn url_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}
