//! `innopilot drain`: let purge catch up before a shutdown (seed 000: "let it purge
//! before shutdown"). A server stopped with a long history restarts with that debt,
//! and a cold buffer pool makes purging it I/O-bound, right when users come back.
//!
//! How it waits:
//! - **MariaDB** (10.5.7+): `SET GLOBAL innodb_max_purge_lag_wait = N` on a session of
//!   its own blocks until history ≤ N; the server also nudges purge and flushing while
//!   it waits. The sampling connection reports progress meanwhile. On timeout or
//!   Ctrl-C the waiting statement is stopped with `KILL QUERY <its connection id>` (a
//!   closed client socket alone would leave it waiting in the server).
//! - **MySQL**, or where that variable is missing or not allowed: polls the history
//!   every progress interval.
//!
//! `--boost` raises `innodb_purge_threads` (where dynamic) and `innodb_io_capacity`
//! (with `innodb_io_capacity_max` first when needed) for the duration, never above
//! `[knobs.*] max` nor the server's limit, never below what is in effect, and puts
//! them back in every case: done, timed out, interrupted, or failed. Only a `kill -9`
//! can leave a boost behind; the values to restore are printed when it is applied.
//!
//! Everything goes through the [`Server`] trait (the wait is
//! [`Server::wait_for_history_at_most`], stopping it [`Server::kill_query`]), so a drain
//! runs the same on the simulator, where the tests run it.
//!
//! Exit codes (see `main.rs`): 0 done, 1 error, 2 bad arguments, 3 missing privilege
//! (for `--boost` or the MariaDB wait), 5 timed out, 130 interrupted.

use std::collections::BTreeMap;
use std::future::Future;
use std::io::Write;
use std::time::Duration;

use tokio::time::{Instant, MissedTickBehavior};

use crate::config::KnobLimits;
use crate::control::actuator::order_changes;
use crate::server::{Capabilities, Flavor, Knob, KnobValues, Server, ServerError, WaitFuture};
use crate::signals::{SignalWindow, Signals};

/// What to do.
#[derive(Debug, Clone)]
pub struct DrainOptions {
    /// Stop once history ≤ this.
    pub target: u64,
    /// Give up after this long (exit 5).
    pub timeout: Duration,
    /// Temporary values for purge threads and io_capacity, or none.
    pub boost: Option<Boost>,
    /// How often progress is sampled and printed.
    pub progress_every: Duration,
    /// Poll even where `innodb_max_purge_lag_wait` exists.
    pub poll_only: bool,
}

/// The temporary boost requested.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Boost {
    pub purge_threads: u64,
    pub io_capacity: u64,
}

/// How the drain ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    Done,
    TimedOut,
    Interrupted,
}

/// The summary of a drain.
#[derive(Debug, Clone)]
pub struct DrainReport {
    pub ended: Ended,
    pub start_history: u64,
    pub end_history: Option<u64>,
    pub elapsed: Duration,
    /// "innodb_max_purge_lag_wait" or "polling".
    pub method: &'static str,
    /// (knob, boosted to, restored to, restored ok) for each boosted knob.
    pub boosted: Vec<(Knob, u64, u64, bool)>,
}

impl DrainReport {
    pub fn boost_restored(&self) -> bool {
        self.boosted.iter().all(|b| b.3)
    }

    /// "history 120000 -> 900 in 42s (target 1000, polling)": how the drain went, for
    /// the final line whatever the ending.
    pub fn summary(&self, target: u64) -> String {
        format!(
            "history {} -> {} in {} (target {target}, {})",
            self.start_history,
            self.end_history
                .map(|h| h.to_string())
                .unwrap_or_else(|| "unknown".into()),
            short_duration(self.elapsed.as_secs_f64()),
            self.method
        )
    }
}

