//! One observation of the server ([`Sample`]) and what the controller acts on
//! ([`Signals`]): rates, the smoothed history derivative and the redo-fill trend,
//! derived from a window of samples by [`SignalWindow`].
//!
//! Parsing is pure (rows in, `Sample` out) so every flavor is testable on fixture rows,
//! and hostile values (empty, NULL, negative, huge, non-numeric) become "unknown",
//! never a panic or a wrong number.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::server::flavor::{RedoSource, SignalSources};
use crate::server::{Knob, KnobValues};

/// Redo log state in bytes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RedoSample {
    /// Current LSN (cumulative bytes of redo written; used for the LSN rate).
    pub lsn: Option<u64>,
    /// LSN − last checkpoint LSN: redo that must stay until pages are flushed.
    pub checkpoint_age: Option<u64>,
    /// Where this flavor starts flushing ahead asynchronously.
    pub async_point: Option<u64>,
    /// Where this flavor flushes synchronously and users wait (MariaDB:
    /// Innodb_checkpoint_max_age). Redo fill is measured against this point.
    pub sync_point: Option<u64>,
    /// Configured redo size (innodb_log_file_size or innodb_redo_log_capacity).
    pub capacity: Option<u64>,
}

impl RedoSample {
    /// checkpoint_age / sync_point: 1.0 means users are stalled by synchronous flushing.
    pub fn fill(&self) -> Option<f64> {
        match (self.checkpoint_age, self.sync_point) {
            (Some(a), Some(s)) if s > 0 => Some(a as f64 / s as f64),
            _ => None,
        }
    }
}

/// The oldest active InnoDB transaction, the usual reason purge cannot progress.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrxInfo {
    pub trx_id: String,
    pub thread_id: Option<u64>,
    pub age_s: u64,
    pub user: Option<String>,
    pub host: Option<String>,
    pub state: Option<String>,
    pub isolation: Option<String>,
    /// The session's command (Sleep, Query, …) from the process list.
    pub command: Option<String>,
    /// Estimate: REPEATABLE READ / SERIALIZABLE transactions keep their read view until
    /// they end; READ COMMITTED only while a statement runs; READ UNCOMMITTED never.
    pub holds_read_view: bool,
    /// Number of active InnoDB transactions.
    pub active_count: Option<u64>,
}

/// One observation. Counters are cumulative since server start; rates are derived in
/// [`SignalWindow`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Monotonic time of the sample in milliseconds (live: since innopilot started;
    /// simulator: virtual time). The policies' only clock.
    pub t_ms: u64,
    /// Wall-clock time, for the audit log and humans.
    pub unix_ms: u64,
    pub uptime_s: Option<u64>,
    pub history_len: Option<u64>,
    pub redo: RedoSample,
    pub dirty_pages: Option<u64>,
    pub total_pages: Option<u64>,
    /// Counter: pages written by flushing.
    pub pages_flushed: Option<u64>,
    /// Counter: times a user thread had to wait for a free buffer-pool page
    /// (`Innodb_buffer_pool_wait_free`): LRU flushing fell behind reads. Recordings
    /// made before this field existed read as unknown.
    #[serde(default)]
    pub free_page_waits: Option<u64>,
    pub rows_inserted: Option<u64>,
    pub rows_updated: Option<u64>,
    pub rows_deleted: Option<u64>,
    pub commits: Option<u64>,
    pub threads_running: Option<u64>,
    pub oldest_trx: Option<TrxInfo>,
    /// Total bytes of undo tablespaces, when visible.
    pub undo_bytes: Option<u64>,
    /// Counter: undo tablespace truncations (MariaDB Innodb_undo_truncations).
    pub undo_truncations: Option<u64>,
    /// Number of undo tablespaces: MySQL counts the undo tablespaces of
    /// INNODB_TABLESPACES, MariaDB reports `innodb_undo_tablespaces` (0: undo lives in
    /// the system tablespace). Truncation needs at least two (WL#6965).
    pub undo_tablespaces: Option<u64>,
    /// Seconds behind the source, when this server is a replica with a running SQL
    /// thread; `None` when not a replica or not known.
    pub replica_lag_s: Option<u64>,
    pub is_replica: bool,
    /// Knob values in effect when the sample was taken.
    pub knobs: KnobValues,
    /// Round trips this sample cost.
    pub round_trips: u32,
    /// Wall time the sample took, in milliseconds.
    pub duration_ms: f64,
    /// Values the server returned that could not be parsed (name and reason).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unparsed: Vec<String>,
}

/// Which source table a name/value row came from, in the sampler's one union query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowKind {
    Status,
    Variable,
    /// information_schema.INNODB_METRICS (MySQL).
    Metric,
    /// One undo tablespace's size in bytes (MySQL information_schema.INNODB_TABLESPACES).
    UndoSpace,
}

