//! Running the simulator: one scenario with one peer ([`run`]), its [`summary`], its
//! outputs on disk ([`write_outputs`]: CSV time series, summary JSON, decisions, SVG
//! plots), and the whole matrix of peers × scenarios ([`compare`]).
//!
//! Controller peers run the real [`Controller`] (live mode) against the model inside a
//! current-thread tokio runtime: `tick()` in a loop, each tick one virtual second, no
//! sleeping. Its state file lives in a private temporary directory that is removed
//! afterwards; its decisions come from the typed report of every tick.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use serde::Serialize;

use crate::config::Config;
use crate::control::audit::AuditLog;
use crate::control::{Controller, RunOptions, TickDecision};
use crate::server::Server;

use super::model::{Model, Second, SimServer, EPOCH_UNIX_MS};
use super::peers::Peer;
use super::run::{run_knobs, SimDecision, SimRun};
use super::scenario::{Scenario, SimFlavor};
use super::SimError;

/// What the comparison table shows for one run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    pub scenario: String,
    pub peer: String,
    pub flavor: SimFlavor,
    /// Mean throughput among loaded seconds (scenarios with idle gaps between rounds
    /// would otherwise show a mean below their worst loaded second), TPS.
    pub mean_tps: f64,
    /// Worst 1 s throughput among loaded seconds.
    pub worst_tps: f64,
    /// Standard deviation of throughput among loaded seconds.
    pub tps_stddev: f64,
    /// Jitter: standard deviation of served/offered among loaded seconds, percent.
    pub jitter_pct: f64,
    /// 99th percentile over the run of the per-second p99 latency proxy, ms.
    pub latency_p99_ms: f64,
    pub latency_max_ms: f64,
    /// Seconds the foreground spent waiting for sync flushing or undo truncation.
    pub stalled_s: f64,
    pub peak_history: f64,
    pub peak_undo_bytes: f64,
    /// Purge debt left at the end.
    pub end_history: f64,
    pub end_undo_bytes: f64,
    pub max_replica_lag_s: f64,
    /// Transactions whose clients gave up waiting (more than 60 s).
    pub dropped: f64,
    /// Knob changes applied by a controller peer.
    pub sets: usize,
}

static RUN_SEQ: AtomicU64 = AtomicU64::new(0);

/// A private temporary directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(label: &str) -> Result<TempDir, SimError> {
        let n = RUN_SEQ.fetch_add(1, Ordering::Relaxed);
        let safe: String = label
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        let path =
            std::env::temp_dir().join(format!("innopilot-sim-{}-{n}-{safe}", std::process::id()));
        std::fs::create_dir_all(&path).map_err(|e| SimError::Io {
            what: "cannot create the temporary directory",
            path: path.clone(),
            message: e.to_string(),
        })?;
        Ok(TempDir(path))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn control_error(sc: &Scenario, peer: &Peer, e: impl fmt::Display) -> SimError {
    SimError::Control {
        scenario: sc.name.clone(),
        peer: peer.name.to_string(),
        message: e.to_string(),
    }
}

/// Runs the real controller with `cfg` against `server` (which must drive `handle`'s
/// model) until the scenario ends; returns every tick's decisions.
pub(crate) fn drive_controller<S: Server>(
    server: S,
    handle: &SimServer,
    cfg: Config,
    label: &str,
) -> Result<Vec<TickDecision>, String> {
    drive_controller_audited(server, handle, cfg, label, AuditLog::discard()).map(|d| d.decisions)
}

/// What [`drive_controller_audited`] saw.
// The exit's outcome is read only by the exit tests.
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) struct Driven {
    pub decisions: Vec<TickDecision>,
    /// `Controller::shutdown`'s answer: nothing left for an operator.
    pub stopped_clean: bool,
    /// The state file after the exit.
    pub state: Option<crate::control::state::StateFile>,
}

/// [`drive_controller`], writing the audit records to `audit`.
pub(crate) fn drive_controller_audited<S: Server>(
    server: S,
    handle: &SimServer,
    cfg: Config,
    label: &str,
    audit: AuditLog,
) -> Result<Driven, String> {
    drive_controller_after(server, handle, cfg, label, audit, None)
}

/// [`drive_controller_audited`] with the state file an earlier run left, `earlier`:
/// a restart.
pub(crate) fn drive_controller_after<S: Server>(
    server: S,
    handle: &SimServer,
    mut cfg: Config,
    label: &str,
    audit: AuditLog,
    earlier: Option<&crate::control::state::StateFile>,
) -> Result<Driven, String> {
    let dir = TempDir::new(label).map_err(|e| e.to_string())?;
    cfg.control.state_file = dir.0.join("state.json");
    if let Some(saved) = earlier {
        crate::control::state::StateStore::new(&cfg.control.state_file)
            .save(saved)
            .map_err(|e| e.to_string())?;
    }
    cfg.control.dry_run = false;
    cfg.audit.path = dir.0.join("audit.jsonl");
    let mut decisions = Vec::new();
    let state_file = cfg.control.state_file.clone();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(async {
        let opts = RunOptions {
            dry_run: false,
            config_path: None,
            target: "simulator".into(),
        };
        let mut ctl = Controller::start(server, cfg, opts, audit)
            .await
            .map_err(|e| e.to_string())?;
        while !handle.model().finished() {
            let report = ctl.tick().await.map_err(|e| e.to_string())?;
            decisions.extend(report.decisions);
        }
        Ok::<bool, String>(ctl.shutdown("end of simulation").await)
    })
    .and_then(|stopped_clean| {
        let state = crate::control::state::StateStore::new(state_file)
            .load()
            .map_err(|e| e.to_string())?;
        Ok(Driven {
            decisions,
            stopped_clean,
            state,
        })
    })
}

