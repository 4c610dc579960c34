//! Black-box tests of the observing commands (`status`, `watch`, `check-config`): the
//! real `innopilot` binary against private MariaDB servers started by `tests/common`.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

use common::{innopilot_bin, MariaDb};

/// Environment variables the binary reads; removed so the caller's environment cannot
/// change what a test sees.
const INNOPILOT_ENV: [&str; 4] = [
    "INNOPILOT_DSN",
    "INNOPILOT_PASSWORD",
    "INNOPILOT_CONFIG",
    "RUST_LOG",
];

/// A command for the binary with a clean environment (as far as innopilot cares).
fn innopilot(args: &[&str]) -> Command {
    let mut cmd = Command::new(innopilot_bin());
    for var in INNOPILOT_ENV {
        cmd.env_remove(var);
    }
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    cmd
}

/// What one run of the binary did.
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    elapsed: Duration,
}

impl Run {
    fn all(&self) -> String {
        format!("{}\n{}", self.stdout, self.stderr)
    }
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit code {:?} after {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.code, self.elapsed, self.stdout, self.stderr
        )
    }
}

/// Runs `cmd` to completion; panics if it takes longer than `limit` (and kills it).
async fn run(mut cmd: Command, limit: Duration) -> Run {
    let started = Instant::now();
    let child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("spawning {}: {e}", innopilot_bin().display()));
    let out: Output = match tokio::time::timeout(limit, child.wait_with_output()).await {
        Ok(r) => r.expect("waiting for innopilot"),
        // Dropping the future drops the child: kill_on_drop kills it.
        Err(_) => panic!("innopilot did not finish within {limit:?}: {cmd:?}"),
    };
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        elapsed: started.elapsed(),
    }
}

/// `innopilot check-config --config <path>`.
async fn check_config(path: &Path) -> Run {
    let p = path.to_str().expect("utf-8 path");
    run(
        innopilot(&["check-config", "--config", p]),
        Duration::from_secs(10),
    )
    .await
}

/// `innopilot status --json` against `dsn`, which must succeed.
async fn status_json(cmd: Command) -> Value {
    let r = run(cmd, Duration::from_secs(30)).await;
    assert_eq!(r.code, Some(0), "status --json failed: {r}");
    serde_json::from_str(&r.stdout)
        .unwrap_or_else(|e| panic!("status --json printed no valid JSON ({e}): {r}"))
}

/// A loopback port nothing listens on (bound, then released).
fn dead_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("binding 127.0.0.1:0");
    let port = l.local_addr().expect("local_addr").port();
    drop(l);
    port
}

// ---------------------------------------------------------------------------------------
// `watch --json` as a child process

/// A running `innopilot watch --json`; its lines arrive through a channel, its stderr
/// is kept for failure messages. Killed on drop.
struct Watch {
    child: Child,
    lines: mpsc::UnboundedReceiver<String>,
    stderr: Arc<Mutex<String>>,
    /// Every line received so far (for failure messages).
    seen: Vec<String>,
}

impl Watch {
    fn spawn(dsn: &str, interval: &str) -> Watch {
        let mut cmd = innopilot(&["watch", "--json", "--interval", interval, "--dsn", dsn]);
        cmd.env("RUST_LOG", "warn");
        let mut child = cmd.spawn().expect("spawning innopilot watch");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut stderr_pipe = child.stderr.take().expect("piped stderr");
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let sink = stderr.clone();
        tokio::spawn(async move {
            let mut buf = [0u8; 4096];
            while let Ok(n) = stderr_pipe.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                sink.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        Watch {
            child,
            lines: rx,
            stderr,
            seen: Vec::new(),
        }
    }

    fn stderr(&self) -> String {
        self.stderr
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// What the test saw, for panic messages.
    fn context(&self) -> String {
        let last: Vec<&String> = self.seen.iter().rev().take(5).collect();
        format!(
            "{} line(s) received; last ones (newest first):\n{}\n--- watch stderr ---\n{}",
            self.seen.len(),
            last.iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join("\n"),
            self.stderr()
        )
    }

    /// The next line as JSON; panics after `limit` or when the process stopped.
    async fn next(&mut self, limit: Duration) -> Value {
        let line = match tokio::time::timeout(limit, self.lines.recv()).await {
            Ok(Some(l)) => l,
            Ok(None) => {
                let status = self.child.try_wait();
                panic!(
                    "watch closed its output (status {status:?}); {}",
                    self.context()
                )
            }
            Err(_) => panic!("no watch line within {limit:?}; {}", self.context()),
        };
        let v: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("watch printed a line that is not JSON ({e}): {line:?}"));
        self.seen.push(line);
        v
    }

    /// Panics if the process has exited.
    fn assert_running(&mut self, when: &str) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!("watch exited ({status}) {when}; {}", self.context());
        }
    }

