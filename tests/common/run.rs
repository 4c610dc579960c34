//! Driving the `innopilot` binary in black-box tests: a temp dir with a config, audit
//! log and state file; spawning `run`; reading the audit log back; signals and exits.

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
        Command::new(innopilot_bin())
            .arg("run")
            .args(extra)
            .arg("--config")
            .arg(self.config())
            .arg("--dsn")
            .arg(dsn)
            .arg("--audit")
            .arg(audit)
            .arg("--state-file")
            .arg(state)
            .env("RUST_LOG", "innopilot=info")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
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

    pub fn records(&self) -> Vec<serde_json::Value> {
        read_jsonl(&self.audit())
    }
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

/// Waits until the audit log has a decision on `knob_name` that was applied.
pub async fn wait_for_applied(run: &Run, knob_name: &str, limit: Duration) -> serde_json::Value {
    super::eventually(
        &format!("an applied decision on {knob_name} in the audit log"),
        limit,
        Duration::from_millis(200),
        || async {
            run.records().into_iter().find(|r| {
                r["event"] == "decision" && r["knob"] == knob_name && r["applied"] == true
            })
        },
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