/// Parses a server value into a u64: accepts digits (with surrounding space), ON/OFF
/// and TRUE/FALSE; rejects empty, negative, fractional, overflowing or other text.
pub fn parse_u64(value: &str) -> Result<u64, String> {
    let v = value.trim();
    match v.to_ascii_uppercase().as_str() {
        "ON" | "TRUE" | "YES" => return Ok(1),
        "OFF" | "FALSE" | "NO" => return Ok(0),
        "" => return Err("empty value".into()),
        _ => {}
    }
    if v.starts_with('-') {
        return Err(format!("negative value {v:?}"));
    }
    v.parse::<u64>().map_err(|e| {
        let shown: String = v.chars().take(40).collect();
        format!("{shown:?} is not an unsigned integer ({e})")
    })
}

/// The name/value rows of one sample, keyed by kind and lower-cased name.
#[derive(Debug, Default, Clone)]
pub struct MetricRows {
    values: BTreeMap<(u8, String), Option<String>>,
    undo_spaces: Vec<Option<String>>,
}

impl MetricRows {
    pub fn push(&mut self, kind: RowKind, name: &str, value: Option<String>) {
        let k = match kind {
            RowKind::Status => 0,
            RowKind::Variable => 1,
            RowKind::Metric => 2,
            RowKind::UndoSpace => {
                self.undo_spaces.push(value);
                return;
            }
        };
        self.values.insert((k, name.to_ascii_lowercase()), value);
    }

    fn get(&self, kind: u8, name: &str, unparsed: &mut Vec<String>) -> Option<u64> {
        match self.values.get(&(kind, name.to_ascii_lowercase()))? {
            None => None, // NULL: unknown, not an error
            Some(v) => match parse_u64(v) {
                Ok(n) => Some(n),
                Err(e) => {
                    unparsed.push(format!("{name}: {e}"));
                    None
                }
            },
        }
    }
    pub fn status(&self, name: &str, unparsed: &mut Vec<String>) -> Option<u64> {
        self.get(0, name, unparsed)
    }
    pub fn variable(&self, name: &str, unparsed: &mut Vec<String>) -> Option<u64> {
        self.get(1, name, unparsed)
    }
    pub fn metric(&self, name: &str, unparsed: &mut Vec<String>) -> Option<u64> {
        self.get(2, name, unparsed)
    }
}

/// Status variables the sampler asks for (both flavors; missing ones are unknown).
pub const STATUS_NAMES: &[&str] = &[
    "Uptime",
    "Innodb_history_list_length",
    "Innodb_checkpoint_age",
    "Innodb_checkpoint_max_age",
    "Innodb_lsn_current",
    "Innodb_redo_log_current_lsn",
    "Innodb_redo_log_checkpoint_lsn",
    "Innodb_buffer_pool_pages_dirty",
    "Innodb_buffer_pool_pages_total",
    "Innodb_buffer_pool_pages_flushed",
    "Innodb_buffer_pool_wait_free",
    "Innodb_rows_inserted",
    "Innodb_rows_updated",
    "Innodb_rows_deleted",
    "Handler_write",
    "Handler_update",
    "Handler_delete",
    "Com_commit",
    "Threads_running",
    "Innodb_undo_truncations",
];

/// Variables the sampler reads besides the knobs.
pub const EXTRA_VARIABLE_NAMES: &[&str] = &["innodb_log_files_in_group", "innodb_undo_tablespaces"];

/// INNODB_METRICS counters read on MySQL.
pub const METRIC_NAMES: &[&str] = &[
    "trx_rseg_history_len",
    "log_lsn_current",
    "log_lsn_last_checkpoint",
    "log_max_modified_age_async",
    "log_max_modified_age_sync",
];