    async fn stop(mut self) {
        let _ = self.child.start_kill();
        let _ = tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await;
    }
}

/// Checks the shape every `watch --json` line must have; returns its signals.
fn watch_signals(line: &Value) -> &serde_json::Map<String, Value> {
    assert!(line["unix_ms"].is_u64(), "unix_ms missing: {line}");
    assert!(
        line["window_reset"].is_boolean(),
        "window_reset missing: {line}"
    );
    assert!(line["knobs"].is_object(), "knobs missing: {line}");
    let signals = line["signals"]
        .as_object()
        .unwrap_or_else(|| panic!("signals missing: {line}"));
    for (key, _) in innopilot::commands::status::signal_units() {
        assert!(signals.contains_key(key), "signal {key} missing: {line}");
    }
    signals
}

fn history_len(line: &Value) -> u64 {
    line["signals"]["history_len"]
        .as_u64()
        .unwrap_or_else(|| panic!("history_len is not a number: {line}"))
}

// ---------------------------------------------------------------------------------------
// 1. status --json

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_json_has_every_signal_and_knob_with_units() {
    let db = MariaDb::new();
    let mut cmd = innopilot(&["status", "--json", "--dsn", &db.dsn()]);
    cmd.env("RUST_LOG", "warn");
    let v = status_json(cmd).await;

    assert_eq!(v["server"]["flavor"], "mariadb", "{v:#}");
    let version = v["server"]["version"].as_str().unwrap_or_default();
    assert!(
        version.starts_with("10.") || version.starts_with("11."),
        "server.version {version:?}: {v:#}"
    );

    let signals = v["signals"]
        .as_object()
        .unwrap_or_else(|| panic!("no signals object: {v:#}"));
    let units = innopilot::commands::status::signal_units();
    assert!(units.len() >= 20, "suspiciously few signals: {units:?}");
    for (key, unit) in &units {
        let s = signals
            .get(*key)
            .unwrap_or_else(|| panic!("signal {key} missing from status --json: {v:#}"));
        assert_eq!(s["unit"], *unit, "unit of {key}: {s}");
        assert!(
            s.as_object().is_some_and(|o| o.contains_key("value")),
            "signal {key} has no value field: {s}"
        );
    }
    assert_eq!(
        signals.len(),
        units.len(),
        "status --json has signals signal_units() does not list: {:?}",
        signals.keys().collect::<Vec<_>>()
    );

    let redo_fill = &signals["redo_fill_ratio"]["value"];
    assert!(
        redo_fill.is_number(),
        "redo_fill_ratio is not a number: {redo_fill}"
    );
    // A ratio, as in the metrics and the audit log: 1 is the sync-flush point.
    assert_eq!(signals["redo_fill_ratio"]["unit"], "ratio");
    let fill = redo_fill.as_f64().unwrap();
    assert!(
        (0.0..=1.5).contains(&fill),
        "redo_fill_ratio {fill} is absurd"
    );
    assert!(
        signals["history_len"]["value"].is_u64(),
        "history_len is not a number: {}",
        signals["history_len"]
    );
    let trips = signals["round_trips"]["value"]
        .as_u64()
        .unwrap_or_else(|| panic!("round_trips is not a number: {}", signals["round_trips"]));
    assert!(
        (1..=3).contains(&trips),
        "round_trips = {trips}, must be ≤ 3"
    );
    // Two samples one interval apart: rates exist.
    assert!(
        signals["lsn_rate"]["value"].is_number(),
        "lsn_rate should be known after two samples: {}",
        signals["lsn_rate"]
    );

    let knobs = v["knobs"]
        .as_object()
        .unwrap_or_else(|| panic!("no knobs object: {v:#}"));
    for knob in innopilot::server::Knob::ALL {
        let k = knobs
            .get(knob.var_name())
            .unwrap_or_else(|| panic!("knob {knob} missing: {v:#}"));
        assert_eq!(k["unit"], knob.unit(), "unit of {knob}: {k}");
        for field in [
            "value",
            "exists",
            "dynamic",
            "server_min",
            "server_max",
            "note",
        ] {
            assert!(
                k.as_object().is_some_and(|o| o.contains_key(field)),
                "knob {knob} lacks {field}: {k}"
            );
        }
    }
    let purge = &knobs["innodb_purge_threads"];
    assert_eq!(purge["exists"], true, "{purge}");
    assert_eq!(purge["dynamic"], "yes", "MariaDB 10.11: {purge}");
    let threads = purge["value"]
        .as_u64()
        .unwrap_or_else(|| panic!("innodb_purge_threads has no value: {purge}"));
    let expected: u64 = db
        .global_variable("innodb_purge_threads")
        .await
        .and_then(|s| s.parse().ok())
        .expect("@@innodb_purge_threads");
    assert_eq!(threads, expected, "{purge}");
    let cap = &knobs["innodb_redo_log_capacity"];
    assert_eq!(cap["exists"], false, "MySQL-only variable: {cap}");
    assert!(cap["value"].is_null(), "{cap}");
    assert_eq!(knobs["innodb_log_file_size"]["value"], 32u64 << 20);
}