/// A drain failure (exit 1, or 3 for a privilege).
#[derive(Debug, thiserror::Error)]
pub enum DrainError {
    #[error(transparent)]
    Server(#[from] ServerError),
    #[error("this server does not report the history list length, so innopilot cannot tell when purge is done")]
    NoHistory,
    #[error("--boost needs SET GLOBAL: the account {account} has neither SUPER nor SYSTEM_VARIABLES_ADMIN")]
    BoostDenied { account: String },
    #[error("{0}")]
    NotRestored(String),
}

impl DrainError {
    pub fn exit_code(&self) -> u8 {
        match self {
            DrainError::BoostDenied { .. } => 3,
            DrainError::Server(ServerError::Denied { .. }) => 3,
            _ => 1,
        }
    }
}

/// The changes a boost makes: (knob, from, to), ordered so io_capacity_max is raised
/// before io_capacity. Nothing is lowered; nothing goes past `[knobs.*] max` or the
/// server's own maximum; knobs this server cannot change are skipped.
pub fn plan_boost(
    boost: Boost,
    current: &KnobValues,
    caps: &Capabilities,
    limits: &BTreeMap<Knob, KnobLimits>,
) -> Vec<(Knob, u64, u64)> {
    let ceiling = |knob: Knob, want: u64| -> u64 {
        let mut v = want;
        if let Some(l) = limits.get(&knob) {
            v = v.min(l.max);
        }
        if let Some(m) = caps.knob(knob).and_then(|c| c.server_max) {
            v = v.min(m);
        }
        v
    };
    let mut out = Vec::new();
    if caps.settable(Knob::PurgeThreads) {
        if let Some(&cur) = current.get(&Knob::PurgeThreads) {
            let to = ceiling(Knob::PurgeThreads, boost.purge_threads);
            if to > cur {
                out.push((Knob::PurgeThreads, cur, to));
            }
        }
    }
    if caps.settable(Knob::IoCapacity) {
        if let Some(&cur) = current.get(&Knob::IoCapacity) {
            let to = ceiling(Knob::IoCapacity, boost.io_capacity);
            if to > cur {
                match current.get(&Knob::IoCapacityMax) {
                    Some(&max) if max < to => {
                        if caps.settable(Knob::IoCapacityMax) {
                            out.push((Knob::IoCapacityMax, max, to));
                            out.push((Knob::IoCapacity, cur, to));
                        } else if max > cur {
                            // Capacity may not pass the maximum the server keeps.
                            out.push((Knob::IoCapacity, cur, max));
                        }
                    }
                    _ => out.push((Knob::IoCapacity, cur, to)),
                }
            }
        }
    }
    order_changes(&mut out);
    out
}

/// Seconds as "1h02m", "3m05s", "42s".
pub fn short_duration(secs: f64) -> String {
    if !secs.is_finite() || secs < 0.0 {
        return "?".into();
    }
    let s = secs.round() as u64;
    if s >= 3600 {
        format!("{}h{:02}m", s / 3600, (s % 3600) / 60)
    } else if s >= 60 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}

/// One progress line: history, target, a bar of the way from the start, rate, ETA,
/// and the transaction that blocks purge when history is not shrinking.
pub fn progress_line(start: u64, target: u64, sig: &Signals, elapsed: Duration) -> String {
    let Some(h) = sig.history_len else {
        return format!(
            "drain: history unknown ({} elapsed)",
            short_duration(elapsed.as_secs_f64())
        );
    };
    let total = start.saturating_sub(target).max(1) as f64;
    let done = start.saturating_sub(h.max(target)) as f64;
    let frac = (done / total).clamp(0.0, 1.0);
    const WIDTH: usize = 20;
    let filled = (frac * WIDTH as f64).round() as usize;
    let bar: String = "#".repeat(filled) + &"-".repeat(WIDTH - filled);
    let mut line = format!(
        "drain: history {h} -> {target} [{bar}] {:>3.0}%",
        frac * 100.0
    );
    match sig.history_rate {
        Some(r) if r.is_finite() => {
            line.push_str(&format!("  {r:+.0}/s"));
            if r < -0.5 && h > target {
                line.push_str(&format!(
                    "  ETA {}",
                    short_duration((h - target) as f64 / -r)
                ));
            } else if h > target {
                line.push_str("  ETA -");
            }
        }
        _ => line.push_str("  rate -"),
    }
    line.push_str(&format!(
        "  ({} elapsed)",
        short_duration(elapsed.as_secs_f64())
    ));
    let not_shrinking = sig.history_rate.is_none_or(|r| r >= -0.5);
    if let Some(t) = sig.sample.oldest_trx.as_ref() {
        if not_shrinking && t.holds_read_view && t.age_s >= 5 && h > target {
            line.push_str(&format!(
                "; purge appears blocked, presumably by {} (connection {}, {}@{}, {} s old; `innopilot diagnose` confirms)",
                trx_name(&t.trx_id),
                t.thread_id
                    .map(|i| i.to_string())
                    .unwrap_or_else(|| "?".into()),
                t.user.as_deref().unwrap_or("?"),
                t.host.as_deref().unwrap_or("?"),
                t.age_s
            ));
        }
    }
    line
}

/// "transaction 1234", or "a read-only transaction" for InnoDB's id 0 (read-only
/// transactions get no id, and a consistent snapshot is one).
pub fn trx_name(trx_id: &str) -> String {
    if trx_id == "0" || trx_id.is_empty() {
        "a read-only transaction".into()
    } else {
        format!("transaction {trx_id}")
    }
}

/// Writes progress to standard error (or any writer): a line rewritten in place on a
/// terminal, one line per update otherwise (journald, files, tests).
pub struct Progress {
    out: Box<dyn Write + Send>,
    tty: bool,
    quiet: bool,
    dirty: bool,
}

impl Progress {
    pub fn stderr(quiet: bool) -> Self {
        Progress {
            out: Box::new(std::io::stderr()),
            tty: std::io::IsTerminal::is_terminal(&std::io::stderr()),
            quiet,
            dirty: false,
        }
    }