/// Builds a sample from the rows of the union query. The time fields, the oldest
/// transaction, undo file sizes and replica lag are filled in by the caller.
pub fn build_sample(rows: &MetricRows, sources: &SignalSources) -> Sample {
    let mut u = Vec::new();
    let mut s = Sample {
        uptime_s: rows.status("Uptime", &mut u),
        ..Sample::default()
    };
    s.history_len = match sources.history {
        crate::server::flavor::HistorySource::StatusVar => {
            rows.status("Innodb_history_list_length", &mut u)
        }
        crate::server::flavor::HistorySource::InnodbMetrics => rows
            .metric("trx_rseg_history_len", &mut u)
            .or_else(|| rows.status("Innodb_history_list_length", &mut u)),
    };
    let mut knobs = KnobValues::new();
    for knob in Knob::ALL {
        if let Some(v) = rows.variable(knob.var_name(), &mut u) {
            knobs.insert(knob, v);
        }
    }
    s.redo = match sources.redo {
        RedoSource::CheckpointAgeStatus => {
            let sync = rows.status("Innodb_checkpoint_max_age", &mut u);
            RedoSample {
                lsn: rows.status("Innodb_lsn_current", &mut u),
                checkpoint_age: rows.status("Innodb_checkpoint_age", &mut u),
                // MariaDB flushes ahead asynchronously from 7/8 of max_checkpoint_age.
                async_point: sync.map(|m| m / 8 * 7),
                sync_point: sync,
                capacity: knobs.get(&Knob::LogFileSize).copied(),
            }
        }
        RedoSource::RedoLsnStatus => {
            let lsn = rows.status("Innodb_redo_log_current_lsn", &mut u);
            let ckpt = rows.status("Innodb_redo_log_checkpoint_lsn", &mut u);
            let cap = knobs.get(&Knob::RedoLogCapacity).copied();
            // MySQL 8.0.30+: async flushing from ~7/8 and sync from ~15/16 of the soft
            // capacity, i.e. about 0.78 and 0.83 of innodb_redo_log_capacity.
            RedoSample {
                lsn,
                checkpoint_age: lsn.zip(ckpt).map(|(l, c)| l.saturating_sub(c)),
                async_point: cap.map(|c| c / 100 * 78),
                sync_point: cap.map(|c| c / 100 * 83),
                capacity: cap,
            }
        }
        RedoSource::InnodbMetrics => {
            let lsn = rows.metric("log_lsn_current", &mut u);
            let ckpt = rows.metric("log_lsn_last_checkpoint", &mut u);
            let files = rows
                .variable("innodb_log_files_in_group", &mut u)
                .unwrap_or(2);
            let cap = knobs
                .get(&Knob::LogFileSize)
                .map(|f| f.saturating_mul(files));
            let sync = rows
                .metric("log_max_modified_age_sync", &mut u)
                .filter(|v| *v > 0)
                .or_else(|| cap.map(|c| c / 100 * 80));
            RedoSample {
                lsn,
                checkpoint_age: lsn.zip(ckpt).map(|(l, c)| l.saturating_sub(c)),
                async_point: rows
                    .metric("log_max_modified_age_async", &mut u)
                    .filter(|v| *v > 0)
                    .or_else(|| sync.map(|s| s / 8 * 7)),
                sync_point: sync,
                capacity: cap,
            }
        }
    };
    s.dirty_pages = rows.status("Innodb_buffer_pool_pages_dirty", &mut u);
    s.total_pages = rows.status("Innodb_buffer_pool_pages_total", &mut u);
    s.pages_flushed = rows.status("Innodb_buffer_pool_pages_flushed", &mut u);
    s.free_page_waits = rows.status("Innodb_buffer_pool_wait_free", &mut u);
    // MariaDB 10.11 has no Innodb_rows_*: its Handler_* counters (which exclude
    // temporary tables, counted in Handler_tmp_*) are the nearest equivalent.
    s.rows_inserted = rows
        .status("Innodb_rows_inserted", &mut u)
        .or_else(|| rows.status("Handler_write", &mut u));
    s.rows_updated = rows
        .status("Innodb_rows_updated", &mut u)
        .or_else(|| rows.status("Handler_update", &mut u));
    s.rows_deleted = rows
        .status("Innodb_rows_deleted", &mut u)
        .or_else(|| rows.status("Handler_delete", &mut u));
    s.commits = rows.status("Com_commit", &mut u);
    s.threads_running = rows.status("Threads_running", &mut u);
    s.undo_truncations = rows.status("Innodb_undo_truncations", &mut u);
    s.undo_tablespaces = if rows.undo_spaces.is_empty() {
        rows.variable("innodb_undo_tablespaces", &mut u)
    } else {
        Some(rows.undo_spaces.len() as u64)
    };
    if !rows.undo_spaces.is_empty() {
        let mut total: Option<u64> = Some(0);
        for v in &rows.undo_spaces {
            match v.as_deref().map(parse_u64) {
                Some(Ok(n)) => total = total.map(|t| t.saturating_add(n)),
                Some(Err(e)) => {
                    u.push(format!("undo tablespace size: {e}"));
                    total = None;
                }
                None => total = None,
            }
        }
        s.undo_bytes = total;
    }
    s.knobs = knobs;
    s.unparsed = u;
    s
}

/// Whether a transaction with this isolation level and command holds a read view.
pub fn holds_read_view(isolation: Option<&str>, command: Option<&str>) -> bool {
    let iso = isolation.unwrap_or("REPEATABLE READ").to_ascii_uppercase();
    match iso.as_str() {
        "READ UNCOMMITTED" => false,
        "READ COMMITTED" => command.is_some_and(|c| !c.eq_ignore_ascii_case("Sleep")),
        _ => true,
    }
}