// ---------------------------------------------------------------------------------------
// 2. status (human table)

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_text_table() {
    let db = MariaDb::new();
    let mut cmd = innopilot(&["status", "--dsn", &db.dsn()]);
    cmd.env("RUST_LOG", "warn");
    let r = run(cmd, Duration::from_secs(30)).await;
    assert_eq!(r.code, Some(0), "{r}");
    for needle in [
        "MariaDB",
        "history_len",
        "innodb_purge_threads",
        "redo_fill_ratio",
    ] {
        assert!(r.stdout.contains(needle), "no {needle:?} in the table: {r}");
    }
    // Every signal is a row.
    for (key, _) in innopilot::commands::status::signal_units() {
        assert!(
            r.stdout.lines().any(|l| l.starts_with(&format!("{key} "))),
            "no row for {key}: {r}"
        );
    }
    assert!(
        !r.stdout.trim_start().starts_with('{'),
        "text, not JSON: {r}"
    );
}

// ---------------------------------------------------------------------------------------
// 3. unreachable server

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_address_fails_fast() {
    const SECRET: &str = "hunter2secret";
    let port = dead_port();
    let dsn = format!("mysql://root:{SECRET}@127.0.0.1:{port}/");
    for json in [false, true] {
        let mut args = vec!["status", "--dsn", &dsn];
        if json {
            args.push("--json");
        }
        let mut cmd = innopilot(&args);
        // The most verbose logging: nothing at any level may show the password.
        cmd.env("RUST_LOG", "trace");
        let r = run(cmd, Duration::from_secs(10)).await;
        assert!(
            r.code.is_some_and(|c| c != 0),
            "status against a dead port must fail: {r}"
        );
        assert!(
            r.stderr.contains(&format!("127.0.0.1:{port}")),
            "the message should name the target: {r}"
        );
        let lower = r.stderr.to_lowercase();
        assert!(
            lower.contains("is the server running") || lower.contains("check"),
            "the message should give a hint: {r}"
        );
        assert!(!r.all().contains(SECRET), "password leaked: {r}");
    }

    // watch must fail fast too, not retry forever.
    let mut cmd = innopilot(&["watch", "--json", "--dsn", &dsn]);
    cmd.env("RUST_LOG", "trace");
    let r = run(cmd, Duration::from_secs(10)).await;
    assert!(r.code.is_some_and(|c| c != 0), "{r}");
    assert!(r.stderr.contains(&format!("127.0.0.1:{port}")), "{r}");
    assert!(!r.all().contains(SECRET), "password leaked: {r}");

    // The same password given through INNOPILOT_PASSWORD is not shown either.
    let mut cmd = innopilot(&[
        "status",
        "--dsn",
        &format!("mysql://root@127.0.0.1:{port}/"),
    ]);
    cmd.env("RUST_LOG", "trace")
        .env("INNOPILOT_PASSWORD", SECRET);
    let r = run(cmd, Duration::from_secs(10)).await;
    assert!(r.code.is_some_and(|c| c != 0), "{r}");
    assert!(!r.all().contains(SECRET), "password leaked: {r}");
}

