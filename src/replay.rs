//! Record and replay: a counterfactual advisor for a DBA's own incident.
//!
//! A recording is JSON Lines: a header line ([`Header`]: format version and the
//! server's [`Capabilities`]) and then one [`Sample`] per line, exactly as the sampler
//! produced it. [`Recorder`] writes one, [`RecordingServer`] records everything a
//! control loop sees while passing calls through, and [`record`] is the passive loop
//! behind `innopilot record` (read-only: it never sets anything).
//!
//! [`ReplayServer`] plays a recording back through the [`Server`] trait, and [`replay`]
//! runs the real [`Controller`] (live mode, against the replay) over it and reports, per
//! sample, what the policies would have done and why.
//!
//! Knob values during a replay: a SET is remembered and overlaid onto later samples
//! until the recording itself shows that knob changing. So a recording of a live run
//! (where innopilot's own SETs appear in later samples) replays consistently, and a
//! recording of a passive `record` session (where the knob never moves) does not look
//! like an operator changing it back.

use std::collections::BTreeMap;
use std::fmt;
use std::fs::File;
use std::future::Future;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::audit::AuditLog;
use crate::config::Config;
use crate::control::{Controller, RunOptions};
use crate::sample::Sample;
use crate::server::{Capabilities, Knob, KnobValues, Server, ServerError};
use crate::sim::compare::{decisions_from_audit, SharedBuf, SimDecision};

/// The format version this build writes and reads.
pub const RECORDING_VERSION: u32 = 1;

/// The first line of a recording.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Header {
    /// Always "innopilot-recording".
    pub format: String,
    pub version: u32,
    pub innopilot_version: String,
    pub capabilities: Capabilities,
}

impl Header {
    pub fn new(capabilities: Capabilities) -> Header {
        Header {
            format: "innopilot-recording".into(),
            version: RECORDING_VERSION,
            innopilot_version: env!("CARGO_PKG_VERSION").into(),
            capabilities,
        }
    }
}

/// A problem reading or replaying a recording; messages name the file and line.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("cannot read recording {}: {message}", path.display())]
    Read { path: PathBuf, message: String },
    #[error("{}:{line}: {message}", path.display())]
    Parse {
        path: PathBuf,
        line: usize,
        message: String,
    },
    #[error("the recording has no samples to replay")]
    Empty,
    #[error("the policy `{0}` is a static configuration: it makes no decisions to replay (use innopilot or mariadb1065_adaptive, or a config file)")]
    StaticPeer(String),
    #[error("replay stopped: {0}")]
    Control(String),
}

/// Writes a recording, one flushed line at a time, so a recording cut short by a
/// signal or a crash is still readable up to its last sample.
pub struct Recorder {
    out: Box<dyn Write + Send>,
    header_written: bool,
    samples: u64,
}

impl fmt::Debug for Recorder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Recorder")
            .field("header_written", &self.header_written)
            .field("samples", &self.samples)
            .finish()
    }
}

impl Recorder {
    /// Creates (truncates) `path`.
    pub fn create(path: &Path) -> io::Result<Recorder> {
        let f = File::create(path)?;
        Ok(Recorder::to_writer(Box::new(BufWriter::new(f))))
    }

    pub fn to_writer(out: Box<dyn Write + Send>) -> Recorder {
        Recorder {
            out,
            header_written: false,
            samples: 0,
        }
    }

    fn line<T: Serialize>(&mut self, v: &T) -> io::Result<()> {
        let mut text = serde_json::to_vec(v).map_err(io::Error::other)?;
        text.push(b'\n');
        self.out.write_all(&text)?;
        self.out.flush()
    }

    /// Writes the header (once; later calls, e.g. after a reconnect, are ignored: a
    /// replay uses the capabilities found first).
    pub fn write_header(&mut self, caps: &Capabilities) -> io::Result<()> {
        if self.header_written {
            return Ok(());
        }
        self.line(&Header::new(caps.clone()))?;
        self.header_written = true;
        Ok(())
    }

    pub fn write_sample(&mut self, s: &Sample) -> io::Result<()> {
        if !self.header_written {
            return Err(io::Error::other("a recording needs its header first"));
        }
        self.line(s)?;
        self.samples += 1;
        Ok(())
    }