/// The model a peer runs on in a scenario: the peer's flavor (or the scenario's), the
/// scenario's startup configuration with the peer's on top, the seed's random draws.
pub fn model_for(scenario: &Scenario, peer: &Peer, seed: u64) -> Model {
    let sc = scenario.realize(seed);
    let flavor = peer.flavor.unwrap_or(sc.flavor);
    let mut startup = sc.startup_knobs(flavor);
    for (k, v) in &peer.knobs {
        startup.insert(*k, *v);
    }
    if let Some(f) = peer.redo_factor {
        let k = flavor.redo_knob();
        if let Some(v) = startup.get(&k).copied() {
            startup.insert(k, (v as f64 * f) as u64);
        }
    }
    Model::new(&sc, flavor, startup, seed)
}

fn finish(
    scenario: &Scenario,
    peer: &Peer,
    seed: u64,
    model: &mut Model,
    decisions: &[TickDecision],
) -> SimRun {
    let seconds = model.take_seconds();
    let loaded = seconds
        .iter()
        .map(|s| scenario.is_loaded(s.t_s as f64 - 0.5))
        .collect();
    SimRun {
        scenario: scenario.name.clone(),
        scenario_title: scenario.title.clone(),
        seed_ref: scenario.seed_ref.clone(),
        peer: peer.name.to_string(),
        peer_title: peer.title.to_string(),
        flavor: model.flavor(),
        seed,
        duration_s: scenario.duration_s,
        loaded,
        seconds,
        decisions: decisions
            .iter()
            .map(|d| SimDecision::from_tick(d, EPOCH_UNIX_MS))
            .collect(),
        views: scenario
            .realize(seed)
            .views
            .iter()
            .map(|v| (v.start_s, v.end_s))
            .collect(),
    }
}

/// Runs `scenario` with `peer`, seeded.
pub fn run(scenario: &Scenario, peer: &Peer, seed: u64) -> Result<SimRun, SimError> {
    run_with(scenario, peer, seed, None)
}

/// Like [`run`], with `config` in place of a controller peer's own configuration (a
/// DBA's file for the `innopilot` peer). Ignored for static peers.
pub fn run_with(
    scenario: &Scenario,
    peer: &Peer,
    seed: u64,
    config: Option<&Config>,
) -> Result<SimRun, SimError> {
    let handle = SimServer::new(model_for(scenario, peer, seed));
    let cfg = peer.config().map(|own| config.cloned().unwrap_or(own));
    let decisions = match cfg {
        None => {
            let mut m = handle.model();
            while !m.finished() {
                m.advance_second();
            }
            Vec::new()
        }
        Some(cfg) => drive_controller(
            handle.clone(),
            &handle,
            cfg,
            &format!("{}-{}", scenario.name, peer.name),
        )
        .map_err(|e| control_error(scenario, peer, e))?,
    };
    let mut m = handle.model();
    Ok(finish(scenario, peer, seed, &mut m, &decisions))
}

/// Like [`run`] for a controller peer, also writing a recording (header + every sample
/// the controller took) to `recording`, for `innopilot replay`.
pub fn run_recorded(
    scenario: &Scenario,
    peer: &Peer,
    seed: u64,
    recording: &Path,
) -> Result<SimRun, SimError> {
    let handle = SimServer::new(model_for(scenario, peer, seed));
    let io = |e: std::io::Error| SimError::Io {
        what: "cannot write the recording",
        path: recording.to_path_buf(),
        message: e.to_string(),
    };
    let recorder = crate::server::recording::Recorder::create(recording).map_err(io)?;
    let server = crate::server::recording::RecordingServer::new(handle.clone(), recorder);
    let decisions = match peer.config() {
        None => {
            // A static peer: record what a passive `innopilot record` would see.
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
                .map_err(io)?;
            rt.block_on(async {
                let mut server = server;
                server
                    .probe()
                    .await
                    .map_err(|e| control_error(scenario, peer, e))?;
                while !handle.model().finished() {
                    server
                        .sample()
                        .await
                        .map_err(|e| control_error(scenario, peer, e))?;
                }
                Ok::<(), SimError>(())
            })?;
            Vec::new()
        }
        Some(cfg) => drive_controller(
            server,
            &handle,
            cfg,
            &format!("{}-{}-rec", scenario.name, peer.name),
        )
        .map_err(|e| control_error(scenario, peer, e))?,
    };
    let mut m = handle.model();
    Ok(finish(scenario, peer, seed, &mut m, &decisions))
}

fn mean(xs: impl Iterator<Item = f64>) -> (f64, usize) {
    let (mut s, mut n) = (0.0, 0);
    for x in xs {
        s += x;
        n += 1;
    }
    (if n > 0 { s / n as f64 } else { 0.0 }, n)
}

fn stddev(xs: &[f64]) -> f64 {
    if xs.len() < 2 {
        return 0.0;
    }
    let (m, n) = mean(xs.iter().copied());
    (xs.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (n - 1) as f64).sqrt()
}

