//! Real-server test harness: private, throw-away MariaDB servers for integration tests.
//!
//! Include it from an integration test with `mod common;`.
//!
//! Every [`MariaDb`] is a separate `mariadbd` process with its own temporary directory
//! (datadir, socket, pid file, error log), listening on a free loopback port chosen at
//! start (never 3306). The system MariaDB service is never used or touched: the server
//! runs with `--no-defaults`, so no `my.cnf` is read.
//!
//! * Datadirs are copied (`cp -a`) from a pristine template made once with
//!   `mariadb-install-db` and kept under `$CARGO_TARGET_TMPDIR`, keyed by the server
//!   version, the redo log size and [`TEMPLATE_REVISION`].
//! * Authentication: `root@127.0.0.1` and `root@localhost` have an empty password
//!   (`--auth-root-authentication-method=normal`), so [`MariaDb::dsn`] is
//!   `mysql://root@127.0.0.1:<port>/`. Anonymous accounts, the `root@<hostname>` rows and
//!   the default grants of the `PUBLIC` role on the `test` and `test\_%` databases are
//!   removed from the template, so an account made by [`MariaDb::create_user`] has exactly
//!   the privileges it is given.
//! * The server is shut down (SIGTERM, then SIGKILL after a timeout; SIGKILL at once
//!   when the test is panicking) and its directory removed in `Drop`. A server also gets
//!   SIGKILL if the test process dies without unwinding (`PR_SET_PDEATHSIG`).
//!   Set `INNOPILOT_KEEP_TEST_SERVERS=1` to keep the directories for debugging.
//! * When `mariadbd` or `mariadb-install-db` is missing the harness panics with
//!   [`SETUP_HINT`]: tests fail, they never skip.
//! * Every query made by the harness is bounded by [`QUERY_TIMEOUT`].
#![allow(dead_code)]

pub mod proxy;
pub mod run;
pub mod tls;

use std::collections::HashMap;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::future::Future;
use std::io;
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use sqlx::mysql::{MySqlConnectOptions, MySqlConnection};
use sqlx::{ConnectOptions, Connection, Executor, Row};

/// What a failing test says when the MariaDB binaries are not installed.
pub const SETUP_HINT: &str = "run scripts/setup.sh (installs Debian's mariadb-server and sysbench)";

/// Upper bound for any single query or connection attempt made by the harness.
pub const QUERY_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a server may take to accept connections after it was spawned.
pub const DEFAULT_READY_TIMEOUT: Duration = Duration::from_secs(30);

/// How long `stop()` (and `Drop`) wait after SIGTERM before using SIGKILL.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(30);

/// Bump when the template's contents change (install flags, cleanup SQL).
pub const TEMPLATE_REVISION: u32 = 2;

const READY_POLL: Duration = Duration::from_millis(100);
const DEFAULT_BUFFER_POOL_SIZE: &str = "64M";
const DEFAULT_LOG_FILE_SIZE: &str = "32M";
/// Attempts with a fresh port when another process took the chosen one.
const PORT_ATTEMPTS: usize = 8;

/// Runs after the system tables are filled in, in bootstrap mode.
const TEMPLATE_CLEANUP_SQL: &str = "\
DELETE FROM mysql.global_priv WHERE User = '';
DELETE FROM mysql.global_priv WHERE User = 'root' AND Host NOT IN ('localhost', '127.0.0.1', '::1');
DELETE FROM mysql.proxies_priv WHERE Host NOT IN ('localhost', '127.0.0.1', '::1');
DELETE FROM mysql.db WHERE User = 'PUBLIC';
";

/// Path of the `innopilot` binary built by cargo for this test run.
pub fn innopilot_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_innopilot"))
}

// ---------------------------------------------------------------------------------------
// libc bits (std links libc already; no extra dependency)