    /// Samples written so far.
    pub fn samples(&self) -> u64 {
        self.samples
    }
}

/// Passes every call through to `inner` and records the capabilities and every sample.
/// A failure to write the recording is logged once and does not stop the loop.
pub struct RecordingServer<S: Server> {
    inner: S,
    recorder: Recorder,
    write_failed: bool,
}

impl<S: Server> RecordingServer<S> {
    pub fn new(inner: S, recorder: Recorder) -> Self {
        RecordingServer {
            inner,
            recorder,
            write_failed: false,
        }
    }

    pub fn into_parts(self) -> (S, Recorder) {
        (self.inner, self.recorder)
    }

    fn note(&mut self, r: io::Result<()>) {
        if let Err(e) = r {
            if !self.write_failed {
                tracing::warn!("recording: {e}");
            }
            self.write_failed = true;
        }
    }
}

impl<S: Server> Server for RecordingServer<S> {
    async fn probe(&mut self) -> Result<Capabilities, ServerError> {
        let caps = self.inner.probe().await?;
        let r = self.recorder.write_header(&caps);
        self.note(r);
        Ok(caps)
    }

    async fn sample(&mut self) -> Result<Sample, ServerError> {
        let s = self.inner.sample().await?;
        let r = self.recorder.write_sample(&s);
        self.note(r);
        Ok(s)
    }

    async fn read_knobs(&mut self) -> Result<KnobValues, ServerError> {
        self.inner.read_knobs().await
    }

    async fn set_knob(&mut self, knob: Knob, value: u64) -> Result<u64, ServerError> {
        self.inner.set_knob(knob, value).await
    }
}

/// The passive loop behind `innopilot record --out FILE`: probes, then samples every
/// `interval` until `shutdown` resolves or `max_samples` were taken, writing each
/// sample. Never sets anything. A lost connection is retried on the next tick (the
/// gap shows in the recording's `t_ms`). Returns the number of samples written.
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
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut need_probe = false;
    tokio::pin!(shutdown);
    while max_samples.is_none_or(|m| recorder.samples() < m) {
        tokio::select! {
            _ = &mut shutdown => break,
            _ = ticker.tick() => {}
        }
        if need_probe {
            match server.probe().await {
                Ok(_) => need_probe = false,
                Err(e) => {
                    tracing::warn!("record: {e}");
                    continue;
                }
            }
        }
        match server.sample().await {
            Ok(s) => recorder.write_sample(&s).map_err(|e| ServerError::Query {
                what: "writing the recording",
                message: e.to_string(),
            })?,
            Err(e) => {
                tracing::warn!("record: {e}");
                need_probe = e.is_connection_lost();
            }
        }
    }
    Ok(recorder.samples())
}

/// A recording read back.
#[derive(Debug, Clone)]
pub struct Recording {
    pub header: Header,
    pub samples: Vec<Sample>,
}