/// What the policies see: the latest sample plus what a window of samples says about
/// rates and trends. Rates are `None` until two samples of one server life exist.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Signals {
    /// Time of the latest sample (ms, monotonic): the policies' clock.
    pub t_ms: u64,
    pub sample: Sample,
    /// Seconds the window covers (0 right after start or a server restart).
    pub window_s: f64,
    /// The window was restarted with this sample (first sample or server restart).
    pub window_reset: bool,
    /// checkpoint_age / sync point (0..1, above 1 while users stall).
    pub redo_fill: Option<f64>,
    /// Slope of redo fill over the window, fraction per second.
    pub redo_fill_trend: Option<f64>,
    /// Bytes of redo written per second (latest interval).
    pub lsn_rate: Option<f64>,
    /// Pages flushed per second (latest interval).
    pub pages_flushed_rate: Option<f64>,
    /// Waits for a free buffer-pool page per second (latest interval): above zero,
    /// users wait for LRU flushing, which competes with background (flush-list)
    /// flushing for the same device.
    #[serde(default)]
    pub free_page_wait_rate: Option<f64>,
    pub history_len: Option<u64>,
    /// History derivative, records per second: least-squares slope over the window.
    pub history_rate: Option<f64>,
    /// Rows inserted + updated + deleted per second (latest interval).
    pub dml_rate: Option<f64>,
    pub rows_inserted_rate: Option<f64>,
    pub rows_updated_rate: Option<f64>,
    pub rows_deleted_rate: Option<f64>,
    pub commit_rate: Option<f64>,
    pub dirty_fraction: Option<f64>,
    /// History length around the oldest transaction's read view, from the window's
    /// long memory of history ([`HISTORY_MEMORY`]); `None` when the oldest
    /// transaction holds no read view. What [`crate::policy::purge_rate::estimate`]
    /// splits history into purgeable and blocked with.
    #[serde(default)]
    pub view_history: Option<ViewHistory>,
    /// Fastest history decrease seen lately, records/s (positive): the largest
    /// −history_rate, decaying with a [`DRAIN_HALF_LIFE`] half-life. Purge drained at
    /// least this fast then, so it is a rough lower bound on what purge can do.
    #[serde(default)]
    pub history_drain_rate: Option<f64>,
}

/// How far back [`SignalWindow`] remembers history length (one point per second at
/// most), to know what history was when a long read view began.
pub const HISTORY_MEMORY: Duration = Duration::from_secs(3600);

/// Half-life of [`Signals::history_drain_rate`]'s decaying peak.
pub const DRAIN_HALF_LIFE: Duration = Duration::from_secs(600);

/// History length since the oldest transaction's read view began. Everything that
/// entered history after that moment is needed by the view and cannot be purged
/// until it ends; what was there before can.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ViewHistory {
    /// History when the view began (the last remembered point at or before its start);
    /// `None` when the view is older than what the window remembers (innopilot started,
    /// reconnected or the server restarted after it began, or it is older than
    /// [`HISTORY_MEMORY`]).
    pub at_start: Option<u64>,
    /// Lowest history seen since the view began (or since memory starts, when it is
    /// older), the current value included.
    pub min: u64,
    /// When `min` was seen (monotonic ms).
    pub min_t_ms: u64,
    /// Seconds of the view's life that memory covers.
    pub covered_s: f64,
}

/// A sliding window of samples from one server life.
#[derive(Debug, Clone)]
pub struct SignalWindow {
    span: Duration,
    samples: VecDeque<Sample>,
    /// (t_ms, history_len), at least a second apart, up to [`HISTORY_MEMORY`] back.
    history_log: VecDeque<(u64, u64)>,
    /// Decaying peak of −history_rate: (records/s, when).
    drain: Option<(f64, u64)>,
}

fn counter_went_back(prev: &Sample, cur: &Sample) -> bool {
    let pairs = [
        (prev.uptime_s, cur.uptime_s),
        (prev.redo.lsn, cur.redo.lsn),
        (prev.pages_flushed, cur.pages_flushed),
        (prev.rows_updated, cur.rows_updated),
        (prev.rows_inserted, cur.rows_inserted),
        (prev.rows_deleted, cur.rows_deleted),
        (prev.commits, cur.commits),
    ];
    pairs
        .iter()
        .any(|(a, b)| matches!((a, b), (Some(a), Some(b)) if b < a))
        || cur.t_ms < prev.t_ms
}