    /// One line per update to `out` (what a drain on the simulator is checked by).
    pub fn to_writer(out: Box<dyn Write + Send>) -> Self {
        Progress {
            out,
            tty: false,
            quiet: false,
            dirty: false,
        }
    }

    pub fn update(&mut self, line: &str) {
        if self.quiet {
            return;
        }
        let text = if self.tty {
            self.dirty = true;
            format!("\r\x1b[2K{line}")
        } else {
            format!("{line}\n")
        };
        self.write(&text);
    }

    pub fn note(&mut self, line: &str) {
        let mut text = String::new();
        if self.dirty {
            text.push('\n');
            self.dirty = false;
        }
        text.push_str(line);
        text.push('\n');
        self.write(&text);
    }

    /// One write per line, so a line is never split by other output.
    fn write(&mut self, text: &str) {
        let _ = self.out.write_all(text.as_bytes());
        let _ = self.out.flush();
    }
}

/// Runs a drain. `interrupt` resolves on Ctrl-C / SIGTERM. The boost, if any, is
/// restored before this returns, whatever happened.
pub async fn drain<S, F>(
    server: &mut S,
    limits: &BTreeMap<Knob, KnobLimits>,
    opts: &DrainOptions,
    interrupt: F,
    progress: &mut Progress,
) -> Result<DrainReport, DrainError>
where
    S: Server,
    F: Future<Output = String>,
{
    let started = Instant::now();
    let caps = server.probe().await?;
    let mut window = SignalWindow::new(Duration::from_secs(10).max(opts.progress_every * 5));
    let first = window.push(server.sample().await?);
    let start_history = first.history_len.ok_or(DrainError::NoHistory)?;
    let mut report = DrainReport {
        ended: Ended::Done,
        start_history,
        end_history: Some(start_history),
        elapsed: Duration::ZERO,
        method: "none",
        boosted: Vec::new(),
    };
    if start_history <= opts.target {
        progress.note(&format!(
            "drain: history {start_history} is already at or below the target {}",
            opts.target
        ));
        return Ok(report);
    }
    progress.note(&format!(
        "drain: {} {}: history {start_history}, waiting for <= {} (timeout {})",
        caps.identity.flavor,
        caps.identity.version,
        opts.target,
        humantime::format_duration(opts.timeout)
    ));

    // Boost, remembering exactly what to put back.
    let mut applied: Vec<(Knob, u64, u64)> = Vec::new();
    let mut boost_error = None;
    if let Some(b) = opts.boost {
        if !caps.can_set_global {
            return Err(DrainError::BoostDenied {
                account: caps.account.clone(),
            });
        }
        let plan = plan_boost(b, &first.sample.knobs, &caps, limits);
        if plan.is_empty() {
            progress.note("drain: --boost: nothing to raise on this server (already at or above the boost, or not dynamic)");
        }
        for (knob, from, to) in plan {
            match server.set_knob(knob, to).await {
                Ok(rb) => {
                    progress.note(&format!(
                        "drain: boost {knob} {from} -> {rb} (restored to {from} at the end; by hand: SET GLOBAL {knob} = {from};)"
                    ));
                    applied.push((knob, from, rb));
                }
                Err(e) => {
                    boost_error = Some(e);
                    break;
                }
            }
        }
    }

    let outcome = if let Some(e) = boost_error {
        Err(DrainError::Server(e))
    } else {
        wait_phase(
            server,
            &caps,
            opts,
            interrupt,
            progress,
            &mut window,
            started,
        )
        .await
    };

    // Always put the boost back, in the safe order (io_capacity before its maximum).
    let mut restore: Vec<(Knob, u64, u64)> = applied
        .iter()
        .map(|(k, from, to)| (*k, *to, *from))
        .collect();
    order_changes(&mut restore);
    let mut not_restored = Vec::new();
    for (knob, boosted, original) in restore {
        let r =
            tokio::time::timeout(Duration::from_secs(10), server.set_knob(knob, original)).await;
        let ok = matches!(r, Ok(Ok(v)) if v == original);
        if ok {
            progress.note(&format!("drain: restored {knob} = {original}"));
        } else {
            let why = match r {
                Err(_) => "no answer within 10s".to_string(),
                Ok(Err(e)) => e.to_string(),
                Ok(Ok(v)) => format!("reads back {v}"),
            };
            not_restored.push(format!(
                "{knob} (set it back with: SET GLOBAL {knob} = {original};): {why}"
            ));
        }
        report.boosted.push((knob, boosted, original, ok));
    }
    report.elapsed = started.elapsed();
    let (ended, end_history, method) = outcome?;
    report.ended = ended;
    report.end_history = end_history;
    report.method = method;
    if !not_restored.is_empty() {
        return Err(DrainError::NotRestored(format!(
            "the boost could not be fully restored: {}",
            not_restored.join("; ")
        )));
    }
    Ok(report)
}

async fn wait_phase<S, F>(
    server: &mut S,
    caps: &Capabilities,
    opts: &DrainOptions,
    interrupt: F,
    progress: &mut Progress,
    window: &mut SignalWindow,
    started: Instant,
) -> Result<(Ended, Option<u64>, &'static str), DrainError>
where
    S: Server,
    F: Future<Output = String>,
{
    let target = opts.target;
    let deadline = started + opts.timeout;
    let start_history = window
        .push(server.sample().await?)
        .history_len
        .unwrap_or(target);
    let mut last_history = Some(start_history);

    // MariaDB: the server waits for us on a session of its own.
    let mut waiter: Option<WaitFuture> = None;
    let mut wait_id = None;
    let mut wait_finished = false;
    let mut method = "polling";
    if caps.identity.flavor == Flavor::MariaDb && !opts.poll_only && target <= u32::MAX as u64 {
        let remaining = deadline.saturating_duration_since(Instant::now());
        match server
            .wait_for_history_at_most(target as u32, remaining)
            .await
        {
            Ok(w) => {
                wait_id = Some(w.session_id);
                waiter = Some(w.done);
                method = "innodb_max_purge_lag_wait";
            }
            Err(e) => progress.note(&format!(
                "drain: cannot open a session for innodb_max_purge_lag_wait ({e}); polling instead"
            )),
        }
    }

    let mut ticker = tokio::time::interval(opts.progress_every);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Skip);
    tokio::pin!(interrupt);
    let timeout = tokio::time::sleep_until(deadline);
    tokio::pin!(timeout);
    let ended = loop {
        tokio::select! {
            r = async { waiter.as_mut().expect("guarded by the select condition").await }, if waiter.is_some() => {
                waiter = None;
                match r {
                    Ok(()) => {
                        wait_finished = true;
                        break Ended::Done;
                    }
                    Err(e @ ServerError::Timeout { .. }) => {
                        tracing::debug!("{e}");
                        break Ended::TimedOut;
                    }
                    Err(e) => {
                        // Interrupted by max_statement_time at the deadline, not
                        // allowed, or unknown here: polling goes on (and decides).
                        if Instant::now() + Duration::from_millis(200) >= deadline {
                            break Ended::TimedOut;
                        }
                        progress.note(&format!("drain: innodb_max_purge_lag_wait ended without success ({e}); polling instead"));
                        wait_id = None;
                        method = "polling";
                        if matches!(e, ServerError::Denied { .. }) && opts.boost.is_none() {
                            progress.note("drain: (SET GLOBAL needs SUPER; polling needs only PROCESS)");
                        }
                    }
                }
            }
            _ = ticker.tick() => {
                match server.sample().await {
                    Ok(s) => {
                        let sig = window.push(s);
                        last_history = sig.history_len.or(last_history);
                        progress.update(&progress_line(start_history, target, &sig, started.elapsed()));
                        if sig.history_len.is_some_and(|h| h <= target) {
                            break Ended::Done;
                        }
                    }
                    Err(e) => {
                        progress.note(&format!("drain: sample failed: {e}"));
                        if e.is_connection_lost() {
                            window.reset();
                        }
                    }
                }
            }
            _ = &mut timeout => break Ended::TimedOut,
            reason = &mut interrupt => {
                progress.note(&format!("drain: interrupted ({reason})"));
                break Ended::Interrupted;
            }
        }
    };
    // Stop the server-side wait unless it finished: dropping the client side (our
    // own timeout, Ctrl-C) does not stop a statement in the server.
    drop(waiter);
    if let (Some(id), false) = (wait_id, wait_finished) {
        if let Err(e) = server.kill_query(id).await {
            // "Unknown thread id": the session already ended.
            if !e.to_string().contains("nknown thread") {
                progress.note(&format!(
                    "drain: could not stop the waiting statement (KILL QUERY {id}): {e}"
                ));
            }
        }
    }
    // The final word on history.
    if let Ok(s) = server.sample().await {
        let sig = window.push(s);
        last_history = sig.history_len.or(last_history);
        progress.update(&progress_line(
            start_history,
            target,
            &sig,
            started.elapsed(),
        ));
    }
    progress.note("");
    Ok((ended, last_history, method))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::testkit::SharedBuf;
    use crate::config::default_limits;
    use crate::server::flavor::ReplicaSource;
    use crate::server::sample::{Sample, TrxInfo};
    use crate::sim::model::SimServer;
    use crate::sim::scenario::{ReadView, SimFlavor};
    use crate::sim::Scenario;

    fn caps(version: &str) -> Capabilities {
        crate::server::flavor::fixture_caps_writable(version, ReplicaSource::NotReplica)
    }

    fn limits() -> BTreeMap<Knob, KnobLimits> {
        Knob::ALL.iter().map(|k| (*k, default_limits(*k))).collect()
    }

    #[test]
    fn boost_raises_max_first_and_never_lowers() {
        let cur = KnobValues::from([
            (Knob::PurgeThreads, 4),
            (Knob::IoCapacity, 200),
            (Knob::IoCapacityMax, 2000),
        ]);
        let b = Boost {
            purge_threads: 8,
            io_capacity: 5000,
        };
        let plan = plan_boost(b, &cur, &caps("10.11.19-MariaDB"), &limits());
        assert_eq!(
            plan,
            vec![
                (Knob::IoCapacityMax, 2000, 5000),
                (Knob::IoCapacity, 200, 5000),
                (Knob::PurgeThreads, 4, 8)
            ]
        );
        // Already above the boost: nothing.
        let high = KnobValues::from([
            (Knob::PurgeThreads, 16),
            (Knob::IoCapacity, 9000),
            (Knob::IoCapacityMax, 9000),
        ]);
        assert!(plan_boost(b, &high, &caps("10.11.19-MariaDB"), &limits()).is_empty());
        // Bounded by [knobs.*] max.
        let mut l = limits();
        l.get_mut(&Knob::PurgeThreads).unwrap().max = 6;
        let plan = plan_boost(b, &cur, &caps("10.11.19-MariaDB"), &l);
        assert!(plan.contains(&(Knob::PurgeThreads, 4, 6)));
        // MySQL: purge threads are read-only.
        let plan = plan_boost(b, &cur, &caps("8.0.40"), &limits());
        assert!(plan.iter().all(|c| c.0 != Knob::PurgeThreads), "{plan:?}");
    }

    #[test]
    fn progress_lines() {
        let sig = Signals {
            history_len: Some(60_000),
            history_rate: Some(-10_000.0),
            ..Signals::default()
        };
        let l = progress_line(110_000, 10_000, &sig, Duration::from_secs(5));
        assert!(l.contains("history 60000 -> 10000"), "{l}");
        assert!(
            l.contains(" 50%") && l.contains("-10000/s") && l.contains("ETA 5s"),
            "{l}"
        );
        let blocked = Signals {
            history_len: Some(60_000),
            history_rate: Some(200.0),
            sample: Sample {
                oldest_trx: Some(TrxInfo {
                    trx_id: "77".into(),
                    thread_id: Some(12),
                    age_s: 30,
                    user: Some("app".into()),
                    host: Some("10.0.0.1".into()),
                    state: None,
                    isolation: None,
                    command: Some("Sleep".into()),
                    holds_read_view: true,
                    active_count: Some(1),
                }),
                ..Sample::default()
            },
            ..Signals::default()
        };
        let l = progress_line(60_000, 0, &blocked, Duration::from_secs(61));
        assert!(
            l.contains("presumably by transaction 77 (connection 12"),
            "{l}"
        );
        assert!(l.contains("ETA -") && l.contains("1m01s elapsed"), "{l}");
    }

    /// A MariaDB or MySQL simulator at 30 % load with `history` records of purge debt
    /// and, optionally, a read view held for the whole run.
    fn sim_server(flavor: SimFlavor, history: f64, held_view: bool) -> SimServer {
        let mut sc = Scenario::named("cold_undo_restart").unwrap();
        sc.restarts.clear();
        sc.load = vec![(0.0, 0.3)];
        sc.initial_history = history;
        if held_view {
            sc.views = vec![ReadView {
                start_s: 0.0,
                end_s: 1e9,
            }];
        }
        SimServer::for_scenario(&sc, flavor, 1)
    }

    fn opts(target: u64, timeout_s: u64) -> DrainOptions {
        DrainOptions {
            target,
            timeout: Duration::from_secs(timeout_s),
            boost: None,
            progress_every: Duration::from_secs(1),
            poll_only: false,
        }
    }

    /// Drains `server` with `opts`; the report (a drain on the simulator does not fail)
    /// and the progress text.
    async fn drain_sim(server: &mut SimServer, opts: &DrainOptions) -> (DrainReport, String) {
        let out = SharedBuf::default();
        let mut progress = Progress::to_writer(Box::new(out.clone()));
        let never = std::future::pending::<String>();
        let r = drain(server, &limits(), opts, never, &mut progress).await;
        let text = out.text();
        (r.unwrap_or_else(|e| panic!("{e}\n{text}")), text)
    }

    #[tokio::test(start_paused = true)]
    async fn drains_purge_debt_on_the_simulator_with_the_server_wait() {
        let mut server = sim_server(SimFlavor::MariaDb1011, 3_000_000.0, false);
        let (r, text) = drain_sim(&mut server, &opts(10_000, 600)).await;
        assert_eq!(
            (r.ended, r.method),
            (Ended::Done, "innodb_max_purge_lag_wait")
        );
        assert!(
            r.start_history >= 1_000_000 && r.end_history < Some(50_000),
            "{r:?}"
        );
        let secs = r.elapsed.as_secs();
        assert!((5..600).contains(&secs), "{r:?}\n{text}");
        assert!(text.contains("drain: history "), "{text}");
        let summary = r.summary(10_000);
        assert!(
            summary.contains("(target 10000, innodb_max_purge_lag_wait)"),
            "{summary}"
        );
        // The wait finished by itself: its session is gone, nothing was killed.
        assert!(server.kill_query(2000).await.is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn polls_where_the_server_cannot_wait() {
        let mut mysql = sim_server(SimFlavor::MySql80, 3_000_000.0, false);
        let (r, text) = drain_sim(&mut mysql, &opts(10_000, 600)).await;
        assert_eq!((r.ended, r.method), (Ended::Done, "polling"), "{text}");
        assert!(r.end_history.unwrap() <= 10_000, "{r:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_held_read_view_times_out_naming_the_blocker() {
        let mut server = sim_server(SimFlavor::MariaDb1011, 400_000.0, true);
        let (r, text) = drain_sim(&mut server, &opts(10_000, 30)).await;
        assert_eq!(r.ended, Ended::TimedOut, "{text}");
        assert!(r.end_history.unwrap() > 10_000, "{r:?}");
        let blocker = "purge appears blocked, presumably by transaction 421000 (connection 1000, report@batch.sim";
        assert!(text.contains(blocker), "{text}");
        // The server-side wait was stopped, not left behind.
        assert!(server.model().session(2000, 100).is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn boost_is_applied_and_restored_on_the_simulator() {
        let mut server = sim_server(SimFlavor::MariaDb1011, 200_000.0, false);
        let before = server.read_knobs().await.unwrap();
        let mut o = opts(10_000, 600);
        o.boost = Some(Boost {
            purge_threads: 8,
            io_capacity: 4000,
        });
        let (r, text) = drain_sim(&mut server, &o).await;
        assert_eq!(r.ended, Ended::Done, "{text}");
        assert!(!r.boosted.is_empty() && r.boost_restored(), "{r:?}");
        assert!(text.contains("drain: boost innodb_purge_threads"), "{text}");
        assert_eq!(server.read_knobs().await.unwrap(), before);
    }

    #[test]
    fn durations() {
        assert_eq!(short_duration(42.2), "42s");
        assert_eq!(short_duration(185.0), "3m05s");
        assert_eq!(short_duration(3720.0), "1h02m");
        assert_eq!(short_duration(f64::NAN), "?");
    }
}