// ---------------------------------------------------------------------------------------
// 4. wrong password

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_password_is_clear_and_redacted() {
    const WRONG: &str = "wrongpass9876xyz";
    const RIGHT: &str = "right-pass-4321";
    let db = MariaDb::new();
    db.create_user("watcher", RIGHT, &["PROCESS ON *.*"]).await;

    let check = |r: &Run| {
        assert!(
            r.code.is_some_and(|c| c != 0),
            "a wrong password must fail: {r}"
        );
        assert!(
            r.stderr
                .contains(&format!("watcher@127.0.0.1:{}", db.port())),
            "the message should name the target: {r}"
        );
        let lower = r.stderr.to_lowercase();
        assert!(
            lower.contains("access denied") || lower.contains("password"),
            "the message should say access was denied: {r}"
        );
        assert!(
            lower.contains("check the user and password"),
            "the message should hint at the credentials: {r}"
        );
        assert!(!r.all().contains(WRONG), "the wrong password leaked: {r}");
        assert!(!r.all().contains(RIGHT), "the real password leaked?! {r}");
    };

    // In the DSN.
    let mut cmd = innopilot(&["status", "--dsn", &db.user_dsn("watcher", WRONG)]);
    cmd.env("RUST_LOG", "trace");
    check(&run(cmd, Duration::from_secs(15)).await);

    // Through INNOPILOT_PASSWORD.
    let mut cmd = innopilot(&["status", "--json", "--dsn", &db.user_dsn("watcher", "")]);
    cmd.env("RUST_LOG", "trace")
        .env("INNOPILOT_PASSWORD", WRONG);
    check(&run(cmd, Duration::from_secs(15)).await);

    // And the right one works (the account itself is fine).
    let mut cmd = innopilot(&["status", "--json", "--dsn", &db.user_dsn("watcher", RIGHT)]);
    cmd.env("RUST_LOG", "warn");
    let v = status_json(cmd).await;
    assert_eq!(v["server"]["account"], "watcher@127.0.0.1", "{v:#}");
}

// ---------------------------------------------------------------------------------------
// 5. configuration errors