/// Whether `cur` comes from a later life of the server than `prev` (it restarted in
/// between), however short the outage. Uptime alone has one-second resolution, so a
/// quick kill and restart can show the same uptime; the server's start time (wall
/// clock minus uptime) moving forward, or a status counter that restarts from zero
/// going down, also tells.
pub fn looks_restarted(prev: &Sample, cur: &Sample) -> bool {
    if let (Some(a), Some(b)) = (prev.uptime_s, cur.uptime_s) {
        if b < a {
            return true;
        }
        // The server's start time, in ms; 2 s of slack for uptime's whole seconds and
        // the time between reading the clock and the status.
        let started = |s: &Sample, up: u64| s.unix_ms as i64 - (up as i64) * 1000;
        if prev.unix_ms > 0 && cur.unix_ms > 0 && started(cur, b) - started(prev, a) > 2_000 {
            return true;
        }
    }
    [
        (prev.commits, cur.commits),
        (prev.rows_updated, cur.rows_updated),
        (prev.rows_inserted, cur.rows_inserted),
        (prev.rows_deleted, cur.rows_deleted),
        (prev.pages_flushed, cur.pages_flushed),
    ]
    .iter()
    .any(|(a, b)| matches!((a, b), (Some(a), Some(b)) if b < a))
}

fn rate(prev: Option<u64>, cur: Option<u64>, dt_s: f64) -> Option<f64> {
    match (prev, cur) {
        (Some(a), Some(b)) if b >= a && dt_s > 0.0 => Some((b - a) as f64 / dt_s),
        _ => None,
    }
}

fn sum3(a: Option<u64>, b: Option<u64>, c: Option<u64>) -> Option<u64> {
    Some(a?.saturating_add(b?).saturating_add(c?))
}

/// Least-squares slope of (t seconds, y) points; `None` with fewer than two points.
pub fn slope(points: &[(f64, f64)]) -> Option<f64> {
    if points.len() < 2 {
        return None;
    }
    let n = points.len() as f64;
    let mt = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let (mut num, mut den) = (0.0, 0.0);
    for (t, y) in points {
        num += (t - mt) * (y - my);
        den += (t - mt) * (t - mt);
    }
    (den > 0.0).then(|| num / den)
}

impl SignalWindow {
    pub fn new(span: Duration) -> Self {
        SignalWindow {
            span,
            samples: VecDeque::new(),
            history_log: VecDeque::new(),
            drain: None,
        }
    }

    /// Forgets everything (after a reconnect: samples from before cannot be trusted).
    pub fn reset(&mut self) {
        self.samples.clear();
        self.history_log.clear();
        self.drain = None;
    }

    pub fn len(&self) -> usize {
        self.samples.len()
    }

    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// Adds a sample and derives the signals. A counter that went backwards (server
    /// restarted) starts a new window instead of producing negative rates.
    pub fn push(&mut self, sample: Sample) -> Signals {
        let mut reset = self.samples.is_empty();
        if let Some(prev) = self.samples.back() {
            if counter_went_back(prev, &sample) {
                self.samples.clear();
                self.history_log.clear();
                self.drain = None;
                reset = true;
            }
        }
        if let Some(h) = sample.history_len {
            let t = sample.t_ms;
            if self
                .history_log
                .back()
                .is_none_or(|(last, _)| t >= last.saturating_add(1000))
            {
                self.history_log.push_back((t, h));
            }
            let memory_ms = HISTORY_MEMORY.as_millis() as u64;
            while self
                .history_log
                .front()
                .is_some_and(|(f, _)| t.saturating_sub(*f) > memory_ms)
            {
                self.history_log.pop_front();
            }
        }
        self.samples.push_back(sample);
        let newest = self.samples.back().map(|s| s.t_ms).unwrap_or(0);
        let span_ms = self.span.as_millis() as u64;
        while self.samples.len() > 2
            && self
                .samples
                .front()
                .is_some_and(|s| newest.saturating_sub(s.t_ms) > span_ms)
        {
            self.samples.pop_front();
        }
        let mut sig = self.derive(reset);
        sig.view_history = self.view_history(&sig.sample);
        sig.history_drain_rate = self.update_drain(&sig);
        sig
    }

    /// What history did since the oldest transaction's read view began.
    fn view_history(&self, cur: &Sample) -> Option<ViewHistory> {
        let trx = cur.oldest_trx.as_ref().filter(|t| t.holds_read_view)?;
        let h = cur.history_len?;
        let now = cur.t_ms;
        let age_ms = trx.age_s.saturating_mul(1000);
        // A view older than the clock's epoch began before anything was remembered.
        let start = now.checked_sub(age_ms);
        let first = self.history_log.front().map(|p| p.0).unwrap_or(now);
        let at_start = start.and_then(|t0| {
            self.history_log
                .iter()
                .rev()
                .find(|(t, _)| *t <= t0)
                .map(|(_, v)| *v)
        });
        let from = match (start, at_start) {
            (Some(t0), Some(_)) => t0,
            _ => first,
        };
        let mut min = (h, now);
        if let Some(v) = at_start.filter(|v| *v < h) {
            min = (v, from);
        }
        for (t, v) in self.history_log.iter().filter(|(t, _)| *t >= from) {
            if *v < min.0 {
                min = (*v, *t);
            }
        }
        let covered_from = start.map_or(first, |t0| t0.max(first));
        Some(ViewHistory {
            at_start,
            min: min.0,
            min_t_ms: min.1,
            covered_s: now.saturating_sub(covered_from) as f64 / 1000.0,
        })
    }