mod sys {
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

// ---------------------------------------------------------------------------------------
// Binaries and the datadir template

fn find_binary(name: &str) -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    // Non-root users often lack the sbin directories in PATH; mariadbd lives in /usr/sbin.
    for d in [
        "/usr/local/sbin",
        "/usr/local/bin",
        "/usr/sbin",
        "/usr/bin",
        "/sbin",
        "/bin",
    ] {
        dirs.push(PathBuf::from(d));
    }
    dirs.into_iter().map(|d| d.join(name)).find(|p| {
        use std::os::unix::fs::PermissionsExt;
        p.metadata()
            .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false)
    })
}

/// Finds an executable on PATH (plus the sbin directories) or panics with [`SETUP_HINT`].
pub fn required_binary(name: &str) -> PathBuf {
    find_binary(name).unwrap_or_else(|| {
        panic!("`{name}` was not found on PATH nor in /usr/sbin, /usr/bin: {SETUP_HINT}")
    })
}

fn mariadbd_version(mariadbd: &Path) -> String {
    let out = Command::new(mariadbd)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "running `{} --version`: {e}; {SETUP_HINT}",
                mariadbd.display()
            )
        });
    assert!(
        out.status.success(),
        "`{} --version` failed: {}; {SETUP_HINT}",
        mariadbd.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn stable_hash(parts: &[&str]) -> u64 {
    // FNV-1a: stable across runs and toolchains, unlike DefaultHasher's promise.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for b in p.bytes().chain(std::iter::once(0u8)) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

fn unique_suffix() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{}-{nanos}", std::process::id())
}

/// A pristine datadir for `log_file_size`, installed once and shared (read-only) by all
/// servers of all test processes of this target directory.
fn template_datadir(mariadbd: &Path, log_file_size: &str) -> PathBuf {
    static TEMPLATES: OnceLock<Mutex<HashMap<String, PathBuf>>> = OnceLock::new();
    let mut cache = TEMPLATES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some(p) = cache.get(log_file_size) {
        return p.clone();
    }

    if cache.is_empty() {
        remove_abandoned_server_dirs();
    }
    let install_db = required_binary("mariadb-install-db");
    let version = mariadbd_version(mariadbd);
    let key = stable_hash(&[
        &version,
        &mariadbd.to_string_lossy(),
        &install_db.to_string_lossy(),
        log_file_size,
        &TEMPLATE_REVISION.to_string(),
        if sys::is_root() { "root" } else { "user" },
    ]);
    let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("innopilot-mariadb-templates");
    std::fs::create_dir_all(&root).unwrap_or_else(|e| panic!("creating {}: {e}", root.display()));
    let final_dir = root.join(format!("{key:016x}"));
    if !final_dir.join("data").is_dir() {
        install_template(&install_db, &root, &final_dir, log_file_size, &version);
    }
    cache.insert(log_file_size.to_string(), final_dir.join("data"));
    final_dir.join("data")
}

fn install_template(
    install_db: &Path,
    root: &Path,
    final_dir: &Path,
    log_file_size: &str,
    version: &str,
) {
    // Install next to the final place, then rename: the final directory only ever
    // appears complete, even with several test processes racing.
    remove_stale_work_dirs(root);
    let work = root.join(format!("tmp-{}", unique_suffix()));
    std::fs::create_dir_all(&work).unwrap_or_else(|e| panic!("creating {}: {e}", work.display()));
    let sql = work.join("cleanup.sql");
    std::fs::write(&sql, TEMPLATE_CLEANUP_SQL).expect("writing template cleanup SQL");
    std::fs::write(
        work.join("VERSION"),
        format!("{version}\nlog_file_size={log_file_size}\n"),
    )
    .expect("writing template VERSION");
    let data = work.join("data");
    // A private tmpdir: at startup every mariadbd deletes all `#sql*` files in its
    // tmpdir, so a bootstrap using /tmp loses its temporary tables whenever another
    // server (another test, another developer's scratch server) starts meanwhile.
    let tmpdir = work.join("tmp");
    std::fs::create_dir_all(&tmpdir).expect("creating the bootstrap tmpdir");

    let mut cmd = Command::new(install_db);
    cmd.arg("--no-defaults")
        // --force: skip `resolveip $(hostname)`, which fails or hangs on hosts without DNS.
        .arg("--force")
        .arg("--auth-root-authentication-method=normal")
        .arg(format!("--datadir={}", data.display()))
        .arg(format!("--innodb-log-file-size={log_file_size}"))
        .arg(format!("--extra-file={}", sql.display()))
        .arg(format!("--tmpdir={}", tmpdir.display()));
    if sys::is_root() {
        cmd.arg("--user=root");
    }
    let started = Instant::now();
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}; {SETUP_HINT}", install_db.display()));
    if !out.status.success() {
        let _ = std::fs::remove_dir_all(&work);
        panic!(
            "mariadb-install-db failed ({}) after {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            out.status,
            started.elapsed(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let _ = std::fs::remove_dir_all(&tmpdir);
    match std::fs::rename(&work, final_dir) {
        Ok(()) => {}
        // Another process won the race: use its template.
        Err(_) if final_dir.join("data").is_dir() => {
            let _ = std::fs::remove_dir_all(&work);
        }
        Err(e) => panic!(
            "renaming {} to {}: {e}",
            work.display(),
            final_dir.display()
        ),
    }
}

/// Leftovers of installs whose process died (an install takes seconds).
fn remove_stale_work_dirs(root: &Path) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for e in entries.flatten() {
        let old = e
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > Duration::from_secs(600));
        if old && e.file_name().to_string_lossy().starts_with("tmp-") {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

const SERVER_DIR_PREFIX: &str = "innopilot-mdb-";

/// Directories of servers whose test process was killed (SIGKILL skips `Drop`; the
/// server itself dies with it through PR_SET_PDEATHSIG): older than an hour and no
/// live mariadbd behind their pid file.
fn remove_abandoned_server_dirs() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for e in entries.flatten() {
        if !e
            .file_name()
            .to_string_lossy()
            .starts_with(SERVER_DIR_PREFIX)
        {
            continue;
        }
        let old = e
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > Duration::from_secs(3600));
        let live = std::fs::read_to_string(e.path().join("mysqld.pid"))
            .ok()
            .and_then(|p| p.trim().parse::<u32>().ok())
            .is_some_and(|pid| Path::new(&format!("/proc/{pid}")).exists());
        if old && !live {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

fn copy_dir(from: &Path, to: &Path) {
    let out = Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("running cp: {e}"));
    assert!(
        out.status.success(),
        "cp -a {} {} failed: {}",
        from.display(),
        to.display(),
        String::from_utf8_lossy(&out.stderr)
    );
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
    table_rows: AtomicU64,
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

    // ----- SQL helpers -----------------------------------------------------------------

    /// A new connection as root over TCP. Panics on failure or after [`QUERY_TIMEOUT`].
    pub async fn connect(&self) -> MySqlConnection {
        let opts = self.connect_options();
        bounded("connect", opts.connect())
            .await
            .unwrap_or_else(|e| panic!("connecting to {}: {e}", self.dsn()))
    }

    /// A new connection as root over the unix socket.
    pub async fn connect_socket(&self) -> MySqlConnection {
        let opts = MySqlConnectOptions::new()
            .socket(&self.socket)
            .username("root");
        bounded("connect (socket)", opts.connect())
            .await
            .unwrap_or_else(|e| panic!("connecting to {}: {e}", self.socket.display()))
    }

    /// Runs `sql` (one or more statements, text protocol) on a new root connection.
    /// Returns the rows affected.
    pub async fn try_exec(&self, sql: &str) -> Result<u64, HarnessError> {
        let mut conn = bounded("connect", self.connect_options().connect()).await?;
        let r = exec_on(&mut conn, sql).await;
        let _ = bounded("close", conn.close()).await;
        r
    }

    /// Like [`Self::try_exec`] but panics on error.
    pub async fn exec(&self, sql: &str) -> u64 {
        self.try_exec(sql)
            .await
            .unwrap_or_else(|e| panic!("exec `{sql}` failed: {e}"))
    }

    /// First column of the first row as text (any column type); `None` when there is no
    /// row or the value is NULL. Panics on error.
    pub async fn query_scalar_string(&self, sql: &str) -> Option<String> {
        let mut conn = self.connect().await;
        let r = scalar_string_on(&mut conn, sql)
            .await
            .unwrap_or_else(|e| panic!("query `{sql}` failed: {e}"));
        let _ = bounded("close", conn.close()).await;
        r
    }

    /// All rows, every column as text (NULL as `None`). Panics on error.
    pub async fn query_rows(&self, sql: &str) -> Vec<Vec<Option<String>>> {
        let mut conn = self.connect().await;
        let r = rows_on(&mut conn, sql)
            .await
            .unwrap_or_else(|e| panic!("query `{sql}` failed: {e}"));
        let _ = bounded("close", conn.close()).await;
        r
    }

    /// `SHOW GLOBAL STATUS LIKE name`, parsed as an integer. Panics if missing.
    pub async fn status_u64(&self, name: &str) -> u64 {
        let sql = format!("SHOW GLOBAL STATUS LIKE '{}'", sql_escape(name));
        let rows = self.query_rows(&sql).await;
        let v = rows
            .first()
            .and_then(|r| r.get(1).cloned().flatten())
            .unwrap_or_else(|| panic!("status variable {name} not found"));
        v.parse()
            .unwrap_or_else(|e| panic!("status variable {name}={v:?} is not an integer: {e}"))
    }

    /// `@@GLOBAL.name` as text.
    pub async fn global_variable(&self, name: &str) -> Option<String> {
        assert!(
            name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "bad variable name {name:?}"
        );
        self.query_scalar_string(&format!("SELECT @@GLOBAL.{name}"))
            .await
    }

    /// `Innodb_history_list_length`.
    pub async fn history_list_length(&self) -> u64 {
        self.status_u64("Innodb_history_list_length").await
    }

    /// Creates `name`@`127.0.0.1` (what a TCP login matches under --skip-name-resolve)
    /// with `password` and runs `GRANT <g> TO` it for each entry of `grants`, e.g.
    /// `["PROCESS ON *.*", "SELECT ON test.*"]`. Returns the account's DSN.
    pub async fn create_user(&self, name: &str, password: &str, grants: &[&str]) -> String {
        let account = format!("'{}'@'127.0.0.1'", sql_escape(name));
        let mut sql = format!(
            "CREATE USER {account} IDENTIFIED BY '{}';\n",
            sql_escape(password)
        );
        for g in grants {
            let _ = writeln!(sql, "GRANT {g} TO {account};");
        }
        self.exec(&sql).await;
        self.user_dsn(name, password)
    }

    // ----- Load helpers ----------------------------------------------------------------

    /// (Re)creates `test.t(id INT PRIMARY KEY, k INT, pad CHAR(60))` with ids `1..=rows`
    /// and `k = 0`, so `SUM(k)` counts the updates made by [`Self::spawn_update_load`].
    pub async fn prepare_table(&self, rows: u64) {
        let mut conn = self.connect().await;
        let ddl = "CREATE DATABASE IF NOT EXISTS test;
DROP TABLE IF EXISTS test.t;
CREATE TABLE test.t (id INT PRIMARY KEY, k INT, pad CHAR(60)) ENGINE=InnoDB;";
        exec_on(&mut conn, ddl)
            .await
            .unwrap_or_else(|e| panic!("creating test.t: {e}"));
        const CHUNK: u64 = 50_000;
        let mut first = 1;
        while first <= rows {
            let last = (first + CHUNK - 1).min(rows);
            // seq_<a>_to_<b> is MariaDB's built-in SEQUENCE engine.
            let sql = format!(
                "INSERT INTO test.t (id, k, pad) \
                 SELECT seq, 0, RPAD(CONCAT('row-', seq, '-'), 60, 'x') FROM test.seq_{first}_to_{last}"
            );
            exec_on(&mut conn, &sql)
                .await
                .unwrap_or_else(|e| panic!("filling test.t: {e}"));
            first = last + 1;
        }
        let _ = bounded("close", conn.close()).await;
        self.table_rows.store(rows, Ordering::Relaxed);
    }

    /// Starts `connections` tokio tasks running `UPDATE test.t SET k=k+1 WHERE id=?`
    /// on random ids (autocommit) until the handle is stopped or dropped. Needs a tokio
    /// runtime and `test.t` (see [`Self::prepare_table`]). Errors (e.g. while the
    /// server is restarted) are counted and the task reconnects.
    pub fn spawn_update_load(&self, connections: usize) -> LoadHandle {
        assert!(
            connections > 0,
            "spawn_update_load needs at least one connection"
        );
        let shared = Arc::new(LoadShared::default());
        let started = Instant::now();
        let known_rows = self.table_rows.load(Ordering::Relaxed);
        let tasks = (0..connections)
            .map(|i| {
                let opts = self.connect_options();
                let shared = shared.clone();
                let seed = stable_hash(&[&unique_suffix(), &i.to_string()]) | 1;
                tokio::spawn(update_worker(opts, shared, seed, known_rows))
            })
            .collect();
        LoadHandle {
            shared,
            tasks,
            started,
        }
    }

    /// Opens a connection holding a consistent-snapshot read view
    /// (`START TRANSACTION WITH CONSISTENT SNAPSHOT; SELECT COUNT(*) FROM test.t`)
    /// until the handle is released (COMMIT) or dropped (connection closed).
    pub async fn hold_read_view(&self) -> ReadViewHandle {
        let mut conn = self.connect().await;
        let id = scalar_string_on(&mut conn, "SELECT CONNECTION_ID()")
            .await
            .unwrap_or_else(|e| panic!("SELECT CONNECTION_ID(): {e}"))
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        exec_on(&mut conn, "START TRANSACTION WITH CONSISTENT SNAPSHOT")
            .await
            .unwrap_or_else(|e| panic!("START TRANSACTION WITH CONSISTENT SNAPSHOT: {e}"));
        let rows = scalar_string_on(&mut conn, "SELECT COUNT(*) FROM test.t")
            .await
            .unwrap_or_else(|e| panic!("SELECT COUNT(*) FROM test.t in the read view: {e}"))
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        ReadViewHandle {
            conn: Some(conn),
            connection_id: id,
            rows_seen: rows,
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

// ---------------------------------------------------------------------------------------
// Bounded SQL on an existing connection

/// An error from a harness query: SQL error or timeout.
#[derive(Debug)]
pub enum HarnessError {
    Sql(sqlx::Error),
    Timeout(&'static str, Duration),
}

impl std::fmt::Display for HarnessError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HarnessError::Sql(e) => write!(f, "{e}"),
            HarnessError::Timeout(what, d) => write!(f, "{what} timed out after {d:?}"),
        }
    }
}

impl std::error::Error for HarnessError {}

impl HarnessError {
    /// The server's SQLSTATE (e.g. `42000`), if it is an SQL error.
    pub fn sqlstate(&self) -> Option<String> {
        match self {
            HarnessError::Sql(sqlx::Error::Database(db)) => db.code().map(|c| c.into_owned()),
            _ => None,
        }
    }

    /// The server's error number (e.g. 1227 `ER_SPECIFIC_ACCESS_DENIED_ERROR`), if it
    /// is an SQL error.
    pub fn errno(&self) -> Option<u16> {
        match self {
            HarnessError::Sql(sqlx::Error::Database(db)) => db
                .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
                .map(|e| e.number()),
            _ => None,
        }
    }
}

/// Awaits `fut` for at most [`QUERY_TIMEOUT`].
pub async fn bounded<T>(
    what: &'static str,
    fut: impl Future<Output = Result<T, sqlx::Error>>,
) -> Result<T, HarnessError> {
    bounded_for(what, QUERY_TIMEOUT, fut).await
}

pub async fn bounded_for<T>(
    what: &'static str,
    limit: Duration,
    fut: impl Future<Output = Result<T, sqlx::Error>>,
) -> Result<T, HarnessError> {
    match tokio::time::timeout(limit, fut).await {
        Ok(r) => r.map_err(HarnessError::Sql),
        Err(_) => Err(HarnessError::Timeout(what, limit)),
    }
}

/// Runs `sql` (one or more statements) on `conn`; returns the rows affected.
pub async fn exec_on(conn: &mut MySqlConnection, sql: &str) -> Result<u64, HarnessError> {
    bounded("exec", conn.execute(sqlx::raw_sql(sql)))
        .await
        .map(|r| r.rows_affected())
}

/// First column of the first row as text; text protocol, so any column type decodes.
pub async fn scalar_string_on(
    conn: &mut MySqlConnection,
    sql: &str,
) -> Result<Option<String>, HarnessError> {
    // Not `RawSql::fetch_optional`: in sqlx 0.8.6 it is `fetch_one` (errors on no rows).
    let row = bounded("query", conn.fetch_optional(sqlx::raw_sql(sql))).await?;
    match row {
        None => Ok(None),
        Some(row) => row
            .try_get_unchecked::<Option<String>, _>(0)
            .map_err(HarnessError::Sql),
    }
}

/// All rows, every column as text.
pub async fn rows_on(
    conn: &mut MySqlConnection,
    sql: &str,
) -> Result<Vec<Vec<Option<String>>>, HarnessError> {
    let rows = bounded("query", conn.fetch_all(sqlx::raw_sql(sql))).await?;
    rows.iter()
        .map(|row| {
            (0..row.len())
                .map(|i| {
                    row.try_get_unchecked::<Option<String>, _>(i)
                        .map_err(HarnessError::Sql)
                })
                .collect()
        })
        .collect()
}

/// Polls `check` every `interval` until it returns `Some`, or panics with `what` after
/// `limit`. Each call of `check` should itself be bounded (the harness's helpers are).
pub async fn eventually<T, F, Fut>(
    what: &str,
    limit: Duration,
    interval: Duration,
    mut check: F,
) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!("timed out after {limit:?} waiting for: {what}");
        }
        tokio::time::sleep(interval).await;
    }
}

fn sql_escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('\'', "''")
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

// ---------------------------------------------------------------------------------------
// Update load and read views

#[derive(Default)]
struct LoadShared {
    stop: AtomicBool,
    updates: AtomicU64,
    errors: AtomicU64,
    last_error: Mutex<Option<String>>,
}

impl LoadShared {
    fn error(&self, e: impl std::fmt::Display) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        *self.last_error.lock().unwrap_or_else(|e| e.into_inner()) = Some(e.to_string());
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

/// Per-query bound inside the load: short, so a stop request is honoured quickly.
const LOAD_QUERY_TIMEOUT: Duration = Duration::from_secs(10);

async fn update_worker(
    opts: MySqlConnectOptions,
    shared: Arc<LoadShared>,
    mut rng: u64,
    known_rows: u64,
) {
    let mut conn: Option<MySqlConnection> = None;
    let mut max_id = known_rows;
    while !shared.stopped() {
        let c = match conn.as_mut() {
            Some(c) => c,
            None => match bounded_for("connect", LOAD_QUERY_TIMEOUT, opts.connect()).await {
                Ok(c) => conn.insert(c),
                Err(e) => {
                    shared.error(e);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        if max_id == 0 {
            match bounded_for(
                "SELECT MAX(id)",
                LOAD_QUERY_TIMEOUT,
                c.fetch_one(sqlx::raw_sql("SELECT MAX(id) FROM test.t")),
            )
            .await
            .map(|row| row.try_get_unchecked::<Option<String>, _>(0))
            {
                Ok(Ok(Some(v))) => max_id = v.parse().unwrap_or(0),
                Ok(Ok(None)) => {
                    shared.error("test.t is empty");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Ok(Err(e)) => shared.error(e),
                Err(e) => {
                    shared.error(e);
                    conn = None;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
            continue;
        }
        // xorshift64
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let id = 1 + rng % max_id;
        let r = bounded_for(
            "UPDATE",
            LOAD_QUERY_TIMEOUT,
            c.execute(sqlx::query("UPDATE test.t SET k=k+1 WHERE id=?").bind(id)),
        )
        .await;
        match r {
            Ok(_) => {
                shared.updates.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                shared.error(e);
                conn = None;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    if let Some(c) = conn {
        let _ = tokio::time::timeout(Duration::from_secs(2), c.close()).await;
    }
}

/// Counters of a finished load.
#[derive(Clone, Debug)]
pub struct LoadStats {
    pub updates: u64,
    pub errors: u64,
    pub last_error: Option<String>,
    pub elapsed: Duration,
}

/// A running update load (see [`MariaDb::spawn_update_load`]). Dropping it stops the
/// tasks (aborting queries in flight); [`LoadHandle::stop`] waits for them.
pub struct LoadHandle {
    shared: Arc<LoadShared>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    started: Instant,
}

impl LoadHandle {
    /// Successful updates so far.
    pub fn updates(&self) -> u64 {
        self.shared.updates.load(Ordering::Relaxed)
    }

    /// Failed statements or connection attempts so far.
    pub fn errors(&self) -> u64 {
        self.shared.errors.load(Ordering::Relaxed)
    }

    pub fn last_error(&self) -> Option<String> {
        self.shared
            .last_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Waits until at least `n` more updates succeeded, at most `limit`.
    pub async fn wait_for_updates(&self, n: u64, limit: Duration) {
        let target = self.updates() + n;
        eventually(
            &format!(
                "{n} more updates from the load (errors: {}, last: {:?})",
                self.errors(),
                self.last_error()
            ),
            limit,
            Duration::from_millis(50),
            || async { (self.updates() >= target).then_some(()) },
        )
        .await;
    }

    /// Stops the tasks and waits for them (each at most a few seconds).
    pub async fn stop(mut self) -> LoadStats {
        self.shared.stop.store(true, Ordering::Relaxed);
        for t in std::mem::take(&mut self.tasks) {
            let abort = t.abort_handle();
            if tokio::time::timeout(LOAD_QUERY_TIMEOUT + Duration::from_secs(5), t)
                .await
                .is_err()
            {
                abort.abort();
            }
        }
        LoadStats {
            updates: self.updates(),
            errors: self.errors(),
            last_error: self.last_error(),
            elapsed: self.started.elapsed(),
        }
    }
}

impl Drop for LoadHandle {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// A connection holding a read view open (see [`MariaDb::hold_read_view`]).
/// Dropping it closes the connection without COM_QUIT, which rolls the transaction
/// back (and makes the server log an "Aborted connection" warning); prefer `release`.
pub struct ReadViewHandle {
    conn: Option<MySqlConnection>,
    connection_id: u64,
    rows_seen: u64,
}

impl ReadViewHandle {
    /// `CONNECTION_ID()` of the session holding the view.
    pub fn connection_id(&self) -> u64 {
        self.connection_id
    }

    /// What `SELECT COUNT(*) FROM test.t` returned inside the view.
    pub fn rows_seen(&self) -> u64 {
        self.rows_seen
    }

    /// The connection (still inside the transaction), e.g. to read through the view.
    pub fn connection(&mut self) -> &mut MySqlConnection {
        self.conn.as_mut().expect("read view connection present")
    }

    /// COMMIT and close the connection.
    pub async fn release(mut self) {
        if let Some(mut conn) = self.conn.take() {
            exec_on(&mut conn, "COMMIT")
                .await
                .unwrap_or_else(|e| panic!("COMMIT of the read view: {e}"));
            let _ = bounded("close", conn.close()).await;
        }
    }
}
