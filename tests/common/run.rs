//! Driving the `innopilot` binary in black-box tests: a temp dir with a config, audit
//! log and state file; spawning `run` and the one-shot commands; reading the audit log
//! back and waiting for a record in it (the first decision, the n-th start, …);
//! stopping (SIGTERM, exit 0 owed) and killing a run; the server's knobs as innopilot
//! sees them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::{innopilot_bin, MariaDb};

/// One innopilot installation: its config, audit log and state file in a temp dir.
pub struct Run {
    pub dir: tempfile::TempDir,
}

impl Run {
    /// Writes `config` (TOML) with `control.state_file` pointed into the temp dir, so
    /// `status --config` finds the state of a `run` started with the same config. The
    /// config must contain a `[control]` section.
    pub fn with_config(config: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state.json");
        assert!(
            config.contains("[control]\n"),
            "test configs need a [control] section"
        );
        let config = config.replacen(
            "[control]\n",
            &format!(
                "[control]\nstate_file = {:?}\n",
                state.display().to_string()
            ),
            1,
        );
        std::fs::write(dir.path().join("innopilot.toml"), config).unwrap();
        Run { dir }
    }

    pub fn config(&self) -> PathBuf {
        self.dir.path().join("innopilot.toml")
    }

    pub fn audit(&self) -> PathBuf {
        self.dir.path().join("audit.jsonl")
    }

    pub fn state(&self) -> PathBuf {
        self.dir.path().join("state.json")
    }

    /// `innopilot run <extra> --config .. --dsn .. --audit .. --state-file ..`.
    pub fn spawn(&self, dsn: &str, extra: &[&str]) -> Child {
        self.spawn_at(dsn, extra, &self.audit(), &self.state())
    }

    /// As [`Run::spawn`], with an audit log and a state file of the test's choosing.
    pub fn spawn_at(&self, dsn: &str, extra: &[&str], audit: &Path, state: &Path) -> Child {
        innopilot_cmd(&["run"])
            .args(extra)
            .arg("--config")
            .arg(self.config())
            .arg("--dsn")
            .arg(dsn)
            .arg("--audit")
            .arg(audit)
            .arg("--state-file")
            .arg(state)
            .spawn()
            .expect("spawn innopilot run")
    }

    /// Runs another subcommand with this config and DSN to completion.
    pub fn command(&self, dsn: &str, args: &[&str]) -> Output {
        Command::new(innopilot_bin())
            .args(args)
            .arg("--config")
            .arg(self.config())
            .arg("--dsn")
            .arg(dsn)
            .output()
            .expect("run innopilot")
    }

    /// `innopilot restore` with this config and state file.
    pub fn restore(&self, dsn: &str) -> Output {
        self.command(
            dsn,
            &["restore", "--state-file", self.state().to_str().unwrap()],
        )
    }

    /// `innopilot release KNOB` against this run's state file.
    pub fn release(&self, dsn: &str, knob: &str) -> Output {
        self.command(
            dsn,
            &[
                "release",
                knob,
                "--state-file",
                self.state().to_str().unwrap(),
            ],
        )
    }

    /// `innopilot status --json` with this config, which must succeed.
    pub fn status_json(&self, dsn: &str) -> serde_json::Value {
        let out = succeeded(self.command(dsn, &["status", "--json"]));
        serde_json::from_slice(&out.stdout).unwrap()
    }

    pub fn records(&self) -> Vec<serde_json::Value> {
        read_jsonl(&self.audit())
    }
}

/// `innopilot <args>` as a long-running command: logging at info, no stdin, stdout and
/// stderr piped for the test to read.
pub fn innopilot_cmd(args: &[&str]) -> Command {
    let mut c = Command::new(innopilot_bin());
    c.args(args)
        .env("RUST_LOG", "innopilot=info")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

pub fn read_jsonl(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

pub fn events<'a>(recs: &'a [serde_json::Value], event: &str) -> Vec<&'a serde_json::Value> {
    recs.iter().filter(|r| r["event"] == event).collect()
}

/// Sends a signal by name ("TERM", "KILL", "STOP", "CONT", "HUP") to a pid.
pub fn signal_pid(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()
        .expect("run kill")
        .success();
    assert!(ok, "kill -{sig} {pid} failed");
}

pub fn signal(child: &Child, sig: &str) {
    signal_pid(child.id(), sig);
}