/// The table's figures for one run.
pub fn summary(run: &SimRun) -> Summary {
    let s = &run.seconds;
    let loaded: Vec<&Second> = s
        .iter()
        .zip(&run.loaded)
        .filter(|(_, l)| **l)
        .map(|(x, _)| x)
        .collect();
    let tps: Vec<f64> = loaded.iter().map(|x| x.throughput_tps).collect();
    let served: Vec<f64> = loaded
        .iter()
        .map(|x| x.throughput_tps / x.offered_tps.max(1.0))
        .collect();
    let mut lat: Vec<f64> = s.iter().map(|x| x.latency_p99_ms).collect();
    lat.sort_by(f64::total_cmp);
    let p99 = if lat.is_empty() {
        0.0
    } else {
        lat[((lat.len() as f64 * 0.99).ceil() as usize).clamp(1, lat.len()) - 1]
    };
    let max = |f: &dyn Fn(&Second) -> f64| s.iter().map(f).fold(0.0, f64::max);
    let last = s.last();
    Summary {
        scenario: run.scenario.clone(),
        peer: run.peer.clone(),
        flavor: run.flavor,
        mean_tps: mean(tps.iter().copied()).0,
        worst_tps: tps
            .iter()
            .copied()
            .fold(f64::INFINITY, f64::min)
            .min(f64::MAX),
        tps_stddev: stddev(&tps),
        jitter_pct: stddev(&served) * 100.0,
        latency_p99_ms: p99,
        latency_max_ms: lat.last().copied().unwrap_or(0.0),
        stalled_s: s.iter().map(|x| x.stalled_s).sum(),
        peak_history: max(&|x| x.history),
        peak_undo_bytes: max(&|x| x.undo_bytes),
        end_history: last.map_or(0.0, |x| x.history),
        end_undo_bytes: last.map_or(0.0, |x| x.undo_bytes),
        max_replica_lag_s: max(&|x| x.replica_lag_s),
        dropped: s.iter().map(|x| x.dropped).sum(),
        sets: run
            .decisions
            .iter()
            .filter(|d| d.outcome == "applied" || d.outcome == "clipped")
            .count(),
    }
}

/// The time series as CSV: one row per virtual second, one column per signal and knob.
pub fn to_csv(run: &SimRun) -> String {
    let knobs = run_knobs(run);
    let mut out = String::from(
        "t_s,offered_tps,throughput_tps,latency_p99_ms,backlog,dropped,history,purgeable,purge_rate,\
         undo_bytes,redo_fill_ratio,dirty_pages,flush_rate,stalled_s,dml_delay_us,replica_lag_s,\
         purge_cores",
    );
    for k in &knobs {
        out.push(',');
        out.push_str(k.var_name());
    }
    out.push('\n');
    for s in &run.seconds {
        out.push_str(&format!(
            "{},{:.1},{:.1},{:.3},{:.1},{:.1},{:.0},{:.0},{:.1},{:.0},{:.4},{:.0},{:.1},{:.3},{:.0},{:.1},{:.3}",
            s.t_s,
            s.offered_tps,
            s.throughput_tps,
            s.latency_p99_ms,
            s.backlog,
            s.dropped,
            s.history,
            s.purgeable,
            s.purge_rate,
            s.undo_bytes,
            s.redo_fill,
            s.dirty_pages,
            s.flush_rate,
            s.stalled_s,
            s.dml_delay_us,
            s.replica_lag_s,
            s.purge_cores,
        ));
        for k in &knobs {
            out.push(',');
            if let Some(v) = s.knobs.get(k) {
                out.push_str(&v.to_string());
            }
        }
        out.push('\n');
    }
    out
}

/// Writes `timeseries.csv`, `summary.json`, `decisions.jsonl` and the SVG plots into
/// `dir` (created if missing). Returns the files written.
pub fn write_outputs(run: &SimRun, dir: &Path) -> Result<Vec<PathBuf>, SimError> {
    write_outputs_compared(run, None, dir)
}

/// [`write_outputs`], with the plots also showing `baseline` (the same scenario under
/// another policy) on the same axes, so a reader sees whether the policy helped.
pub fn write_outputs_compared(
    run: &SimRun,
    baseline: Option<&SimRun>,
    dir: &Path,
) -> Result<Vec<PathBuf>, SimError> {
    let io = |path: &Path, e: std::io::Error| SimError::Io {
        what: "cannot write",
        path: path.to_path_buf(),
        message: e.to_string(),
    };
    std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
    let mut written = Vec::new();
    let csv = dir.join("timeseries.csv");
    std::fs::write(&csv, to_csv(run)).map_err(|e| io(&csv, e))?;
    written.push(csv);
    let json = dir.join("summary.json");
    #[derive(Serialize)]
    struct Out<'a> {
        scenario: &'a str,
        scenario_title: &'a str,
        seed_ref: &'a str,
        peer: &'a str,
        peer_title: &'a str,
        seed: u64,
        duration_s: f64,
        summary: Summary,
    }
    let body = serde_json::to_string_pretty(&Out {
        scenario: &run.scenario,
        scenario_title: &run.scenario_title,
        seed_ref: &run.seed_ref,
        peer: &run.peer,
        peer_title: &run.peer_title,
        seed: run.seed,
        duration_s: run.duration_s,
        summary: summary(run),
    })
    .unwrap_or_default();
    std::fs::write(&json, body + "\n").map_err(|e| io(&json, e))?;
    written.push(json);
    let dec = dir.join("decisions.jsonl");
    let mut text = String::new();
    for d in &run.decisions {
        text.push_str(&serde_json::to_string(d).unwrap_or_default());
        text.push('\n');
    }
    std::fs::write(&dec, text).map_err(|e| io(&dec, e))?;
    written.push(dec);
    let mut arms = vec![run];
    arms.extend(baseline);
    written.extend(super::plot::write_svgs(&arms, dir)?);
    Ok(written)
}

/// Options for [`compare_with`].
#[derive(Debug, Clone)]
pub struct CompareOptions {
    pub seed: u64,
    pub scenarios: Vec<Scenario>,
    pub peers: Vec<Peer>,
    /// Worker threads (0: as many as the machine has cores).
    pub threads: usize,
    /// Configuration for the `innopilot` peer instead of the defaults (`--config`).
    pub innopilot_config: Option<Config>,
}

impl CompareOptions {
    /// Every built-in scenario and peer.
    pub fn all(seed: u64) -> Self {
        CompareOptions {
            seed,
            scenarios: Scenario::all(),
            peers: Peer::all(),
            threads: 0,
            innopilot_config: None,
        }
    }
}

