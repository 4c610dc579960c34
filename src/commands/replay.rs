//! Record and replay: a counterfactual advisor for a DBA's own incident.
//!
//! [`record`] is the passive loop behind `innopilot record` (read-only: it never sets
//! anything), writing a [`crate::server::recording`]. [`replay`] runs the real
//! [`Controller`] (live mode, against a [`ReplayServer`]) over a recording and
//! reports, per sample, what the policies would have done and why.

use std::fmt;
use std::future::Future;
use std::ops::ControlFlow;
use std::path::Path;
use std::time::Duration;

use serde::Serialize;

use crate::commands::watch::{sample_every, Tick};
use crate::config::Config;
use crate::control::audit::AuditLog;
use crate::control::{Controller, RunOptions};
use crate::server::recording::{Recorder, Recording, ReplayError, ReplayServer};
use crate::server::{Server, ServerError};
use crate::signals::SignalWindow;
use crate::sim::run::SimDecision;

/// The passive loop behind `innopilot record --out FILE`: probes, then samples every
/// `interval` (the loop `watch` uses) until `shutdown` resolves or `max_samples` were
/// taken, writing each sample. Never sets anything. A lost connection is retried on
/// the next tick (the gap shows in the recording's `t_ms`). Returns the number of
/// samples written.
pub async fn record<S, F>(
    server: &mut S,
    recorder: &mut Recorder,
    interval: Duration,
    max_samples: Option<u64>,
    shutdown: F,
) -> Result<u64, ServerError>
where
    S: Server,
    F: Future<Output = ()>,
{
    let caps = server.probe().await?;
    recorder
        .write_header(&caps)
        .map_err(|e| ServerError::Query {
            what: "writing the recording",
            message: e.to_string(),
        })?;
    if max_samples == Some(0) {
        return Ok(0);
    }
    // The window is not shown; the loop derives signals for `watch` anyway.
    let mut window = SignalWindow::new(interval * 2);
    sample_every(server, &mut window, interval, shutdown, |tick| {
        match tick {
            Tick::Sampled(signals) => {
                recorder
                    .write_sample(&signals.sample)
                    .map_err(|e| ServerError::Query {
                        what: "writing the recording",
                        message: e.to_string(),
                    })?;
                if max_samples.is_some_and(|m| recorder.samples() >= m) {
                    return Ok(ControlFlow::Break(()));
                }
            }
            Tick::Failed(e) => tracing::warn!("record: {e}"),
            Tick::Regained(_) => {}
        }
        Ok(ControlFlow::Continue(()))
    })
    .await?;
    Ok(recorder.samples())
}

/// One replayed sample: what the signals said and what the policies decided.
#[derive(Debug, Clone, Serialize)]
pub struct ReplayStep {
    /// 0-based sample index in the recording.
    pub index: usize,
    pub t_ms: u64,
    pub unix_ms: u64,
    pub history_len: Option<u64>,
    /// Checkpoint age / sync point, a ratio (1 = users wait for flushing).
    pub redo_fill_ratio: Option<f64>,
    pub oldest_trx_age_s: Option<u64>,
    pub replica_lag_s: Option<u64>,
    /// Decisions of this tick: applied ones and the guard's refusals, with reasons.
    pub decisions: Vec<SimDecision>,
}

impl fmt::Display for ReplayStep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let opt = |v: Option<String>| v.unwrap_or_else(|| "?".into());
        write!(
            f,
            "#{:<5} t={:>8.1}s history={} redo_fill={}",
            self.index,
            self.t_ms as f64 / 1000.0,
            opt(self.history_len.map(|h| h.to_string())),
            opt(self.redo_fill_ratio.map(|r| format!("{r:.3}"))),
        )?;
        if let Some(a) = self.oldest_trx_age_s.filter(|a| *a > 0) {
            write!(f, " oldest_trx={a}s")?;
        }
        if let Some(l) = self.replica_lag_s {
            write!(f, " lag={l}s")?;
        }
        if self.decisions.is_empty() {
            return write!(f, "  (no change)");
        }
        for d in &self.decisions {
            write!(
                f,
                "\n    {} {} {} → {} [{}]: {}",
                d.policy, d.knob, d.from, d.to, d.outcome, d.reason
            )?;
        }
        Ok(())
    }
}

