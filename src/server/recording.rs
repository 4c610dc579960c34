//! Recordings: a server's samples written down, and played back through the
//! [`Server`] trait.
//!
//! A recording is JSON Lines: a header line ([`Header`]: format version and the
//! server's [`Capabilities`]) and then one [`Sample`] per line, exactly as the sampler
//! produced it. [`Recorder`] writes one, [`RecordingServer`] records everything a
//! control loop sees while passing calls through, and [`ReplayServer`] plays a
//! recording back as a server.
//!
//! Knob values during a replay: a SET is remembered and overlaid onto later samples
//! until the recording itself shows that knob changing. So a recording of a live run
//! (where innopilot's own SETs appear in later samples) replays consistently, and a
//! recording of a passive `record` session (where the knob never moves) does not look
//! like an operator changing it back. A redo resize (a blocking SET) ends where the
//! recording shows the size it asks for, as the recorded server adopted it then; one
//! the recording never shows ends at once.
//!
//! What a recording does not hold (status values, the process list, SHOW ENGINE INNODB
//! STATUS, a server-side purge wait) a replay answers with
//! [`ServerError::Unsupported`]; global variables it answers for the knobs it recorded.

use std::collections::BTreeMap;
use std::fmt;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::task::{Poll, Waker};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::sample::Sample;
use super::{
    Capabilities, Globals, HistoryWait, Knob, KnobValues, PendingSet, Server, ServerError,
    SessionInfo,
};

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

    async fn start_set(&mut self, knob: Knob, value: u64) -> Result<PendingSet, ServerError> {
        self.inner.start_set(knob, value).await
    }

    fn instance(&self) -> Option<String> {
        self.inner.instance()
    }

    fn real_time(&self) -> bool {
        self.inner.real_time()
    }

    async fn claim(&mut self) -> Result<Option<String>, ServerError> {
        self.inner.claim().await
    }

    async fn read_globals(
        &mut self,
        which: Globals,
        names: &[&'static str],
    ) -> Result<BTreeMap<String, String>, ServerError> {
        self.inner.read_globals(which, names).await
    }

    async fn session(
        &mut self,
        thread_id: u64,
        max_chars: u32,
    ) -> Result<Option<SessionInfo>, ServerError> {
        self.inner.session(thread_id, max_chars).await
    }

    async fn resizes_under_way(&mut self) -> Result<Vec<(u64, Option<u64>)>, ServerError> {
        self.inner.resizes_under_way().await
    }

    async fn engine_innodb_status(&mut self) -> Result<String, ServerError> {
        self.inner.engine_innodb_status().await
    }

    async fn wait_for_history_at_most(
        &mut self,
        target: u32,
        limit: Duration,
    ) -> Result<HistoryWait, ServerError> {
        self.inner.wait_for_history_at_most(target, limit).await
    }

    async fn kill_query(&mut self, session_id: u64) -> Result<(), ServerError> {
        self.inner.kill_query(session_id).await
    }
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
    /// How far the replay has got, shared with the resizes under way.
    progress: Arc<Mutex<Progress>>,
}

/// The samples returned so far, and the resizes waiting for a later one.
#[derive(Debug, Default)]
struct Progress {
    returned: usize,
    wakers: Vec<Waker>,
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
            progress: Arc::default(),
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
        let mut p = self.progress.lock().unwrap_or_else(|e| e.into_inner());
        p.returned = self.next;
        for w in p.wakers.drain(..) {
            w.wake();
        }
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

    /// A redo resize the recording shows taking effect (the first later sample with
    /// that size) ends once the replay has returned that sample, as the recorded
    /// server's did; any other SET ends at once.
    async fn start_set(&mut self, knob: Knob, value: u64) -> Result<PendingSet, ServerError> {
        let adopted_at = knob.is_blocking().then(|| {
            self.samples[self.next..]
                .iter()
                .position(|s| s.knobs.get(&knob) == Some(&value))
                .map(|i| self.next + i)
        });
        let Some(Some(at)) = adopted_at else {
            return Ok(PendingSet::done(self.set_knob(knob, value).await));
        };
        let progress = self.progress.clone();
        Ok(PendingSet {
            session_id: None,
            set: Box::pin(std::future::poll_fn(move |cx| {
                let mut p = progress.lock().unwrap_or_else(|e| e.into_inner());
                if p.returned > at {
                    Poll::Ready(Ok(value))
                } else {
                    p.wakers.push(cx.waker().clone());
                    Poll::Pending
                }
            })),
        })
    }

    /// Variables: the recorded knobs only (overlaid like a sample), others absent.
    async fn read_globals(
        &mut self,
        which: Globals,
        names: &[&'static str],
    ) -> Result<BTreeMap<String, String>, ServerError> {
        if which == Globals::Status {
            return Err(not_recorded("global status beyond the sample"));
        }
        Ok(names
            .iter()
            .filter_map(|n| {
                let knob = Knob::from_var_name(n)?;
                let v = *self.current.get(&knob)?;
                Some((n.to_ascii_lowercase(), knob.show_value(v)))
            })
            .collect())
    }

    async fn session(
        &mut self,
        _thread_id: u64,
        _max_chars: u32,
    ) -> Result<Option<SessionInfo>, ServerError> {
        Err(not_recorded("the process list"))
    }

    async fn engine_innodb_status(&mut self) -> Result<String, ServerError> {
        Err(not_recorded("SHOW ENGINE INNODB STATUS"))
    }

    async fn wait_for_history_at_most(
        &mut self,
        _target: u32,
        _limit: Duration,
    ) -> Result<HistoryWait, ServerError> {
        Err(not_recorded(
            "waiting for purge (innodb_max_purge_lag_wait)",
        ))
    }
}

fn not_recorded(what: &'static str) -> ServerError {
    ServerError::Unsupported {
        what,
        server: "a recording",
    }
}