/// Waits for the child to exit, killing it after `limit`; returns (code, stderr).
pub fn wait_exit(mut child: Child, limit: Duration) -> (Option<i32>, String) {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                use std::io::Read;
                let _ = e.read_to_string(&mut err);
            }
            return (status.code(), err);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("innopilot did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// SIGTERM, then waits (at most `limit`) for the clean exit a stop owes: code 0.
/// Returns the run's stderr.
pub fn stop(child: Child, limit: Duration) -> String {
    signal(&child, "TERM");
    let (code, err) = wait_exit(child, limit);
    assert_eq!(code, Some(0), "stderr: {err}");
    err
}

/// SIGKILL, and reaps the process (at most 10 s): a crash, whatever its exit says.
pub fn kill(child: Child) {
    signal(&child, "KILL");
    let _ = wait_exit(child, Duration::from_secs(10));
}

/// Asserts that a finished command succeeded (its stderr is the message); returns it.
pub fn succeeded(out: Output) -> Output {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Runs the innopilot binary, which must succeed, and parses its standard output as
/// one JSON document.
pub fn innopilot_json(args: &[&str]) -> serde_json::Value {
    let out = succeeded(Command::new(innopilot_bin()).args(args).output().unwrap());
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A whole scenario stays within its time budget: slower means something hangs.
pub fn assert_took_less(t0: Instant, limit: Duration) {
    assert!(t0.elapsed() < limit, "took {:?}", t0.elapsed());
}

/// Every global variable, as the server reports it.
pub async fn globals(db: &MariaDb) -> BTreeMap<String, Option<String>> {
    db.query_rows("SHOW GLOBAL VARIABLES")
        .await
        .into_iter()
        .filter_map(|r| Some((r.first()?.clone()?, r.get(1)?.clone())))
        .collect()
}

/// The knobs innopilot may touch, as the server reports them.
pub async fn knob_values(db: &MariaDb) -> BTreeMap<String, Option<String>> {
    globals(db)
        .await
        .into_iter()
        .filter(|(k, _)| innopilot::server::Knob::from_var_name(k).is_some())
        .collect()
}

pub async fn knob(db: &MariaDb, name: &str) -> u64 {
    db.global_variable(name).await.unwrap().parse().unwrap()
}

/// Waits until the audit log has a record that `pred` accepts; returns the first such.
pub async fn wait_for_record(
    run: &Run,
    what: &str,
    limit: Duration,
    pred: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    super::eventually(what, limit, Duration::from_millis(200), || async {
        run.records().into_iter().find(|r| pred(r))
    })
    .await
}

/// Waits until the audit log has `n` records of `event` (the first is `n = 1`);
/// returns the `n`-th.
pub async fn wait_for_event(
    run: &Run,
    event: &str,
    n: usize,
    limit: Duration,
) -> serde_json::Value {
    assert!(n >= 1, "records are counted from 1");
    super::eventually(
        &format!("{n} {event} record(s) in the audit log"),
        limit,
        Duration::from_millis(100),
        || async {
            events(&run.records(), event)
                .get(n - 1)
                .map(|r| (*r).clone())
        },
    )
    .await
}

/// Whether an audit record is an `event` about `knob`.
pub fn is(r: &serde_json::Value, event: &str, knob: &str) -> bool {
    r["event"] == event && r["knob"] == knob
}

/// Waits until the audit log has a decision on `knob_name` that was applied.
pub async fn wait_for_applied(run: &Run, knob_name: &str, limit: Duration) -> serde_json::Value {
    wait_for_record(
        run,
        &format!("an applied decision on {knob_name} in the audit log"),
        limit,
        |r| is(r, "decision", knob_name) && r["applied"] == true,
    )
    .await
}

/// Waits until the server's `name` differs from `from` (innopilot moved it); returns it.
pub async fn wait_knob_moved(db: &MariaDb, name: &str, from: u64, limit: Duration) -> u64 {
    super::eventually(
        &format!("{name} moved off {from}"),
        limit,
        Duration::from_millis(100),
        || async {
            let v = knob(db, name).await;
            (v != from).then_some(v)
        },
    )
    .await
}

/// Wall-clock milliseconds since the Unix epoch, as audit records carry them (the
/// library's own clock).
pub fn unix_ms() -> u64 {
    innopilot::server::sample::unix_ms_now()
}

/// `innopilot ARGS` with none of the INNOPILOT_* settings of the environment, so only
/// the arguments decide where it connects.
pub fn innopilot_isolated(args: &[&str]) -> Output {
    Command::new(innopilot_bin())
        .args(args)
        .env_remove("INNOPILOT_DSN")
        .env_remove("INNOPILOT_PASSWORD")
        .env_remove("INNOPILOT_CONFIG")
        .env("RUST_LOG", "warn")
        .output()
        .expect("running innopilot")
}

/// GET over plain TCP on loopback: (status, body); `None` when nothing answers.
pub fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let addr: std::net::SocketAddr = ([127, 0, 0, 1], port).into();
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    s.set_write_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n").ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let status = out.split(' ').nth(1)?.parse().ok()?;
    let body = out
        .split_once("\r\n\r\n")
        .map(|x| x.1)
        .unwrap_or("")
        .to_string();
    Some((status, body))
}