/// Runs the controller with `cfg` over the recording; one step per sample.
pub fn replay(rec: &Recording, cfg: Config) -> Result<Vec<ReplayStep>, ReplayError> {
    if rec.samples.is_empty() {
        return Err(ReplayError::Empty);
    }
    let dir = std::env::temp_dir().join(format!(
        "innopilot-replay-{}-{}",
        std::process::id(),
        REPLAY_SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).map_err(|e| ReplayError::Control(e.to_string()))?;
    let result = replay_in(rec, cfg, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

static REPLAY_SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn replay_in(rec: &Recording, mut cfg: Config, dir: &Path) -> Result<Vec<ReplayStep>, ReplayError> {
    cfg.control.state_file = dir.join("state.json");
    cfg.control.dry_run = false;
    let audit = AuditLog::discard();
    let mut decisions = Vec::new();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .map_err(|e| ReplayError::Control(e.to_string()))?;
    let n = rec.samples.len();
    rt.block_on(async {
        let opts = RunOptions {
            dry_run: false,
            config_path: None,
            target: "replay".into(),
        };
        let mut ctl = Controller::start(ReplayServer::new(rec), cfg, opts, audit)
            .await
            .map_err(|e| ReplayError::Control(e.to_string()))?;
        for _ in 0..n {
            let report = ctl
                .tick()
                .await
                .map_err(|e| ReplayError::Control(e.to_string()))?;
            decisions.extend(report.decisions);
        }
        ctl.shutdown("end of replay").await;
        Ok::<(), ReplayError>(())
    })?;
    let mut steps: Vec<ReplayStep> = rec
        .samples
        .iter()
        .enumerate()
        .map(|(index, s)| ReplayStep {
            index,
            t_ms: s.t_ms,
            unix_ms: s.unix_ms,
            history_len: s.history_len,
            redo_fill_ratio: s.redo.fill(),
            oldest_trx_age_s: s.oldest_trx.as_ref().map(|t| t.age_s),
            replica_lag_s: s.replica_lag_s,
            decisions: Vec::new(),
        })
        .collect();
    // A decision belongs to the last sample taken at or before it (the controller
    // stamps records with the tick's sample time).
    for d in decisions {
        let i = steps.partition_point(|s| s.unix_ms <= d.unix_ms);
        if let Some(step) = steps.get_mut(i.saturating_sub(1)) {
            step.decisions.push(SimDecision::from_tick(&d, 0));
        }
    }
    Ok(steps)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::testkit::SharedBuf;
    use crate::server::recording::Header;
    use crate::server::Knob;
    use crate::sim::model::{capabilities, Model};
    use crate::sim::scenario::{Scenario, SimFlavor};

    fn recording(n: usize) -> Recording {
        let s = Scenario::named("long_read_view").unwrap();
        let f = SimFlavor::MariaDb1011;
        let mut m = Model::new(&s, f, s.startup_knobs(f), 1);
        let samples = (0..n)
            .map(|_| {
                m.advance_second();
                m.sample()
            })
            .collect();
        Recording {
            header: Header::new(capabilities(f, false, 2)),
            samples,
        }
    }

    #[test]
    fn header_and_samples_round_trip() {
        let rec = recording(3);
        let buf = SharedBuf::default();
        let mut r = Recorder::to_writer(Box::new(buf.clone()));
        assert!(r.write_sample(&rec.samples[0]).is_err());
        r.write_header(&rec.header.capabilities).unwrap();
        r.write_header(&rec.header.capabilities).unwrap();
        for s in &rec.samples {
            r.write_sample(s).unwrap();
        }
        let text = buf.text();
        assert_eq!(text.lines().count(), 4);
        let back = Recording::parse(&text, Path::new("x")).unwrap();
        assert_eq!(back.header, rec.header);
        assert_eq!(back.samples.len(), 3);
        assert_eq!(back.samples[2].history_len, rec.samples[2].history_len);
        assert_eq!(back.samples[2].knobs, rec.samples[2].knobs);
        // A line cut by a crash is dropped; garbage elsewhere is an error with a line.
        let cut = format!("{text}{{\"t_ms\": 12");
        assert_eq!(
            Recording::parse(&cut, Path::new("x"))
                .unwrap()
                .samples
                .len(),
            3
        );
        let bad = text.replacen("{\"t_ms\"", "{\"t_ms\":\"x\"", 1);
        let e = Recording::parse(&bad, Path::new("rec.jsonl"))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("rec.jsonl:2:"), "{e}");
        assert!(Recording::parse("", Path::new("x")).is_err());
    }

    #[tokio::test(flavor = "current_thread")]
    async fn overlay_lasts_until_the_recording_moves_the_knob() {
        let mut rec = recording(4);
        // The recording shows purge threads changing from 4 to 2 at sample 3.
        rec.samples[2].knobs.insert(Knob::PurgeThreads, 2);
        rec.samples[3].knobs.insert(Knob::PurgeThreads, 2);
        let mut s = ReplayServer::new(&rec);
        assert_eq!(s.read_knobs().await.unwrap()[&Knob::PurgeThreads], 4);
        s.sample().await.unwrap();
        assert_eq!(s.set_knob(Knob::PurgeThreads, 3).await.unwrap(), 3);
        assert_eq!(s.read_knobs().await.unwrap()[&Knob::PurgeThreads], 3);
        // Passive part of the recording: the SET stays in effect.
        assert_eq!(s.sample().await.unwrap().knobs[&Knob::PurgeThreads], 3);
        // The recording moves the knob: that wins.
        assert_eq!(s.sample().await.unwrap().knobs[&Knob::PurgeThreads], 2);
        assert_eq!(s.sample().await.unwrap().knobs[&Knob::PurgeThreads], 2);
        assert!(s.sample().await.is_err());
        // Not settable per the recorded capabilities.
        assert!(s.set_knob(Knob::RedoLogCapacity, 1 << 30).await.is_err());
    }
}