/// Does `stderr` locate `line` of `path`? The out-of-range errors say `path:LINE`; TOML
/// syntax/type errors say `path: TOML parse error at line LINE, column C`.
fn names_line(stderr: &str, path: &Path, line: usize) -> bool {
    stderr.contains(&format!("{}:{line}", path.display()))
        || stderr.contains(&format!("line {line}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_config_exits_2_naming_key_and_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    // (file name, content, key the message must name, line it must point at)
    let cases: [(&str, &str, &str, usize); 6] = [
        (
            "unknown-key.toml",
            "[sampler]\ninterval = \"1s\"\nintervall = \"2s\"\n",
            "intervall",
            3,
        ),
        ("unknown-section.toml", "# x\n[samplr]\n", "samplr", 2),
        (
            "bad-duration.toml",
            "[server]\nconnect_timeout = \"5s\"\n\n[sampler]\n\ninterval = \"1 fortnight-ish\"\n",
            "interval",
            6,
        ),
        (
            "out-of-range.toml",
            "[control]\n# comment\nmax_sets_per_minute = 0\n",
            "control.max_sets_per_minute",
            3,
        ),
        (
            "too-short.toml",
            "[sampler]\nwindow = \"5s\"\ninterval = \"10ms\"\n",
            "sampler.interval",
            3,
        ),
        (
            "knob.toml",
            "[knobs.innodb_purge_threads]\nmanage = true\nmax = 64\n",
            "knobs.innodb_purge_threads.max",
            3,
        ),
    ];
    for (name, content, key, line) in cases {
        let path = dir.path().join(name);
        std::fs::write(&path, content).expect("writing config");
        let p = path.to_str().expect("utf-8 path");
        let r = check_config(&path).await;
        assert_eq!(r.code, Some(2), "{name}: exit code: {r}");
        assert!(r.stderr.contains(key), "{name}: key {key} not named: {r}");
        assert!(
            names_line(&r.stderr, &path, line),
            "{name}: line {line} not named: {r}"
        );
        assert!(r.stderr.contains(p), "{name}: the file is not named: {r}");
    }

    // The out-of-range message gives the range, in `path:LINE` form.
    let bad = dir.path().join("out-of-range.toml");
    let r = check_config(&bad).await;
    assert!(
        r.stderr.contains(&format!("{}:3", bad.display())) && r.stderr.contains("from 1 to 600"),
        "{r}"
    );

    // Every command validates the config before doing anything else: exit 2, no
    // connection attempt (the DSN points nowhere).
    let dsn = format!("mysql://root@127.0.0.1:{}/", dead_port());
    for cmd_args in [
        vec!["status"],
        vec!["status", "--json"],
        vec!["watch", "--json"],
    ] {
        let mut args = cmd_args.clone();
        args.extend(["--config", bad.to_str().unwrap(), "--dsn", &dsn]);
        let r = run(innopilot(&args), Duration::from_secs(10)).await;
        assert_eq!(r.code, Some(2), "{cmd_args:?} with a bad config: {r}");
        assert!(r.stderr.contains("control.max_sets_per_minute"), "{r}");
        assert!(!r.stderr.contains("cannot connect"), "{r}");
    }
    // The config can come from INNOPILOT_CONFIG too.
    let mut cmd = innopilot(&["status", "--dsn", &dsn]);
    cmd.env("INNOPILOT_CONFIG", &bad);
    let r = run(cmd, Duration::from_secs(10)).await;
    assert_eq!(r.code, Some(2), "INNOPILOT_CONFIG: {r}");

    // A missing file is a configuration error as well.
    let missing = dir.path().join("nope.toml");
    let r = check_config(&missing).await;
    assert_eq!(r.code, Some(2), "missing config file: {r}");
    assert!(r.stderr.contains("nope.toml"), "{r}");

    // The shipped file is valid.
    let shipped = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("config/innopilot.toml");
    let r = check_config(&shipped).await;
    assert_eq!(r.code, Some(0), "shipped config: {r}");
    assert!(r.stdout.contains("OK"), "{r}");
}

// ---------------------------------------------------------------------------------------
// 6. history under a held read view

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_shows_history_growing_under_read_view_and_falling_after() {
    const GROWTH: u64 = 5_000;
    let db = MariaDb::new();
    db.prepare_table(20_000).await;
    let view = db.hold_read_view().await;
    // trx_started has one-second resolution: from two seconds on, the view is strictly
    // older than any of the load's short transactions.
    let view_settled_ms = common::run::unix_ms() + 2_000;
    let load = db.spawn_update_load(4);
    load.wait_for_updates(100, Duration::from_secs(15)).await;

    let mut watch = Watch::spawn(&db.dsn(), "500ms");
    let first = watch.next(Duration::from_secs(15)).await;
    watch_signals(&first);
    assert_eq!(
        first["window_reset"], true,
        "first line opens a window: {first}"
    );
    let start = history_len(&first);

    // Grows while the view is held, and the view shows as the oldest transaction.
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut peak = start;
    let mut saw_positive_rate = false;
    let mut saw_view_as_oldest = false;
    let mut lines = 1;
    while peak < start + GROWTH || !saw_positive_rate || !saw_view_as_oldest {
        assert!(
            Instant::now() < deadline,
            "history_len went from {start} to at most {peak} in 15 s (wanted +{GROWTH}), \
             history_rate > 0 seen: {saw_positive_rate}, view seen as the oldest \
             transaction: {saw_view_as_oldest}; load: {} updates, {} errors ({:?}); {}",
            load.updates(),
            load.errors(),
            load.last_error(),
            watch.context()
        );
        let line = watch.next(Duration::from_secs(5)).await;
        let signals = watch_signals(&line);
        lines += 1;
        assert_eq!(line["window_reset"], false, "no restart happened: {line}");
        peak = peak.max(history_len(&line));
        if signals["history_rate"].as_f64().is_some_and(|r| r > 0.0) {
            saw_positive_rate = true;
        }
        if line["unix_ms"].as_u64().unwrap() > view_settled_ms {
            assert_eq!(
                signals["oldest_trx_thread"].as_u64(),
                Some(view.connection_id()),
                "the read view should be the oldest transaction: {line}"
            );
            assert_eq!(signals["oldest_trx_read_view"], true, "{line}");
            assert!(
                signals["oldest_trx_age"].as_u64().is_some_and(|a| a >= 1),
                "{line}"
            );
            saw_view_as_oldest = true;
        }
    }
    let grow_time = deadline - Duration::from_secs(15);
    eprintln!(
        "history {start} -> {peak} over {lines} lines ({:?})",
        grow_time.elapsed()
    );

    // Release the view and nothing else: the load keeps running, so a fall can only
    // come from purge catching up.
    let view_id = view.connection_id();
    view.release().await;
    let updates_at_release = load.updates();
    let released = Instant::now();
    let limit = Duration::from_secs(30);
    let mut low = u64::MAX;
    loop {
        let line = watch.next(Duration::from_secs(5)).await;
        watch_signals(&line);
        assert_eq!(line["window_reset"], false, "no restart happened: {line}");
        // Read the peak from lines still in flight from before the release.
        let h = history_len(&line);
        peak = peak.max(h);
        low = low.min(h);
        if low < peak / 2 {
            break;
        }
        assert!(
            released.elapsed() < limit,
            "history_len did not fall below half of its peak {peak} within {limit:?} of \
             releasing the read view (lowest {low}); {}",
            watch.context()
        );
    }
    let fall_time = released.elapsed();
    let stats = load.stop().await;
    eprintln!(
        "history fell from {peak} to {low} in {fall_time:?} after the release, while the \
         load made {} more updates ({} errors in all)",
        stats.updates - updates_at_release,
        stats.errors
    );
    // By now the view is gone: the oldest transaction (if any) is not it.
    let line = watch.next(Duration::from_secs(5)).await;
    assert_ne!(
        watch_signals(&line)["oldest_trx_thread"].as_u64(),
        Some(view_id),
        "the released view is still the oldest transaction: {line}"
    );
    watch.assert_running("before the end of the test");
    watch.stop().await;
}

// ---------------------------------------------------------------------------------------
// 7. server restart under watch

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_mid_watch_yields_new_window() {
    let mut db = MariaDb::new();
    let mut watch = Watch::spawn(&db.dsn(), "300ms");

    let mut before = Vec::new();
    for i in 0..4 {
        let line = watch.next(Duration::from_secs(15)).await;
        watch_signals(&line);
        assert_eq!(line["window_reset"], i == 0, "line {i}: {line}");
        before.push(line);
    }
    let uptime_before = before
        .last()
        .and_then(|l| l["signals"]["uptime"].as_u64())
        .expect("uptime before the restart");

    let killed_at_ms = common::run::unix_ms();
    let t0 = Instant::now();
    tokio::task::block_in_place(|| db.kill());
    // Let watch notice the loss and fail a reconnect or two.
    tokio::time::sleep(Duration::from_secs(1)).await;
    watch.assert_running("after the server was killed");
    tokio::task::block_in_place(|| db.start());
    eprintln!("server restarted {:?} after the kill", t0.elapsed());
    watch.assert_running("after the server was restarted");

    // Lines read before the kill may still be in the pipe: skip them.
    let first_after = loop {
        let line = watch.next(Duration::from_secs(20)).await;
        watch_signals(&line);
        if line["unix_ms"].as_u64().unwrap() > killed_at_ms {
            break line;
        }
    };
    eprintln!(
        "first line after the restart {:?} after the kill",
        t0.elapsed()
    );
    let signals = watch_signals(&first_after);
    assert_eq!(
        first_after["window_reset"],
        true,
        "the first sample after a restart starts a new window: {first_after}\n{}",
        watch.context()
    );
    let uptime_after = signals["uptime"]
        .as_u64()
        .expect("uptime after the restart");
    assert!(
        uptime_after < uptime_before + t0.elapsed().as_secs() + 1 && uptime_after <= 60,
        "uptime {uptime_after} (before: {uptime_before}): not a new server life?"
    );
    let check_rates = |line: &Value| {
        for (key, v) in watch_signals(line) {
            if key.ends_with("_rate") && key != "history_rate" {
                assert!(
                    v.is_null() || v.as_f64().is_some_and(|r| r >= 0.0),
                    "{key} = {v} after the restart: {line}"
                );
            }
        }
    };
    check_rates(&first_after);
    for key in [
        "lsn_rate",
        "commit_rate",
        "rows_updated_rate",
        "history_rate",
    ] {
        assert!(
            signals[key].is_null(),
            "{key} from one sample of the new server life must be unknown: {first_after}"
        );
    }

    // Later lines continue the new window, with rates again.
    let mut later = Vec::new();
    for _ in 0..3 {
        let line = watch.next(Duration::from_secs(5)).await;
        assert_eq!(line["window_reset"], false, "{line}");
        check_rates(&line);
        later.push(line);
    }
    assert!(
        later
            .iter()
            .any(|l| l["signals"]["lsn_rate"].as_f64().is_some()),
        "rates did not come back after the restart: {}",
        watch.context()
    );
    watch.assert_running("at the end of the test");
    eprintln!("watch stderr across the restart:\n{}", watch.stderr());
    watch.stop().await;
}

// ---------------------------------------------------------------------------------------
// 8. other ways to give credentials

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn defaults_file_and_password_env() {
    const PASSWORD: &str = "cnf-pass-5150";
    let db = MariaDb::new();
    db.create_user(
        "observer",
        PASSWORD,
        &["PROCESS ON *.*", "REPLICATION CLIENT ON *.*"],
    )
    .await;
    let dir = tempfile::tempdir().expect("tempdir");

    // A my.cnf-style file alone.
    let cnf = dir.path().join("client.cnf");
    std::fs::write(
        &cnf,
        format!(
            "# client settings\n[mysqld]\nport = 1\nuser = mysql\n\n[client]\nuser = observer\npassword = \"{PASSWORD}\"\nhost = 127.0.0.1\nport = {}\ndefault-character-set = utf8mb4\n",
            db.port()
        ),
    )
    .expect("writing the defaults file");
    let mut cmd = innopilot(&["status", "--json", "--defaults-file", cnf.to_str().unwrap()]);
    cmd.env("RUST_LOG", "warn");
    let v = status_json(cmd).await;
    assert_eq!(v["server"]["account"], "observer@127.0.0.1", "{v:#}");
    assert_eq!(v["server"]["flavor"], "mariadb");
    assert!(v["signals"]["history_len"]["value"].is_u64(), "{v:#}");

    // INNOPILOT_PASSWORD with a DSN that has none.
    let mut cmd = innopilot(&["status", "--json", "--dsn", &db.user_dsn("observer", "")]);
    cmd.env("RUST_LOG", "warn")
        .env("INNOPILOT_PASSWORD", PASSWORD);
    let v = status_json(cmd).await;
    assert_eq!(v["server"]["account"], "observer@127.0.0.1", "{v:#}");
    assert!(!v.to_string().contains(PASSWORD), "password in the output");

    // INNOPILOT_DSN works as --dsn does.
    let mut cmd = innopilot(&["status", "--json"]);
    cmd.env("RUST_LOG", "warn")
        .env("INNOPILOT_DSN", db.user_dsn("observer", ""))
        .env("INNOPILOT_PASSWORD", PASSWORD);
    let v = status_json(cmd).await;
    assert_eq!(v["server"]["account"], "observer@127.0.0.1", "{v:#}");

    // Without the password the same DSN is refused: the password really came from the
    // environment or the file.
    let r = run(
        innopilot(&["status", "--dsn", &db.user_dsn("observer", "")]),
        Duration::from_secs(15),
    )
    .await;
    assert!(r.code.is_some_and(|c| c != 0), "{r}");
}