/// Every peer on every scenario.
#[derive(Debug, Clone, Serialize)]
pub struct CompareTable {
    pub seed: u64,
    /// Scenario names with their titles and seed references, in order.
    pub scenarios: Vec<(String, String, String)>,
    pub rows: Vec<Summary>,
}

/// Runs every built-in peer on every built-in scenario (in parallel; the result does
/// not depend on the number of threads).
pub fn compare(seed: u64) -> Result<CompareTable, SimError> {
    compare_with(&CompareOptions::all(seed))
}

pub fn compare_with(opts: &CompareOptions) -> Result<CompareTable, SimError> {
    let cells: Vec<(&Scenario, &Peer)> = opts
        .scenarios
        .iter()
        .flat_map(|s| opts.peers.iter().map(move |p| (s, p)))
        .collect();
    let threads = match opts.threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    }
    .min(cells.len().max(1));
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Result<Summary, SimError>>>> =
        Mutex::new((0..cells.len()).map(|_| None).collect());
    // Longest cells first would balance better, but order does not change results.
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some((s, p)) = cells.get(i) else { break };
                let cfg = opts
                    .innopilot_config
                    .as_ref()
                    .filter(|_| p.name == "innopilot");
                let r = run_with(s, p, opts.seed, cfg).map(|r| summary(&r));
                results.lock().unwrap_or_else(|e| e.into_inner())[i] = Some(r);
            });
        }
    });
    let mut rows = Vec::new();
    for r in results.into_inner().unwrap_or_else(|e| e.into_inner()) {
        match r {
            Some(Ok(s)) => rows.push(s),
            Some(Err(e)) => return Err(e),
            None => {}
        }
    }
    Ok(CompareTable {
        seed: opts.seed,
        scenarios: opts
            .scenarios
            .iter()
            .map(|s| (s.name.clone(), s.title.clone(), s.seed_ref.clone()))
            .collect(),
        rows,
    })
}

impl CompareTable {
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    pub fn get(&self, scenario: &str, peer: &str) -> Option<&Summary> {
        self.rows
            .iter()
            .find(|r| r.scenario == scenario && r.peer == peer)
    }
}

fn si(x: f64) -> String {
    let a = x.abs();
    if a >= 10e6 {
        format!("{:.0}M", x / 1e6)
    } else if a >= 1e6 {
        format!("{:.1}M", x / 1e6)
    } else if a >= 10e3 {
        format!("{:.0}k", x / 1e3)
    } else if a >= 1e3 {
        format!("{:.1}k", x / 1e3)
    } else {
        format!("{x:.0}")
    }
}

