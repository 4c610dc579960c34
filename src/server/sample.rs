//! One observation of the server ([`Sample`]) and the pure parsing of the server's
//! rows into it. What the controller acts on is derived from a window of samples in
//! [`crate::signals`].
//!
//! Parsing is pure (rows in, `Sample` out) so every flavor is testable on fixture rows,
//! and hostile values (empty, NULL, negative, huge, non-numeric) become "unknown",
//! never a panic or a wrong number.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::flavor::{RedoSource, SignalSources};
use super::{Knob, KnobValues};

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

    /// The sync point a log of `capacity` bytes would have (the baseline's, for a log
    /// innopilot grew): the sync point keeps its share of the file across a resize
    /// (`log_t::set_capacity()`, checked by tests/redo_resize.rs).
    pub fn sync_point_at(&self, capacity: u64) -> Option<f64> {
        let (sync, cap) = (self.sync_point?, self.capacity?);
        (sync > 0 && cap > 0 && capacity > 0).then(|| sync as f64 * capacity as f64 / cap as f64)
    }

    /// The async flush point, bytes of checkpoint age: the server's when it publishes
    /// one, else 7/8 of the sync point (`max_modified_age_async`, buf0flu.cc /
    /// log0log.cc, on both servers). The one place that fallback is written: the flush
    /// policy, `diagnose` and its advice all read it here.
    pub fn async_point_or_share(&self) -> Option<u64> {
        self.async_point
            .or_else(|| self.sync_point.map(|s| s / 8 * 7))
    }

    /// Whether the checkpoint age is at or past the async point
    /// ([`RedoSample::async_point_or_share`]).
    pub fn past_async(&self) -> Option<bool> {
        Some(self.checkpoint_age? >= self.async_point_or_share()?)
    }
}

/// The oldest active InnoDB transaction, the usual reason purge cannot progress.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
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

/// Wall-clock milliseconds since the Unix epoch (0 if the clock is before 1970): what
/// a live sample's [`Sample::unix_ms`], the audit log and the state file are stamped
/// with. Never a policy's clock ([`Sample::t_ms`] is).
pub fn unix_ms_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// One observation. Counters are cumulative since server start; rates are derived in
/// [`SignalWindow`](crate::signals::SignalWindow).
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
    /// Pages on the buffer pool's free list (`Innodb_buffer_pool_pages_free`): while
    /// the pool evicts, MariaDB's page cleaner holds it between half of
    /// innodb_lru_scan_depth and all of it. Unknown in older recordings.
    #[serde(default)]
    pub free_pages: Option<u64>,
    /// Counter: pages read from disk into the buffer pool
    /// (`Innodb_buffer_pool_reads`). Unknown in older recordings.
    #[serde(default)]
    pub pages_read: Option<u64>,
    /// Counter, part of `pages_flushed`: pages the LRU wrote to free buffer-pool
    /// pages (MariaDB ≥ 10.5 `Innodb_buffer_pool_pages_LRU_flushed`). They are the
    /// least recently used, not the oldest modified: they retire little redo.
    #[serde(default)]
    pub pages_lru_flushed: Option<u64>,
    pub rows_inserted: Option<u64>,
    pub rows_updated: Option<u64>,
    pub rows_deleted: Option<u64>,
    pub commits: Option<u64>,
    /// MariaDB `Innodb_max_trx_id`: the next transaction id. It advances by two for
    /// each read-write transaction (its id at the first write, its commit number at
    /// commit: `trx_sys.get_new_trx_id()` and `trx_sys.assign_new_trx_no()`,
    /// trx0sys.h), not at all for a read-only one. Unlike `Com_commit`, which counts
    /// only COMMIT statements, it sees autocommit writes. MySQL has no such status.
    #[serde(default)]
    pub max_trx_id: Option<u64>,
    /// Counter: undo records of users' updates and deletes that purge has handled,
    /// INNODB_METRICS `purge_upd_exist_or_extern_records` + `purge_del_mark_records`
    /// (`row_purge_record()`, row0purge.cc: one per record, whether or not its undo log
    /// has been freed from history yet). `None` unless both counters are enabled
    /// (`innodb_monitor_enable = module_purge`; they are off by default), since a
    /// disabled counter stands still. What tells history purge has handled from
    /// history it has not ([`crate::signals::Signals::unfreed_history`]).
    #[serde(default)]
    pub purge_records: Option<u64>,
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
/// and TRUE/FALSE, and a decimal whose fraction is all zeros (DOUBLE variables such as
/// innodb_max_dirty_pages_pct_lwm read back as `1.000000`); rejects empty, negative,
/// fractional, overflowing or other text. A knob whose value has a fraction is thus
/// absent from the sample and innopilot never manages it.
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
    // `str::parse` takes a leading '+'; the server never writes one, so a value that
    // has it is not the server's number.
    if v.starts_with('+') {
        return Err(format!("signed value {v:?}"));
    }
    let v = match v.split_once('.') {
        Some((whole, frac))
            if !whole.is_empty() && !frac.is_empty() && frac.bytes().all(|b| b == b'0') =>
        {
            whole
        }
        Some(_) => {
            let shown: String = v.chars().take(40).collect();
            return Err(format!(
                "{shown:?} is not a whole number (innopilot manages whole values only)"
            ));
        }
        None => v,
    };
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
    "Innodb_buffer_pool_pages_LRU_flushed",
    "Innodb_buffer_pool_wait_free",
    "Innodb_buffer_pool_pages_free",
    "Innodb_buffer_pool_reads",
    "Innodb_rows_inserted",
    "Innodb_rows_updated",
    "Innodb_rows_deleted",
    "Handler_write",
    "Handler_update",
    "Handler_delete",
    "Com_commit",
    "Innodb_max_trx_id",
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