    /// Updates the decaying peak of −history_rate. A slope over fewer than three
    /// samples is too noisy to count.
    fn update_drain(&mut self, sig: &Signals) -> Option<f64> {
        let now = sig.t_ms;
        let decayed = self.drain.map(|(r, t)| {
            let dt = now.saturating_sub(t) as f64 / 1000.0;
            r * 0.5f64.powf(dt / DRAIN_HALF_LIFE.as_secs_f64())
        });
        let seen = sig
            .history_rate
            .filter(|r| r.is_finite() && *r < 0.0 && self.samples.len() >= 3)
            .map(|r| -r);
        let peak = match (decayed, seen) {
            (Some(d), Some(s)) => Some(d.max(s)),
            (d, s) => d.or(s),
        };
        self.drain = peak.map(|p| (p, now));
        peak.filter(|p| *p > 0.0)
    }

    fn derive(&self, reset: bool) -> Signals {
        let cur = self.samples.back().cloned().unwrap_or_default();
        let first_t = self.samples.front().map(|s| s.t_ms).unwrap_or(cur.t_ms);
        let mut sig = Signals {
            t_ms: cur.t_ms,
            window_s: (cur.t_ms - first_t) as f64 / 1000.0,
            window_reset: reset,
            redo_fill: cur.redo.fill(),
            history_len: cur.history_len,
            dirty_fraction: match (cur.dirty_pages, cur.total_pages) {
                (Some(d), Some(t)) if t > 0 => Some(d as f64 / t as f64),
                _ => None,
            },
            ..Signals::default()
        };
        if self.samples.len() >= 2 {
            let prev = &self.samples[self.samples.len() - 2];
            let dt = (cur.t_ms.saturating_sub(prev.t_ms)) as f64 / 1000.0;
            sig.lsn_rate = rate(prev.redo.lsn, cur.redo.lsn, dt);
            sig.pages_flushed_rate = rate(prev.pages_flushed, cur.pages_flushed, dt);
            sig.free_page_wait_rate = rate(prev.free_page_waits, cur.free_page_waits, dt);
            sig.commit_rate = rate(prev.commits, cur.commits, dt);
            sig.rows_inserted_rate = rate(prev.rows_inserted, cur.rows_inserted, dt);
            sig.rows_updated_rate = rate(prev.rows_updated, cur.rows_updated, dt);
            sig.rows_deleted_rate = rate(prev.rows_deleted, cur.rows_deleted, dt);
            sig.dml_rate = rate(
                sum3(prev.rows_inserted, prev.rows_updated, prev.rows_deleted),
                sum3(cur.rows_inserted, cur.rows_updated, cur.rows_deleted),
                dt,
            );
            let pts = |f: &dyn Fn(&Sample) -> Option<f64>| -> Vec<(f64, f64)> {
                self.samples
                    .iter()
                    .filter_map(|s| f(s).map(|y| ((s.t_ms - first_t) as f64 / 1000.0, y)))
                    .collect()
            };
            sig.history_rate = slope(&pts(&|s| s.history_len.map(|h| h as f64)));
            sig.redo_fill_trend = slope(&pts(&|s| s.redo.fill()));
        }
        sig.sample = cur;
        sig
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::flavor::{HistorySource, ReplicaSource, UndoSource};
    use proptest::prelude::*;

    fn maria() -> SignalSources {
        SignalSources {
            redo: RedoSource::CheckpointAgeStatus,
            history: HistorySource::StatusVar,
            undo: UndoSource::Unknown,
            replica: ReplicaSource::NotReplica,
        }
    }

    fn mysql8() -> SignalSources {
        SignalSources {
            redo: RedoSource::RedoLsnStatus,
            history: HistorySource::InnodbMetrics,
            undo: UndoSource::InfoSchema,
            replica: ReplicaSource::NotReplica,
        }
    }

    fn rows(list: &[(RowKind, &str, Option<&str>)]) -> MetricRows {
        let mut r = MetricRows::default();
        for (k, n, v) in list {
            r.push(*k, n, v.map(String::from));
        }
        r
    }

    #[test]
    fn mariadb_fixture_rows() {
        use RowKind::*;
        let r = rows(&[
            (Status, "INNODB_HISTORY_LIST_LENGTH", Some("714000")),
            (Status, "INNODB_CHECKPOINT_AGE", Some("26820219")),
            (Status, "INNODB_CHECKPOINT_MAX_AGE", Some("53640439")),
            (Status, "INNODB_LSN_CURRENT", Some("123456789")),
            (Status, "UPTIME", Some("77")),
            (Variable, "INNODB_PURGE_THREADS", Some("4")),
            (Variable, "INNODB_UNDO_LOG_TRUNCATE", Some("OFF")),
            (Variable, "INNODB_LOG_FILE_SIZE", Some("67108864")),
            (Variable, "INNODB_UNDO_TABLESPACES", Some("3")),
        ]);
        let s = build_sample(&r, &maria());
        assert_eq!(s.undo_tablespaces, Some(3));
        assert_eq!(s.history_len, Some(714_000));
        assert!((s.redo.fill().unwrap() - 0.5).abs() < 1e-6);
        assert_eq!(s.redo.capacity, Some(64 << 20));
        assert_eq!(s.knobs[&Knob::PurgeThreads], 4);
        assert_eq!(s.knobs[&Knob::UndoLogTruncate], 0);
        assert!(s.unparsed.is_empty());
    }

    #[test]
    fn mysql_8030_fixture_rows() {
        use RowKind::*;
        let r = rows(&[
            (Metric, "trx_rseg_history_len", Some("1234")),
            (Status, "Innodb_redo_log_current_lsn", Some("1000000")),
            (Status, "Innodb_redo_log_checkpoint_lsn", Some("170000")),
            (Variable, "innodb_redo_log_capacity", Some("1000000")),
            (UndoSpace, "innodb_undo_001", Some("16777216")),
            (UndoSpace, "innodb_undo_002", Some("16777216")),
        ]);
        let s = build_sample(&r, &mysql8());
        assert_eq!(s.history_len, Some(1234));
        assert_eq!(s.redo.checkpoint_age, Some(830_000));
        assert_eq!(s.redo.sync_point, Some(830_000));
        assert!((s.redo.fill().unwrap() - 1.0).abs() < 1e-9);
        assert_eq!(s.undo_bytes, Some(32 << 20));
        // MySQL: counted from the undo tablespaces themselves.
        assert_eq!(s.undo_tablespaces, Some(2));
    }

    #[test]
    fn view_history_and_drain_rate() {
        let trx = |age_s| TrxInfo {
            trx_id: "7".into(),
            thread_id: Some(1),
            age_s,
            user: None,
            host: None,
            state: None,
            isolation: None,
            command: None,
            holds_read_view: true,
            active_count: None,
        };
        let mut w = SignalWindow::new(Duration::from_secs(10));
        // Draining 1 000/s for 10 s, then a view opens at t = 10 s and history grows.
        let mut last = None;
        for t in 0..20u64 {
            let (h, view) = if t < 10 {
                (20_000 - t * 1_000, None)
            } else {
                (11_000 + (t - 10) * 500, Some(trx(t - 10)))
            };
            let mut s = sample_at(t, 100 + t, h, t);
            s.oldest_trx = view;
            last = Some(w.push(s));
        }
        let sig = last.unwrap();
        let v = sig.view_history.unwrap();
        assert_eq!(v.at_start, Some(11_000));
        assert_eq!((v.min, v.min_t_ms), (11_000, 10_000));
        assert_eq!(v.covered_s, 9.0);
        let drain = sig.history_drain_rate.unwrap();
        assert!(drain > 900.0 && drain <= 1_000.0, "{drain}");
        // A view older than the memory: no start, covered since memory began.
        let mut w = SignalWindow::new(Duration::from_secs(10));
        let mut s = sample_at(1, 100, 5_000, 0);
        s.oldest_trx = Some(trx(300));
        let sig = w.push(s);
        let v = sig.view_history.unwrap();
        assert_eq!((v.at_start, v.min, v.covered_s), (None, 5_000, 0.0));
        // No view, no view history; a reset forgets everything.
        let sig = w.push(sample_at(2, 101, 5_000, 0));
        assert!(sig.view_history.is_none());
        w.reset();
        assert!(w
            .push(sample_at(3, 102, 5_000, 0))
            .history_drain_rate
            .is_none());
    }

    #[test]
    fn old_mysql_fixture_rows() {
        use RowKind::*;
        let src = SignalSources {
            redo: RedoSource::InnodbMetrics,
            ..mysql8()
        };
        let r = rows(&[
            (Metric, "log_lsn_current", Some("5000")),
            (Metric, "log_lsn_last_checkpoint", Some("1000")),
            (Metric, "log_max_modified_age_sync", Some("8000")),
            (Variable, "innodb_log_file_size", Some("5000")),
        ]);
        let s = build_sample(&r, &src);
        assert_eq!(s.redo.capacity, Some(10_000));
        assert!((s.redo.fill().unwrap() - 0.5).abs() < 1e-9);
    }

    #[test]
    fn hostile_values_become_unknown() {
        use RowKind::*;
        let r = rows(&[
            (Status, "Innodb_history_list_length", Some("")),
            (Status, "Innodb_checkpoint_age", Some("-5")),
            (
                Status,
                "Innodb_checkpoint_max_age",
                Some("99999999999999999999999"),
            ),
            (Status, "Uptime", None),
            (Status, "Threads_running", Some("12abc")),
            (Variable, "innodb_io_capacity", Some("1e9")),
            (UndoSpace, "u", Some("x")),
        ]);
        let s = build_sample(&r, &maria());
        assert_eq!(s.history_len, None);
        assert_eq!(s.redo.fill(), None);
        assert_eq!(s.uptime_s, None);
        assert!(!s.knobs.contains_key(&Knob::IoCapacity));
        assert_eq!(s.undo_bytes, None);
        assert_eq!(s.unparsed.len(), 6, "{:?}", s.unparsed);
    }

    #[test]
    fn read_view_estimate() {
        assert!(holds_read_view(Some("REPEATABLE READ"), Some("Sleep")));
        assert!(!holds_read_view(Some("READ COMMITTED"), Some("Sleep")));
        assert!(holds_read_view(Some("READ COMMITTED"), Some("Query")));
        assert!(!holds_read_view(Some("READ UNCOMMITTED"), Some("Query")));
    }

    fn sample_at(t_s: u64, uptime: u64, history: u64, updated: u64) -> Sample {
        Sample {
            t_ms: t_s * 1000,
            uptime_s: Some(uptime),
            history_len: Some(history),
            rows_updated: Some(updated),
            rows_inserted: Some(0),
            rows_deleted: Some(0),
            ..Sample::default()
        }
    }

    #[test]
    fn rates_and_history_slope() {
        let mut w = SignalWindow::new(Duration::from_secs(10));
        let first = w.push(sample_at(0, 100, 0, 0));
        assert!(first.window_reset && first.dml_rate.is_none());
        let mut last = first;
        for i in 1..=5 {
            last = w.push(sample_at(i, 100 + i, i * 1000, i * 500));
        }
        assert!(!last.window_reset);
        assert!((last.history_rate.unwrap() - 1000.0).abs() < 1e-6);
        assert!((last.dml_rate.unwrap() - 500.0).abs() < 1e-6);
    }

    #[test]
    fn server_restart_starts_a_new_window() {
        let mut w = SignalWindow::new(Duration::from_secs(10));
        w.push(sample_at(0, 1000, 5000, 90_000));
        w.push(sample_at(1, 1001, 6000, 91_000));
        let after = w.push(sample_at(2, 3, 10, 5));
        assert!(after.window_reset);
        assert_eq!(after.dml_rate, None);
        assert_eq!(after.history_rate, None);
        assert_eq!(w.len(), 1);
        let next = w.push(sample_at(3, 4, 20, 105));
        assert!((next.dml_rate.unwrap() - 100.0).abs() < 1e-9);
    }

    #[test]
    fn restart_detection_beyond_uptime() {
        let before = Sample {
            unix_ms: 100_000,
            uptime_s: Some(2),
            commits: Some(500),
            ..Sample::default()
        };
        // Same uptime, but the server started 3 s later: a new life.
        let quick = Sample {
            unix_ms: 104_000,
            uptime_s: Some(2),
            ..Sample::default()
        };
        assert!(looks_restarted(&before, &quick));
        // Counters from zero again.
        let counters = Sample {
            unix_ms: 101_000,
            uptime_s: Some(3),
            commits: Some(4),
            ..Sample::default()
        };
        assert!(looks_restarted(&before, &counters));
        // The same life one second on.
        let same = Sample {
            unix_ms: 101_000,
            uptime_s: Some(3),
            commits: Some(900),
            ..Sample::default()
        };
        assert!(!looks_restarted(&before, &same));
    }

    #[test]
    fn window_is_bounded() {
        let mut w = SignalWindow::new(Duration::from_secs(5));
        for i in 0..100 {
            w.push(sample_at(i, i + 1, i, i));
        }
        assert!(w.len() <= 7);
    }

    proptest! {
        #[test]
        fn parse_never_panics(s in ".{0,40}") {
            let _ = parse_u64(&s);
        }

        #[test]
        fn rates_are_never_negative(vals in proptest::collection::vec((0u64..1000, 0u64..1_000_000, 0u64..1_000_000), 1..40)) {
            let mut w = SignalWindow::new(Duration::from_secs(10));
            for (i, (up, h, rows)) in vals.into_iter().enumerate() {
                let sig = w.push(sample_at(i as u64, up, h, rows));
                for r in [sig.dml_rate, sig.lsn_rate, sig.commit_rate, sig.pages_flushed_rate].into_iter().flatten() {
                    prop_assert!(r >= 0.0 && r.is_finite());
                }
            }
        }
    }
}