impl Recording {
    pub fn load(path: &Path) -> Result<Recording, ReplayError> {
        let text = std::fs::read_to_string(path).map_err(|e| ReplayError::Read {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        Recording::parse(&text, path)
    }

    /// Parses recording text; `path` is for messages. A truncated last line (a
    /// recording cut by a crash) is ignored.
    pub fn parse(text: &str, path: &Path) -> Result<Recording, ReplayError> {
        let err = |line: usize, message: String| ReplayError::Parse {
            path: path.to_path_buf(),
            line,
            message,
        };
        let mut lines = text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty());
        let Some((_, first)) = lines.next() else {
            return Err(err(1, "empty file: no header line".into()));
        };
        let header: Header = serde_json::from_str(first)
            .map_err(|e| err(1, format!("not an innopilot recording header: {e}")))?;
        if header.format != "innopilot-recording" || header.version != RECORDING_VERSION {
            return Err(err(
                1,
                format!(
                    "format {:?} version {} (this innopilot reads innopilot-recording version {RECORDING_VERSION})",
                    header.format, header.version
                ),
            ));
        }
        let rest: Vec<(usize, &str)> = lines.collect();
        let mut samples = Vec::with_capacity(rest.len());
        for (i, (n, l)) in rest.iter().enumerate() {
            match serde_json::from_str::<Sample>(l) {
                Ok(s) => samples.push(s),
                Err(_) if i + 1 == rest.len() && !l.trim_end().ends_with('}') => break,
                Err(e) => return Err(err(n + 1, format!("not a sample: {e}"))),
            }
        }
        Ok(Recording { header, samples })
    }
}

/// Plays a recording back as a server. See the module documentation for knob values.
#[derive(Debug, Clone)]
pub struct ReplayServer {
    caps: Capabilities,
    samples: Vec<Sample>,
    next: usize,
    /// knob → (value set during the replay, value the recording showed when it was set).
    overlay: BTreeMap<Knob, (u64, u64)>,
    /// Knob values in effect now, as the replayed server would report them.
    current: KnobValues,
}

impl ReplayServer {
    pub fn new(rec: &Recording) -> ReplayServer {
        let mut caps = rec.header.capabilities.clone();
        // A replay is hypothetical: the recorded account's privileges do not matter.
        caps.can_set_global = true;
        let current = rec
            .samples
            .first()
            .map(|s| s.knobs.clone())
            .unwrap_or_default();
        ReplayServer {
            caps,
            samples: rec.samples.clone(),
            next: 0,
            overlay: BTreeMap::new(),
            current,
        }
    }

    /// Samples not yet returned.
    pub fn remaining(&self) -> usize {
        self.samples.len() - self.next
    }

    /// The recorded (not overlaid) value of `knob` in the last sample returned (or the
    /// first, before any).
    fn recorded(&self, knob: Knob) -> Option<u64> {
        let i = self.next.saturating_sub(1);
        self.samples.get(i)?.knobs.get(&knob).copied()
    }
}

impl Server for ReplayServer {
    async fn probe(&mut self) -> Result<Capabilities, ServerError> {
        Ok(self.caps.clone())
    }

    async fn sample(&mut self) -> Result<Sample, ServerError> {
        let Some(mut s) = self.samples.get(self.next).cloned() else {
            return Err(ServerError::Lost {
                what: "replay",
                message: "end of the recording".into(),
            });
        };
        self.next += 1;
        // The recording itself changed the knob: it wins from now on.
        self.overlay
            .retain(|k, (_, base)| s.knobs.get(k).is_none_or(|v| v == base));
        for (k, (v, _)) in &self.overlay {
            s.knobs.insert(*k, *v);
        }
        self.current = s.knobs.clone();
        Ok(s)
    }

    async fn read_knobs(&mut self) -> Result<KnobValues, ServerError> {
        Ok(self.current.clone())
    }

    async fn set_knob(&mut self, knob: Knob, value: u64) -> Result<u64, ServerError> {
        let cap = self.caps.knob(knob).cloned();
        let v = match cap {
            Some(c) if c.settable() => value
                .max(c.server_min.unwrap_or(0))
                .min(c.server_max.unwrap_or(u64::MAX)),
            Some(c) => return Err(ServerError::NotSettable { knob, why: c.note }),
            None => {
                return Err(ServerError::NotSettable {
                    knob,
                    why: "not in the recording's capability table".into(),
                })
            }
        };
        let base = match self.overlay.get(&knob) {
            Some((_, base)) => Some(*base),
            None => self.recorded(knob),
        };
        if let Some(base) = base {
            self.overlay.insert(knob, (v, base));
        }
        self.current.insert(knob, v);
        Ok(v)
    }
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
    let buf = SharedBuf::default();
    let audit = AuditLog::to_writer(Box::new(buf.clone()));
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
            ctl.tick()
                .await
                .map_err(|e| ReplayError::Control(e.to_string()))?;
        }
        ctl.shutdown("end of replay").await;
        Ok::<(), ReplayError>(())
    })?;
    let decisions = decisions_from_audit(&buf.text(), 0);
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
        let unix_ms = (d.t_s * 1000.0).round() as u64;
        let i = steps.partition_point(|s| s.unix_ms <= unix_ms);
        if let Some(step) = steps.get_mut(i.saturating_sub(1)) {
            step.decisions.push(d);
        }
    }
    Ok(steps)
}

#[cfg(test)]
mod tests {
    use super::*;
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