/// INNODB_METRICS purge counters read on both flavors, only while enabled (the union
/// query filters on it): see [`Sample::purge_records`].
pub const PURGE_METRIC_NAMES: &[&str] = &[
    "purge_upd_exist_or_extern_records",
    "purge_del_mark_records",
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
    s.pages_lru_flushed = rows.status("Innodb_buffer_pool_pages_LRU_flushed", &mut u);
    s.free_page_waits = rows.status("Innodb_buffer_pool_wait_free", &mut u);
    s.free_pages = rows.status("Innodb_buffer_pool_pages_free", &mut u);
    s.pages_read = rows.status("Innodb_buffer_pool_reads", &mut u);
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
    s.max_trx_id = rows.status("Innodb_max_trx_id", &mut u);
    // Both counters or none: one of them alone is not the records purge handled.
    s.purge_records = PURGE_METRIC_NAMES
        .iter()
        .map(|n| rows.metric(n, &mut u))
        .collect::<Option<Vec<u64>>>()
        .map(|v| v.iter().fold(0u64, |a, b| a.saturating_add(*b)));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::flavor::{HistorySource, ReplicaSource, UndoSource};
    use proptest::prelude::*;

    #[test]
    fn doubles_with_a_zero_fraction_are_whole_values() {
        assert_eq!(parse_u64("0.000000"), Ok(0));
        assert_eq!(parse_u64(" 10.000000 "), Ok(10));
        // A real fraction is not a whole value: the knob is left alone.
        assert!(parse_u64("0.001000")
            .unwrap_err()
            .contains("not a whole number"));
        assert!(parse_u64("1.").is_err());
        assert!(parse_u64(".5").is_err());
        assert!(parse_u64("1.0.0").is_err());
        assert!(parse_u64("+2").is_err());
    }

    /// Run 113's logs: 926 MiB grown, 128 MiB baseline, the sync point 80.5 % of each.
    #[test]
    fn the_sync_point_keeps_its_share_at_another_capacity() {
        let r = RedoSample {
            sync_point: Some(781_331_200),
            capacity: Some(970_981_376),
            ..RedoSample::default()
        };
        let at_base = r.sync_point_at(134_217_728).unwrap();
        assert!((at_base - 108_003_000.0).abs() < 1e3, "{at_base}");
        assert_eq!(r.sync_point_at(970_981_376), Some(781_331_200.0));
        assert_eq!(r.sync_point_at(0), None);
        let unknown = RedoSample {
            capacity: None,
            ..r.clone()
        };
        assert_eq!(unknown.sync_point_at(134_217_728), None);
    }

    /// The records purge handled are both counters' sum, and unknown unless both are
    /// there (the union query returns only enabled ones).
    #[test]
    fn purge_records_need_both_counters() {
        use RowKind::*;
        let both = rows(&[
            (Metric, "purge_upd_exist_or_extern_records", Some("700")),
            (Metric, "purge_del_mark_records", Some("42")),
        ]);
        assert_eq!(build_sample(&both, &maria()).purge_records, Some(742));
        let one = rows(&[(Metric, "purge_del_mark_records", Some("42"))]);
        assert_eq!(build_sample(&one, &maria()).purge_records, None);
        let bad = rows(&[
            (Metric, "purge_upd_exist_or_extern_records", Some("-1")),
            (Metric, "purge_del_mark_records", Some("42")),
        ]);
        let s = build_sample(&bad, &mysql8());
        assert_eq!(s.purge_records, None);
        assert!(!s.unparsed.is_empty());
    }

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

    proptest! {
        #[test]
        fn parse_never_panics(s in ".{0,40}") {
            let _ = parse_u64(&s);
        }
    }
}