impl fmt::Display for CompareTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let head = [
            "peer",
            "flavor",
            "mean tps",
            "worst 1s",
            "jitter%",
            "p99 ms",
            "stalled s",
            "peak hist",
            "peak undo",
            "end hist",
            "max lag s",
            "dropped",
            "sets",
        ];
        let mut lines: Vec<Vec<String>> = Vec::new();
        let mut widths: Vec<usize> = head.iter().map(|h| h.len()).collect();
        for r in &self.rows {
            let cells = vec![
                r.peer.clone(),
                r.flavor.name().to_string(),
                si(r.mean_tps),
                si(r.worst_tps),
                format!("{:.1}", r.jitter_pct),
                if r.latency_p99_ms >= 100.0 {
                    format!("{:.0}", r.latency_p99_ms)
                } else {
                    format!("{:.1}", r.latency_p99_ms)
                },
                format!("{:.1}", r.stalled_s),
                si(r.peak_history),
                format!("{:.0}M", r.peak_undo_bytes / 1_048_576.0),
                si(r.end_history),
                if r.max_replica_lag_s > 0.0 {
                    format!("{:.0}", r.max_replica_lag_s)
                } else {
                    "-".into()
                },
                si(r.dropped),
                r.sets.to_string(),
            ];
            for (w, c) in widths.iter_mut().zip(&cells) {
                *w = (*w).max(c.chars().count());
            }
            lines.push(cells);
        }
        let row = |f: &mut fmt::Formatter<'_>, cells: &[String]| -> fmt::Result {
            for (i, (c, w)) in cells.iter().zip(&widths).enumerate() {
                if i < 2 {
                    write!(f, "{c:<w$}  ")?;
                } else {
                    write!(f, "{c:>w$}  ")?;
                }
            }
            writeln!(f)
        };
        writeln!(f, "seed {}", self.seed)?;
        for (name, title, seed_ref) in &self.scenarios {
            writeln!(f)?;
            writeln!(f, "{name} (seed {seed_ref}): {title}")?;
            row(f, &head.map(String::from))?;
            for (cells, r) in lines.iter().zip(&self.rows) {
                if &r.scenario == name {
                    row(f, cells)?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use super::*;
    use crate::control::audit::Outcome;
    use crate::server::{Capabilities, Knob, KnobValues, PendingSet, Sample, ServerError};

    /// A resize under way: its knob and value, samples still to go, where to answer.
    type Resizing = (
        Knob,
        u64,
        u32,
        tokio::sync::oneshot::Sender<Result<u64, ServerError>>,
    );

    /// The simulator, except that a blocking knob's SET ends only after `samples` more
    /// samples, as a real resize ends only with a checkpoint. A loop that waited for
    /// it would take no sample meanwhile, and the SET fails after 5 s.
    struct SlowResize {
        inner: SimServer,
        samples: u32,
        /// The server abandons each resize: OK, with the old size read back.
        abandon: bool,
        /// A redo shrink (the exit restore's) never returns, as one waiting for a
        /// checkpoint under load; `Some(true)`: its session is seen running it,
        /// `Some(false)`: its session is gone.
        hang_restore: Option<bool>,
        pending: Option<Resizing>,
        /// Samples taken while each resize was under way.
        during: Arc<Mutex<Vec<u32>>>,
    }

    impl Server for SlowResize {
        async fn probe(&mut self) -> Result<Capabilities, ServerError> {
            self.inner.probe().await
        }

        async fn sample(&mut self) -> Result<Sample, ServerError> {
            if let Some((_, _, left, _)) = self.pending.as_mut() {
                if let Some(n) = self.during.lock().unwrap().last_mut() {
                    *n += 1;
                }
                if *left == 0 {
                    let (knob, value, _, tx) = self.pending.take().unwrap();
                    let r = if self.abandon {
                        let now = self.inner.read_knobs().await?;
                        Ok(now[&knob])
                    } else {
                        self.inner.set_knob(knob, value).await
                    };
                    let _ = tx.send(r);
                } else {
                    *left -= 1;
                }
            }
            self.inner.sample().await
        }

        async fn read_knobs(&mut self) -> Result<KnobValues, ServerError> {
            self.inner.read_knobs().await
        }

        async fn set_knob(&mut self, knob: Knob, value: u64) -> Result<u64, ServerError> {
            self.inner.set_knob(knob, value).await
        }

        async fn start_set(&mut self, knob: Knob, value: u64) -> Result<PendingSet, ServerError> {
            if !knob.is_blocking() {
                return Ok(PendingSet::done(self.inner.set_knob(knob, value).await));
            }
            // A shrink is the exit restore's (the scenario is too short for the
            // policy's own): it ends at once, or never.
            if self.inner.read_knobs().await?[&knob] > value {
                if self.hang_restore.is_some() {
                    return Ok(PendingSet {
                        session_id: Some(SHRINK_SESSION),
                        set: Box::pin(std::future::pending()),
                    });
                }
                return Ok(PendingSet::done(self.inner.set_knob(knob, value).await));
            }
            let (tx, rx) = tokio::sync::oneshot::channel();
            self.pending = Some((knob, value, self.samples, tx));
            self.during.lock().unwrap().push(0);
            Ok(PendingSet {
                session_id: None,
                set: Box::pin(async move {
                    match tokio::time::timeout(Duration::from_secs(5), rx).await {
                        Ok(Ok(r)) => r,
                        _ => Err(ServerError::Unexpected {
                            what: "a test resize",
                            detail: "the loop took no sample while it ran".into(),
                        }),
                    }
                }),
            })
        }

        async fn session(
            &mut self,
            thread_id: u64,
            _max_chars: u32,
        ) -> Result<Option<crate::server::SessionInfo>, ServerError> {
            let running = thread_id == SHRINK_SESSION && self.hang_restore == Some(true);
            Ok(running.then(|| crate::server::SessionInfo {
                command: Some("Query".into()),
                info: Some("SET GLOBAL innodb_log_file_size = 134217728".into()),
                ..Default::default()
            }))
        }
    }

    /// The twin of e_purge_behind evicts from the start, so the purge-rate policy adds
    /// no purge thread over the baseline there, as on the real server (the
    /// eighty-first real-server run); its delay stage still holds the debt.
    #[test]
    fn no_purge_thread_in_the_evicting_twin() {
        let scenario = Scenario::named("purge_behind").unwrap();
        let run = run(&scenario, &Peer::named("innopilot").unwrap(), 1).unwrap();
        let threads: Vec<_> = run
            .decisions
            .iter()
            .filter(|d| d.knob == Knob::PurgeThreads.to_string() && d.to > d.from)
            .collect();
        assert!(threads.is_empty(), "{threads:?}");
        assert!(
            run.decisions
                .iter()
                .any(|d| d.knob == Knob::MaxPurgeLagDelay.to_string() && d.to > 0),
            "no DML delay"
        );
        // The audit says why, although nothing changed: one record of the knob held,
        // naming the rule, and only one (the rule does not change in the run).
        let held: Vec<_> = run
            .decisions
            .iter()
            .filter(|d| d.outcome == "no_change" && d.knob == Knob::PurgeThreads.to_string())
            .collect();
        assert_eq!(held.len(), 1, "{held:?}");
        assert_eq!(held[0].held_by, ["purge_rate: page_cleaner_evicting"]);
    }

    /// The session of a hanging shrink.
    const SHRINK_SESSION: u64 = 77;

    /// A redo resize does not stop the loop (`Server::start_set`): while the server
    /// works on it the controller goes on sampling, and audits the resize as applied
    /// once it has ended.
    fn slow_resize_run(abandon: bool) -> (Vec<TickDecision>, Vec<u32>, Vec<serde_json::Value>) {
        let scenario = Scenario::named("checkpoint_stall").unwrap();
        let peer = Peer::named("innopilot_redo").unwrap();
        let handle = SimServer::new(model_for(&scenario, &peer, 1));
        let during = Arc::new(Mutex::new(Vec::new()));
        let server = SlowResize {
            inner: handle.clone(),
            samples: 10,
            abandon,
            hang_restore: None,
            pending: None,
            during: during.clone(),
        };
        let records = Records::default();
        let audit = AuditLog::to_writer(Box::new(records.clone()));
        let driven = drive_controller_audited(
            server,
            &handle,
            peer.config().unwrap(),
            "slow-resize",
            audit,
        )
        .unwrap();
        let during = during.lock().unwrap().clone();
        let text = String::from_utf8(records.0.lock().unwrap().clone()).unwrap();
        let records: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        (driven.decisions, during, records)
    }

    #[test]
    fn the_loop_samples_while_a_resize_runs() {
        let (decisions, during, records) = slow_resize_run(false);
        let resizes: Vec<&TickDecision> = decisions
            .iter()
            .filter(|d| d.knob == Knob::LogFileSize)
            .collect();
        assert!(
            !during.is_empty(),
            "the simulator's innopilot_redo grew no redo in checkpoint_stall: {resizes:?}"
        );
        assert!(
            during.iter().all(|n| *n >= 10),
            "samples while each resize ran: {during:?}"
        );
        let applied = resizes
            .iter()
            .filter(|d| d.outcome == Outcome::Applied && d.to > d.from)
            .count();
        assert_eq!(
            applied,
            during.len(),
            "each resize audited as applied once it ended: {resizes:?}"
        );
        // Its record says when it was sent: at least the ten samples it ran before
        // the record (one a second). No other record has the field. The next record
        // tells the operator how to keep the size.
        let mut grows = 0;
        for (i, r) in records.iter().enumerate() {
            let sent = r["sent_unix_ms"].as_u64();
            if r["knob"] == "innodb_log_file_size"
                && r["applied"] == true
                && r["to"].as_u64() > r["from"].as_u64()
            {
                grows += 1;
                let (ended, sent) = (r["unix_ms"].as_u64().unwrap(), sent.expect("sent_unix_ms"));
                assert!(ended >= sent + 10_000, "sent {sent}, ended {ended}: {r}");
                let next = &records[i + 1];
                let to = r["to"].as_u64().unwrap() >> 20;
                assert_eq!(next["event"], "warning", "{next}");
                let msg = next["message"].as_str().unwrap();
                assert!(
                    msg.contains(&format!("set innodb_log_file_size = {to}M under [mysqld]")),
                    "{msg}"
                );
            } else {
                assert_eq!(sent, None, "{r}");
            }
        }
        assert_eq!(grows, during.len(), "{records:#?}");
    }

    /// Audit records written to memory.
    #[derive(Clone, Default)]
    struct Records(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Records {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// Runs the checkpoint stall with a redo shrink at exit that never ends, its
    /// session running it (`alive`) or gone; returns the restore and stop records,
    /// the redo's baseline, and what the run left. The exit's quiet test is at 100 %
    /// so that it shrinks: at the default it keeps the grown log (the next tests).
    fn exit_with_a_hanging_shrink(alive: bool) -> (Vec<serde_json::Value>, u64, super::Driven) {
        let (events, base, driven, _) = exit_after_a_grow(Some(alive), 100.0);
        (events, base, driven)
    }

    /// The checkpoint stall's run with `innopilot_redo`, stopped at its end (users
    /// still writing) with the exit's quiet test at `quiet_pct` % of the baseline
    /// log's maximum, and a shrink at exit that hangs as `hang` says (`None`: it
    /// returns after ten samples, as every resize here). Also returns the server.
    fn exit_after_a_grow(
        hang: Option<bool>,
        quiet_pct: f64,
    ) -> (Vec<serde_json::Value>, u64, super::Driven, SimServer) {
        let scenario = Scenario::named("checkpoint_stall").unwrap();
        let peer = Peer::named("innopilot_redo").unwrap();
        let handle = SimServer::new(model_for(&scenario, &peer, 1));
        let base = handle.model().knobs()[&Knob::LogFileSize];
        let server = SlowResize {
            inner: handle.clone(),
            samples: 10,
            abandon: false,
            hang_restore: hang,
            pending: None,
            during: Arc::new(Mutex::new(Vec::new())),
        };
        let mut cfg = peer.config().unwrap();
        cfg.control.restore_timeout = Duration::from_millis(200);
        cfg.policy.flush.redo_shrink_fill_pct = quiet_pct;
        let records = Records::default();
        let audit = AuditLog::to_writer(Box::new(records.clone()));
        let driven =
            drive_controller_audited(server, &handle, cfg, "cut-off-shrink", audit).unwrap();
        let text = String::from_utf8(records.0.lock().unwrap().clone()).unwrap();
        let events: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .filter(|r: &serde_json::Value| {
                matches!(
                    r["event"].as_str(),
                    Some("restore") | Some("stop") | Some("kept")
                )
            })
            .collect();
        (events, base, driven, handle)
    }

    /// The redo's restore record, after checking what every exit shares: the knobs
    /// that return at once come first and are restored, the redo was grown, and the
    /// state file still asks for the redo's baseline.
    fn shrink_record(events: &[serde_json::Value], base: u64, driven: &super::Driven) -> usize {
        let shrink = events
            .iter()
            .position(|r| r["knob"] == "innodb_log_file_size")
            .unwrap_or_else(|| panic!("no restore record of the redo: {events:#?}"));
        let r = &events[shrink];
        assert_eq!((&r["ok"], &r["to"]), (&false.into(), &base.into()), "{r}");
        assert!(
            r["from"].as_u64().is_some_and(|f| f > base),
            "the redo was grown during the run: {r}"
        );
        assert!(
            events[..shrink].iter().all(|r| r["ok"] == true),
            "the knobs that return at once, first and restored: {events:#?}"
        );
        let state = driven.state.as_ref().expect("a state file");
        assert!(
            !state.clean,
            "the next start must check the redo: {state:?}"
        );
        assert_eq!(
            state.last_set.keys().collect::<Vec<_>>(),
            [&Knob::LogFileSize],
            "only the redo is left to recover"
        );
        shrink
    }

    /// At exit a redo shrink that outlasts `control.restore_timeout` while its session
    /// still runs it is handed over to the server, which finishes it on its own
    /// (tests/redo_resize.rs): recorded with its session, and the exit is not a
    /// failure. The state file stays unclean so that the next start checks the size.
    #[test]
    fn a_shrink_still_running_at_exit_is_handed_over_to_the_server() {
        let (events, base, driven) = exit_with_a_hanging_shrink(true);
        let shrink = shrink_record(&events, base, &driven);
        let r = &events[shrink];
        assert_eq!(
            (&r["under_way"], &r["error"]),
            (&SHRINK_SESSION.into(), &serde_json::Value::Null),
            "{r}"
        );
        let stop = events.last().unwrap();
        assert_eq!(stop["event"], "stop", "{events:#?}");
        assert_eq!(stop["restored"], false, "not back yet: {stop}");
        assert_eq!(
            stop["handed_over"],
            serde_json::json!(["innodb_log_file_size"]),
            "{stop}"
        );
        assert!(driven.stopped_clean, "nothing is left for an operator");
        // The state file says so, for `innopilot status`: stopped, not crashed.
        let state = driven.state.as_ref().unwrap();
        assert_eq!(state.handed_over, [Knob::LogFileSize], "{state:?}");
    }

    /// The same shrink whose session is gone is not restored: recorded with why, the
    /// exit reports it.
    #[test]
    fn a_shrink_cut_off_at_exit_without_its_session_is_recorded_as_not_restored() {
        let (events, base, driven) = exit_with_a_hanging_shrink(false);
        let shrink = shrink_record(&events, base, &driven);
        let r = &events[shrink];
        assert!(r.get("under_way").is_none(), "{r}");
        let error = r["error"].as_str().unwrap_or_default();
        assert!(
            error.contains("session is gone") && error.contains("next start"),
            "{error}"
        );
        let stop = events.last().unwrap();
        assert_eq!(
            (&stop["event"], &stop["restored"]),
            (&"stop".into(), &false.into())
        );
        assert!(stop.get("handed_over").is_none(), "{stop}");
        assert!(!driven.stopped_clean, "the exit reports the failure");
        let state = driven.state.as_ref().unwrap();
        assert!(state.handed_over.is_empty(), "not handed over: {state:?}");
    }

    /// Stopped while users still write (the checkpoint stall's end), the exit keeps
    /// the log it grew instead of shrinking it under them: a `kept` record with why,
    /// no restore of it, a stop that is not a failure, and a state file that keeps the
    /// baseline and names the knob. The next live start carries it on
    /// (`recover` with `carry_kept`); `innopilot restore` (without) puts the baseline
    /// back.
    #[test]
    fn a_grown_redo_is_kept_at_a_busy_exit_and_carried_on_by_the_next_start() {
        let (events, base, driven, mut server) = exit_after_a_grow(None, 25.0);
        let kept = events
            .iter()
            .find(|r| r["event"] == "kept")
            .unwrap_or_else(|| panic!("no kept record: {events:#?}"));
        let grown = kept["value"].as_u64().unwrap();
        assert!(grown > base && kept["baseline"] == base, "{kept}");
        let why = kept["reason"].as_str().unwrap();
        assert!(
            why.contains("users write")
                && why.contains("baseline log's maximum checkpoint age a minute"),
            "{why}"
        );
        assert!(
            !events
                .iter()
                .any(|r| r["event"] == "restore" && r["knob"] == "innodb_log_file_size"),
            "{events:#?}"
        );
        let stop = events.last().unwrap();
        assert_eq!(
            (&stop["event"], &stop["restored"], &stop["kept"]),
            (
                &"stop".into(),
                &false.into(),
                &serde_json::json!(["innodb_log_file_size"])
            ),
            "{stop}"
        );
        assert!(driven.stopped_clean, "keeping is not a failure");
        let state = driven.state.clone().expect("a state file");
        assert!(!state.clean, "{state:?}");
        assert_eq!(state.kept, [Knob::LogFileSize], "{state:?}");
        assert_eq!(state.baseline[&Knob::LogFileSize], base);
        assert_eq!(state.last_set[&Knob::LogFileSize], grown);

        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let cfg = Config::default();
        let recover =
            |server: &mut SimServer, saved: &crate::control::state::StateFile, carry: bool| {
                rt.block_on(crate::control::recover(
                    server,
                    saved,
                    &cfg,
                    "simulator",
                    &mut AuditLog::discard(),
                    crate::control::audit::Mode::Live,
                    carry,
                ))
                .unwrap()
            };
        let report = recover(&mut server, &state, true);
        assert_eq!(
            report.carried,
            [(Knob::LogFileSize, base, grown)],
            "{report:?}"
        );
        assert!(report.restored.is_empty() && report.incomplete().is_none());
        assert_eq!(server.model().knobs()[&Knob::LogFileSize], grown);
        // Left grown any other way (a run that died, a handed-over shrink that did not
        // land), a live start carries it on too.
        let mut died = state.clone();
        died.kept.clear();
        let report = recover(&mut server, &died, true);
        assert_eq!(
            report.carried,
            [(Knob::LogFileSize, base, grown)],
            "{report:?}"
        );
        // A server restarted since the state was written (its uptime, a day here,
        // goes back further than the file) runs its own configuration: the size is
        // left alone and is the next run's baseline.
        let mut old = state.clone();
        old.updated_unix_ms = 1;
        let report = recover(&mut server, &old, true);
        assert_eq!(
            (report.left.as_slice(), report.carried.as_slice()),
            ([Knob::LogFileSize].as_slice(), [].as_slice()),
            "{report:?}"
        );
        assert_eq!(server.model().knobs()[&Knob::LogFileSize], grown);
        let report = recover(&mut server, &state, false);
        assert_eq!(report.restored, [Knob::LogFileSize], "{report:?}");
        assert_eq!(server.model().knobs()[&Knob::LogFileSize], base);
    }

    /// At the same end with the exit's quiet test at 100 %, the shrink is sent.
    #[test]
    fn the_same_exit_shrinks_when_the_quiet_test_allows_it() {
        let (events, base, driven, _) = exit_after_a_grow(None, 100.0);
        assert!(!events.iter().any(|r| r["event"] == "kept"), "{events:#?}");
        assert!(driven.state.as_ref().is_some_and(|s| s.kept.is_empty()));
        let r = events
            .iter()
            .find(|r| r["event"] == "restore" && r["knob"] == "innodb_log_file_size")
            .unwrap_or_else(|| panic!("no restore of the redo: {events:#?}"));
        assert_eq!(r["to"], base, "{r}");
    }

    /// What a run measured of the device is in its state file at exit, and the next
    /// start on the same server takes it up: its start record says so, its first
    /// batch is the device's limit and its state file keeps it. A state file of
    /// another server gives nothing.
    #[test]
    fn what_one_run_measured_of_the_device_the_next_recalls() {
        // h's twin: the first burst holds users at the maximum checkpoint age while
        // the device writes the pages older than it, as the real h learns its limit
        // (425–450 pages/s in the hundred-and-sixteenth run).
        let scenario = Scenario::named("repeated_bursts").unwrap();
        let peer = Peer::named("innopilot").unwrap();
        let run = |earlier: Option<&crate::control::state::StateFile>| {
            let handle = SimServer::new(model_for(&scenario, &peer, 1));
            let records = Records::default();
            let audit = AuditLog::to_writer(Box::new(records.clone()));
            let driven = super::drive_controller_after(
                handle.clone(),
                &handle,
                peer.config().unwrap(),
                "recall",
                audit,
                earlier,
            )
            .unwrap();
            let text = String::from_utf8(records.0.lock().unwrap().clone()).unwrap();
            let start: serde_json::Value =
                serde_json::from_str(text.lines().next().unwrap()).unwrap();
            assert_eq!(start["event"], "start", "{start}");
            // The batch the first burst's racing fill got: one second of the device
            // as far as it is known.
            let first_batch = driven
                .decisions
                .iter()
                .find(|d| d.knob == Knob::IoCapacityMax && d.outcome == Outcome::Applied)
                .map(|d| d.to);
            (driven.state.expect("a state file"), start, first_batch)
        };
        let (first, start, unknown_batch) = run(None);
        assert!(start.get("recalled").is_none(), "{start}");
        // As the real h's exit: the grown log kept while users still write, the
        // state file left for the next start.
        assert_eq!(first.kept, vec![Knob::LogFileSize], "{first:?}");
        let measured = first
            .learned
            .expect("the first burst measured the device")
            .learned
            .device_limit_pages_s
            .unwrap();
        let unknown_batch = unknown_batch.expect("the first burst raced to the maximum");
        assert!(
            (unknown_batch as f64) > measured * 1.2,
            "without a limit the batch is the best rate seen: {unknown_batch} against a limit of {measured}"
        );

        let (second, start, known_batch) = run(Some(&first));
        // Decisions rest on it from the first burst's first second, not once users
        // were held long enough to measure it again.
        assert_eq!(
            known_batch,
            Some(measured.round() as u64),
            "the recalled limit is the first batch"
        );
        assert_eq!(
            start["recalled"]["device_limit_pages_s"].as_f64(),
            Some(measured),
            "{start}"
        );
        let again = second
            .learned
            .unwrap()
            .learned
            .device_limit_pages_s
            .unwrap();
        assert!(
            (again - measured).abs() <= 0.5 * measured,
            "the same device: {measured} then {again}"
        );

        // Another server's, left clean (one left unclean is refused: it is that
        // server's to restore).
        let mut theirs = first.clone();
        theirs.server = "root@db2:3306".into();
        theirs.clean = true;
        theirs.kept.clear();
        let (_, start, batch) = run(Some(&theirs));
        assert!(start.get("recalled").is_none(), "{start}");
        assert_eq!(batch, Some(unknown_batch));
    }

    /// A configuration reload that changes a policy section rebuilds the policies;
    /// what they measured of the device carries over to the new ones.
    #[test]
    fn a_reload_keeps_what_the_policies_measured() {
        let scenario = Scenario::named("redo_pressure").unwrap();
        let peer = Peer::named("innopilot").unwrap();
        let handle = SimServer::new(model_for(&scenario, &peer, 1));
        let dir = TempDir::new("reload").unwrap();
        let mut cfg = peer.config().unwrap();
        cfg.control.state_file = dir.0.join("state.json");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        rt.block_on(async {
            let opts = RunOptions {
                dry_run: false,
                config_path: None,
                target: "simulator".into(),
            };
            let mut ctl = Controller::start(handle.clone(), cfg.clone(), opts, AuditLog::discard())
                .await
                .unwrap();
            while ctl.learned().is_empty() && !handle.model().finished() {
                ctl.tick().await.unwrap();
            }
            let before = ctl.learned();
            assert!(!before.is_empty(), "the pressure measured the device");
            let mut new = cfg.clone();
            new.policy.flush.target_fill_pct += 1.0;
            let notes = ctl.reload(new, "test");
            assert!(notes.is_empty(), "{notes:?}");
            assert_eq!(ctl.learned(), before);
            assert!(ctl.shutdown("end of test").await);
        });
    }

    /// A resize the server abandoned (stopped, or past its time limit) answers OK with
    /// the old size: audited as failed, and innopilot expects the old size again.
    #[test]
    fn an_abandoned_resize_is_audited_as_failed() {
        let (decisions, during, records) = slow_resize_run(true);
        assert!(!during.is_empty(), "no resize started");
        let first = decisions
            .iter()
            .find(|d| d.knob == Knob::LogFileSize)
            .expect("the resize's record");
        assert_eq!(first.outcome, Outcome::Failed, "{first:?}");
        assert!(first.reason.contains("abandoned"), "{}", first.reason);
        // Failed too, it says when it was sent.
        let rec = records
            .iter()
            .find(|r| r["event"] == "decision" && r["knob"] == "innodb_log_file_size")
            .expect("the resize's audit record");
        assert!(rec["sent_unix_ms"].as_u64().is_some(), "{rec}");
        // Nothing grew: no advice to keep a size.
        assert!(
            !records.iter().any(|r| r["event"] == "warning"
                && r["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("[mysqld]"))),
            "{records:#?}"
        );
        assert!(
            !decisions
                .iter()
                .any(|d| d.knob == Knob::LogFileSize && d.reason.contains("outside innopilot")),
            "the old size read as an operator's change: {decisions:?}"
        );
    }
}
