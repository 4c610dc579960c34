//! What the controller publishes for `/metrics`, `/healthz` and `/readyz`: a
//! [`Snapshot`] taken after every tick, and its rendering in the Prometheus text format.
//!
//! Names follow mysqld_exporter's style: prefix `innopilot_`, snake_case, the unit as a
//! suffix (`_seconds`, `_bytes`, `_ratio`), `_total` on counters, one family per
//! quantity with labels for its dimensions (`knob`, `policy`, `outcome`, `kind`).
//! Unknown signals are left out rather than exported as 0: a missing series is an
//! honest "unknown", a zero is a lie an alert would believe. The full list is in
//! `docs/operations.md`.
//!
//! No metrics library: the exposition format is a few lines of text, and the counters
//! live in the controller's [`Telemetry`], so nothing here needs locks or atomics.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::time::Duration;

use tokio::time::Instant;

use crate::server::{Knob, KnobValues, ServerError};
use crate::signals::Signals;

/// Upper bounds (seconds) of the sample-duration histogram: a healthy sample takes a
/// few milliseconds; anything near `server.query_timeout` is a server in trouble.
pub const SAMPLE_DURATION_BUCKETS: [f64; 11] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];

/// A cumulative histogram with fixed buckets.
#[derive(Debug, Clone, PartialEq)]
pub struct Histogram {
    bounds: &'static [f64],
    /// Observations ≤ each bound (not cumulative here; summed when rendered).
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram::new(&SAMPLE_DURATION_BUCKETS)
    }
}

impl Histogram {
    pub fn new(bounds: &'static [f64]) -> Self {
        Histogram {
            bounds,
            counts: vec![0; bounds.len()],
            sum: 0.0,
            count: 0,
        }
    }

    pub fn observe(&mut self, value: f64) {
        if !value.is_finite() || value < 0.0 {
            return;
        }
        if let Some(i) = self.bounds.iter().position(|b| value <= *b) {
            self.counts[i] += 1;
        }
        self.sum += value;
        self.count += 1;
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn sum(&self) -> f64 {
        self.sum
    }

    /// (upper bound, cumulative count) per bucket, without `+Inf`.
    pub fn cumulative(&self) -> Vec<(f64, u64)> {
        let mut acc = 0;
        self.bounds
            .iter()
            .zip(&self.counts)
            .map(|(b, c)| {
                acc += c;
                (*b, acc)
            })
            .collect()
    }
}

/// Counters the control loop keeps for the metrics endpoint, cumulative over the
/// process (not reset by a reload or a reconnect).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Telemetry {
    /// Decisions by (policy, knob, outcome), as written to the audit log.
    pub decisions: BTreeMap<(String, Knob, String), u64>,
    /// Errors by kind (see [`error_kind`]).
    pub errors: BTreeMap<&'static str, u64>,
    /// Audit events by their `event` name.
    pub events: BTreeMap<String, u64>,
    /// Wall time of successful samples, seconds.
    pub sample_duration: Histogram,
    /// Configuration reloads (SIGHUP) that were applied.
    pub reloads_ok: u64,
    /// Configuration reloads refused because the new file was invalid.
    pub reloads_failed: u64,
    /// Whether the last reload attempt was applied (true until one fails).
    pub last_reload_ok: bool,
}

impl Telemetry {
    pub fn new() -> Self {
        Telemetry {
            last_reload_ok: true,
            ..Telemetry::default()
        }
    }

    pub fn count_error(&mut self, kind: &'static str) {
        *self.errors.entry(kind).or_insert(0) += 1;
    }

    pub fn count_server_error(&mut self, e: &ServerError) {
        self.count_error(error_kind(e));
    }

    pub fn count_decision(&mut self, policy: &str, knob: Knob, outcome: &str) {
        *self
            .decisions
            .entry((policy.to_string(), knob, outcome.to_string()))
            .or_insert(0) += 1;
    }

    pub fn count_event(&mut self, event: &str) {
        *self.events.entry(event.to_string()).or_insert(0) += 1;
    }
}

/// The `kind` label of an error: one word per [`ServerError`] variant; the controller
/// adds `audit` (the audit log could not be written) and `state_file`.
pub fn error_kind(e: &ServerError) -> &'static str {
    match e {
        ServerError::Connect { .. } => "connect",
        ServerError::Timeout { .. } => "timeout",
        ServerError::Lost { .. } => "lost",
        ServerError::Query { .. } => "query",
        ServerError::Denied { .. } => "denied",
        ServerError::Unexpected { .. } => "unexpected",
        ServerError::NotSettable { .. } => "not_settable",
        ServerError::Unsupported { .. } => "unsupported",
    }
}

/// Where the controller is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Phase {
    /// Connecting, checking privileges, recovering, reading the baseline.
    #[default]
    Starting,
    /// The loop runs.
    Running,
    /// Restoring the baseline before exit.
    Stopping,
}

/// Everything the HTTP endpoints show, as of the last tick.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub phase: Phase,
    pub dry_run: bool,
    /// The sampling connection works (false from a lost connection until a probe
    /// succeeds again).
    pub connected: bool,
    /// When the last successful sample was taken.
    pub last_sample: Option<Instant>,
    /// When the loop last ran a tick (successful or not).
    pub last_tick: Option<Instant>,
    /// "MariaDB 10.11.19", once probed.
    pub server: Option<String>,
    pub signals: Option<Signals>,
    /// What innopilot believes is in effect per knob.
    pub knobs: KnobValues,
    pub baseline: KnobValues,
    /// Knobs innopilot may change (`[knobs.*] manage`).
    pub managed: BTreeSet<Knob>,
    pub operator_owned: BTreeSet<Knob>,
    pub ticks: u64,
    pub samples_ok: u64,
    pub sample_errors: u64,
    pub sets_applied: u64,
    pub sets_failed: u64,
    pub telemetry: Telemetry,
    /// The sampling interval, for readers that want to judge staleness themselves.
    pub interval: Duration,
}

/// The verdict of a health endpoint: HTTP status and a one-line reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Health {
    pub ok: bool,
    pub message: String,
}

/// `/healthz`: samples are fresh (the last successful sample is younger than
/// `stale_after`) and the connection works.
pub fn healthz(s: &Snapshot, now: Instant, stale_after: Duration) -> Health {
    let fail = |m: String| Health {
        ok: false,
        message: m,
    };
    match s.phase {
        Phase::Starting => return fail("starting: not connected to the server yet".into()),
        Phase::Stopping => return fail("stopping: restoring the baseline".into()),
        Phase::Running => {}
    }
    if !s.connected {
        return fail("disconnected from the server".into());
    }
    match s.last_sample {
        None => fail("no sample yet".into()),
        Some(t) => {
            let age = now.saturating_duration_since(t);
            if age > stale_after {
                fail(format!(
                    "stale: the last successful sample is {:.1}s old (limit {})",
                    age.as_secs_f64(),
                    humantime::format_duration(stale_after)
                ))
            } else {
                Health {
                    ok: true,
                    message: format!("ok: last sample {:.1}s ago", age.as_secs_f64()),
                }
            }
        }
    }
}

/// `/readyz`: the controller has started (privileges checked, crash recovery done,
/// baseline read) and is not shutting down. A lost server does not make innopilot
/// unready: it keeps its baseline and waits; `/healthz` reports that.
pub fn readyz(s: &Snapshot) -> Health {
    match s.phase {
        Phase::Running => Health {
            ok: true,
            message: "ready".into(),
        },
        Phase::Starting => Health {
            ok: false,
            message: "starting: connecting and reading the baseline".into(),
        },
        Phase::Stopping => Health {
            ok: false,
            message: "stopping: restoring the baseline".into(),
        },
    }
}

/// Prometheus text exposition, format 0.0.4.
struct Out {
    text: String,
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn fmt_value(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v == f64::INFINITY {
        "+Inf".into()
    } else if v == f64::NEG_INFINITY {
        "-Inf".into()
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

impl Out {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.text, "# HELP {name} {help}");
        let _ = writeln!(self.text, "# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], v: f64) {
        self.text.push_str(name);
        if !labels.is_empty() {
            self.text.push('{');
            for (i, (k, val)) in labels.iter().enumerate() {
                if i > 0 {
                    self.text.push(',');
                }
                let _ = write!(self.text, "{k}=\"{}\"", escape(val));
            }
            self.text.push('}');
        }
        let _ = writeln!(self.text, " {}", fmt_value(v));
    }

    /// A gauge with one unlabelled value; nothing at all when unknown.
    fn gauge(&mut self, name: &str, help: &str, v: Option<f64>) {
        if let Some(v) = v.filter(|v| v.is_finite()) {
            self.family(name, "gauge", help);
            self.sample(name, &[], v);
        }
    }
}

fn b(v: bool) -> f64 {
    if v {
        1.0
    } else {
        0.0
    }
}

fn u(v: Option<u64>) -> Option<f64> {
    v.map(|x| x as f64)
}

/// Every `event` of `innopilot_audit_events_total` (the audit log's event names),
/// exported from the start at 0.
pub const AUDIT_EVENTS: [&str; 12] = [
    "start",
    "decision",
    "restore",
    "recovery_skipped",
    "operator_override",
    "released",
    "connection_lost",
    "connection_regained",
    "stop",
    "warning",
    "purge_blocked",
    "purge_unblocked",
];

/// Every `outcome` of `innopilot_decisions_total`.
pub const DECISION_OUTCOMES: [&str; 6] = [
    "applied",
    "dry_run",
    "clipped",
    "rejected",
    "no_change",
    "failed",
];

/// Every `kind` of `innopilot_errors_total`, exported from the start at 0.
pub const ERROR_KINDS: [&str; 10] = [
    "connect",
    "timeout",
    "lost",
    "query",
    "denied",
    "unexpected",
    "not_settable",
    "unsupported",
    "audit",
    "state_file",
];

/// A counter with one unlabelled value; nothing at all when unknown.
fn counter(o: &mut Out, name: &str, help: &str, v: Option<f64>) {
    if let Some(v) = v.filter(|v| v.is_finite()) {
        o.family(name, "counter", help);
        o.sample(name, &[], v);
    }
}

/// The metric-name suffix of a knob's unit and the factor to its base unit.
pub fn knob_unit(k: Knob) -> (&'static str, f64) {
    match k {
        Knob::PurgeThreads => ("threads", 1.0),
        Knob::PurgeBatchSize => ("pages", 1.0),
        Knob::MaxPurgeLag => ("records", 1.0),
        Knob::MaxPurgeLagDelay => ("seconds", 1e-6),
        Knob::IoCapacity | Knob::IoCapacityMax => ("iops", 1.0),
        Knob::LogFileSize | Knob::RedoLogCapacity | Knob::MaxUndoLogSize => ("bytes", 1.0),
        Knob::UndoLogTruncate => ("enabled", 1.0),
    }
}

/// `<prefix>_<unit>{knob}` families, one per unit present in `values`.
fn knob_families(o: &mut Out, prefix: &str, what: &str, values: &KnobValues) {
    let mut by_unit: BTreeMap<&'static str, Vec<(Knob, f64)>> = BTreeMap::new();
    for (k, v) in values {
        let (unit, scale) = knob_unit(*k);
        by_unit
            .entry(unit)
            .or_default()
            .push((*k, *v as f64 * scale));
    }
    for (unit, knobs) in by_unit {
        let name = format!("{prefix}_{unit}");
        o.family(
            &name,
            "gauge",
            &format!("Knobs measured in {unit}, value {what}."),
        );
        for (k, v) in knobs {
            o.sample(&name, &[("knob", k.var_name())], v);
        }
    }
}

/// Renders the snapshot. Everything time-related is a Unix timestamp, so `_now` (kept
/// for callers) is not needed.
pub fn render(s: &Snapshot, _now: Instant) -> String {
    let mut o = Out {
        text: String::with_capacity(8 * 1024),
    };
    o.family(
        "innopilot_build_info",
        "gauge",
        "innopilot's version, as a label; always 1.",
    );
    o.sample(
        "innopilot_build_info",
        &[("version", env!("CARGO_PKG_VERSION"))],
        1.0,
    );
    if let Some(server) = &s.server {
        // "MariaDB 10.11.19": flavor and version as separate labels, so a query can
        // select on either (mysqld_exporter's mysql_version_info habit).
        let (flavor, version) = server.split_once(' ').unwrap_or((server, ""));
        let flavor = flavor.to_ascii_lowercase();
        o.family(
            "innopilot_server_info",
            "gauge",
            "The server innopilot watches: flavor and version as labels; always 1.",
        );
        o.sample(
            "innopilot_server_info",
            &[("flavor", &flavor), ("version", version)],
            1.0,
        );
    }
    o.gauge(
        "innopilot_up",
        "Whether the last sample of the server succeeded (1) or not (0).",
        Some(b(s.connected && s.last_sample.is_some())),
    );
    o.gauge(
        "innopilot_connected",
        "Whether innopilot has a working connection to the server.",
        Some(b(s.connected)),
    );
    o.gauge(
        "innopilot_ready",
        "Whether the controller has started and is not stopping (as /readyz).",
        Some(b(s.phase == Phase::Running)),
    );
    o.gauge(
        "innopilot_dry_run",
        "1 when innopilot only decides and logs (run --dry-run), 0 when it acts.",
        Some(b(s.dry_run)),
    );
    o.gauge(
        "innopilot_sampler_interval_seconds",
        "Configured sampling interval.",
        Some(s.interval.as_secs_f64()),
    );
    // Timestamps, not ages: an age is stale the moment it is scraped, a timestamp
    // lets `time() - x` compute the age at query time (Prometheus' naming guide).
    o.gauge(
        "innopilot_last_sample_timestamp_seconds",
        "Unix time of the last successful sample (absent before the first).",
        s.last_sample
            .and(s.signals.as_ref())
            .map(|sig| sig.sample.unix_ms as f64 / 1000.0),
    );

    for (name, help, v) in [
        ("innopilot_ticks_total", "Control loop iterations.", s.ticks),
        (
            "innopilot_samples_total",
            "Successful samples of the server.",
            s.samples_ok,
        ),
        (
            "innopilot_sample_errors_total",
            "Ticks without a sample (query failed or server unreachable).",
            s.sample_errors,
        ),
        (
            "innopilot_sets_total",
            "SET GLOBAL statements that succeeded.",
            s.sets_applied,
        ),
        (
            "innopilot_set_errors_total",
            "SET GLOBAL statements that failed.",
            s.sets_failed,
        ),
    ] {
        o.family(name, "counter", help);
        o.sample(name, &[], v as f64);
    }

    // ---- signals ------------------------------------------------------------------
    if let Some(sig) = &s.signals {
        let x = &sig.sample;
        let trx = x.oldest_trx.as_ref();
        o.gauge(
            "innopilot_innodb_history_list_length",
            "Undo records not yet purged (InnoDB history list length).",
            u(sig.history_len),
        );
        o.gauge(
            "innopilot_innodb_history_rate_per_second",
            "History derivative, records per second (least squares over sampler.window).",
            sig.history_rate,
        );
        o.gauge(
            "innopilot_redo_fill_ratio",
            "Checkpoint age over the sync-flush point (1 = users wait for flushing).",
            sig.redo_fill,
        );
        o.gauge(
            "innopilot_redo_fill_trend_ratio_per_second",
            "Slope of the redo fill ratio over the window.",
            sig.redo_fill_trend,
        );
        o.gauge(
            "innopilot_redo_checkpoint_age_bytes",
            "Current LSN minus last checkpoint LSN.",
            u(x.redo.checkpoint_age),
        );
        o.gauge(
            "innopilot_redo_async_flush_point_bytes",
            "Checkpoint age where this server starts flushing ahead asynchronously.",
            u(x.redo.async_point),
        );
        o.gauge(
            "innopilot_redo_sync_flush_point_bytes",
            "Checkpoint age where this server flushes synchronously (users wait).",
            u(x.redo.sync_point),
        );
        o.gauge(
            "innopilot_redo_capacity_bytes",
            "Configured redo log size.",
            u(x.redo.capacity),
        );
        counter(
            &mut o,
            "innopilot_redo_written_bytes_total",
            "Redo written since the server started (the LSN), bytes; rate() gives the write rate.",
            u(x.redo.lsn),
        );
        o.gauge(
            "innopilot_buffer_pool_dirty_pages",
            "Modified pages in the buffer pool.",
            u(x.dirty_pages),
        );
        o.gauge(
            "innopilot_buffer_pool_pages",
            "Pages in the buffer pool.",
            u(x.total_pages),
        );
        o.gauge(
            "innopilot_buffer_pool_dirty_ratio",
            "Dirty pages over total pages.",
            sig.dirty_fraction,
        );
        // The server's own counters stay counters (as mysqld_exporter exports them):
        // rate() over any window beats a rate fixed to innopilot's interval.
        counter(
            &mut o,
            "innopilot_innodb_pages_flushed_total",
            "Pages written by flushing since the server started (Innodb_buffer_pool_pages_flushed).",
            u(x.pages_flushed),
        );
        counter(
            &mut o,
            "innopilot_innodb_buffer_pool_wait_free_total",
            "Times a user thread waited for a free buffer-pool page (Innodb_buffer_pool_wait_free).",
            u(x.free_page_waits),
        );
        let rows: Vec<(&str, f64)> = [
            ("inserted", x.rows_inserted),
            ("updated", x.rows_updated),
            ("deleted", x.rows_deleted),
        ]
        .into_iter()
        .filter_map(|(op, v)| Some((op, v? as f64)))
        .collect();
        if !rows.is_empty() {
            o.family(
                "innopilot_innodb_rows_total",
                "counter",
                "InnoDB rows changed since the server started, by operation (Innodb_rows_*).",
            );
            for (op, v) in rows {
                o.sample("innopilot_innodb_rows_total", &[("operation", op)], v);
            }
        }
        counter(
            &mut o,
            "innopilot_commits_total",
            "Commits since the server started (Com_commit).",
            u(x.commits),
        );
        o.gauge(
            "innopilot_threads_running",
            "Threads_running.",
            u(x.threads_running),
        );
        o.gauge(
            "innopilot_innodb_active_transactions",
            "Active InnoDB transactions.",
            Some(trx.and_then(|t| t.active_count).unwrap_or(0) as f64),
        );
        o.gauge(
            "innopilot_oldest_transaction_start_timestamp_seconds",
            "Unix time the oldest active InnoDB transaction started (absent when there is none).",
            trx.map(|t| (x.unix_ms / 1000).saturating_sub(t.age_s) as f64),
        );
        o.gauge(
            "innopilot_oldest_transaction_holds_read_view",
            "Whether the oldest transaction (probably) holds a read view that blocks purge.",
            Some(b(trx.is_some_and(|t| t.holds_read_view))),
        );
        o.gauge(
            "innopilot_undo_tablespace_bytes",
            "Size of the undo tablespaces (absent when not visible from here).",
            u(x.undo_bytes),
        );
        if let Some(t) = x.undo_truncations {
            o.family(
                "innopilot_undo_truncations_total",
                "counter",
                "Undo tablespace truncations since the server started.",
            );
            o.sample("innopilot_undo_truncations_total", &[], t as f64);
        }
        o.gauge(
            "innopilot_replica",
            "Whether the server is a replica.",
            Some(b(x.is_replica)),
        );
        o.gauge(
            "innopilot_replica_lag_seconds",
            "Seconds behind the source (absent when not a replica or unknown).",
            u(x.replica_lag_s),
        );
        o.gauge(
            "innopilot_server_start_time_seconds",
            "Unix time the server started (from its Uptime).",
            x.uptime_s
                .map(|up| (x.unix_ms / 1000).saturating_sub(up) as f64),
        );
        o.gauge(
            "innopilot_sample_round_trips",
            "Queries the last sample cost.",
            Some(x.round_trips as f64),
        );
    }

    // ---- knobs --------------------------------------------------------------------
    // One family per unit: threads, bytes and seconds never share a metric.
    knob_families(
        &mut o,
        "innopilot_knob",
        "in effect, as innopilot last read or set it (dry-run: would have set)",
        &s.knobs,
    );
    knob_families(
        &mut o,
        "innopilot_knob_baseline",
        "found at start: what innopilot restores on exit",
        &s.baseline,
    );
    o.family(
        "innopilot_knob_managed",
        "gauge",
        "Whether innopilot may change the knob ([knobs.*] manage).",
    );
    for k in Knob::ALL {
        o.sample(
            "innopilot_knob_managed",
            &[("knob", k.var_name())],
            b(s.managed.contains(&k)),
        );
    }
    o.family(
        "innopilot_knob_operator_owned",
        "gauge",
        "Whether someone else changed the knob during this run, so innopilot leaves it alone.",
    );
    for k in Knob::ALL {
        o.sample(
            "innopilot_knob_operator_owned",
            &[("knob", k.var_name())],
            b(s.operator_owned.contains(&k)),
        );
    }

    // ---- decisions, events, errors --------------------------------------------------
    let t = &s.telemetry;
    o.family(
        "innopilot_decisions_total",
        "counter",
        "Decisions written to the audit log, by policy, knob and outcome.",
    );
    // Once a policy has decided about a knob, every outcome of that pair has a series
    // (0 until it happens), so `increase(...{outcome="failed"}[10m])` sees the first
    // failure. Pairs that never decided stay absent: policies × knobs × outcomes of
    // zeros would be noise.
    let mut decisions: BTreeMap<(String, Knob, String), u64> = BTreeMap::new();
    for (policy, knob, _) in t.decisions.keys() {
        for outcome in DECISION_OUTCOMES {
            decisions.insert((policy.clone(), *knob, outcome.to_string()), 0);
        }
    }
    for (key, n) in &t.decisions {
        decisions.insert(key.clone(), *n);
    }
    for ((policy, knob, outcome), n) in &decisions {
        o.sample(
            "innopilot_decisions_total",
            &[
                ("policy", policy),
                ("knob", knob.var_name()),
                ("outcome", outcome),
            ],
            *n as f64,
        );
    }
    o.family(
        "innopilot_audit_events_total",
        "counter",
        "Audit log records, by event.",
    );
    for event in AUDIT_EVENTS {
        let n = t.events.get(event).copied().unwrap_or(0);
        o.sample(
            "innopilot_audit_events_total",
            &[("event", event)],
            n as f64,
        );
    }
    for (event, n) in t
        .events
        .iter()
        .filter(|(e, _)| !AUDIT_EVENTS.contains(&e.as_str()))
    {
        o.sample(
            "innopilot_audit_events_total",
            &[("event", event)],
            *n as f64,
        );
    }
    o.family(
        "innopilot_errors_total",
        "counter",
        "Errors, by kind: connect, timeout, lost, query, denied, unexpected, not_settable, unsupported, audit, state_file.",
    );
    // Every kind, zero or not: a series that appears only with the first error
    // makes `increase()` miss that error.
    for kind in ERROR_KINDS {
        let n = t.errors.get(kind).copied().unwrap_or(0);
        o.sample("innopilot_errors_total", &[("kind", kind)], n as f64);
    }
    for (kind, n) in t.errors.iter().filter(|(k, _)| !ERROR_KINDS.contains(k)) {
        o.sample("innopilot_errors_total", &[("kind", kind)], *n as f64);
    }
    o.family(
        "innopilot_config_reloads_total",
        "counter",
        "Configuration reloads (SIGHUP), by result.",
    );
    o.sample(
        "innopilot_config_reloads_total",
        &[("result", "applied")],
        t.reloads_ok as f64,
    );
    o.sample(
        "innopilot_config_reloads_total",
        &[("result", "rejected")],
        t.reloads_failed as f64,
    );
    o.gauge(
        "innopilot_config_last_reload_successful",
        "Whether the last reload was applied (1 before any reload).",
        Some(b(t.last_reload_ok)),
    );

    let h = &t.sample_duration;
    let name = "innopilot_sample_duration_seconds";
    o.family(
        name,
        "histogram",
        "Wall time of one sample of the server (all its queries).",
    );
    for (le, c) in h.cumulative() {
        o.sample(
            &format!("{name}_bucket"),
            &[("le", &fmt_value(le))],
            c as f64,
        );
    }
    o.sample(
        &format!("{name}_bucket"),
        &[("le", "+Inf")],
        h.count() as f64,
    );
    o.sample(&format!("{name}_sum"), &[], h.sum());
    o.sample(&format!("{name}_count"), &[], h.count() as f64);
    o.text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::sample::Sample;

    fn snapshot() -> Snapshot {
        let now = Instant::now();
        let mut t = Telemetry::new();
        t.count_decision("watermark", Knob::PurgeThreads, "applied");
        t.count_decision("watermark", Knob::PurgeThreads, "applied");
        t.count_error("timeout");
        t.sample_duration.observe(0.003);
        t.sample_duration.observe(0.2);
        Snapshot {
            phase: Phase::Running,
            connected: true,
            last_sample: Some(now),
            last_tick: Some(now),
            server: Some("MariaDB 10.11.19".into()),
            signals: Some(Signals {
                history_len: Some(1234),
                redo_fill: Some(0.5),
                sample: Sample {
                    replica_lag_s: None,
                    unix_ms: 1_700_000_000_000,
                    uptime_s: Some(100),
                    rows_updated: Some(42),
                    ..Sample::default()
                },
                ..Signals::default()
            }),
            knobs: KnobValues::from([
                (Knob::PurgeThreads, 3),
                (Knob::MaxPurgeLagDelay, 5000),
                (Knob::IoCapacity, 2000),
            ]),
            baseline: KnobValues::from([(Knob::PurgeThreads, 4)]),
            managed: BTreeSet::from([Knob::PurgeThreads]),
            operator_owned: BTreeSet::from([Knob::IoCapacity]),
            telemetry: t,
            interval: Duration::from_secs(1),
            ..Snapshot::default()
        }
    }

    #[test]
    fn renders_families_and_labels() {
        let s = snapshot();
        let text = render(&s, Instant::now());
        for want in [
            "innopilot_up 1",
            "innopilot_innodb_history_list_length 1234",
            "innopilot_redo_fill_ratio 0.5",
            // One family per unit, base units.
            "innopilot_knob_threads{knob=\"innodb_purge_threads\"} 3",
            "innopilot_knob_seconds{knob=\"innodb_max_purge_lag_delay\"} 0.005",
            "innopilot_knob_iops{knob=\"innodb_io_capacity\"} 2000",
            "innopilot_knob_baseline_threads{knob=\"innodb_purge_threads\"} 4",
            // flavor and version apart; timestamps, not ages; counters as counters.
            "innopilot_server_info{flavor=\"mariadb\",version=\"10.11.19\"} 1",
            "innopilot_last_sample_timestamp_seconds 1700000000",
            "innopilot_server_start_time_seconds 1699999900",
            "# TYPE innopilot_innodb_rows_total counter",
            "innopilot_innodb_rows_total{operation=\"updated\"} 42",
            // Every error kind and audit event has a series from the start; a pair
            // that decided has every outcome.
            "innopilot_errors_total{kind=\"connect\"} 0",
            "innopilot_audit_events_total{event=\"restore\"} 0",
            "innopilot_decisions_total{policy=\"watermark\",knob=\"innodb_purge_threads\",outcome=\"failed\"} 0",
            "innopilot_knob_operator_owned{knob=\"innodb_io_capacity\"} 1",
            "innopilot_decisions_total{policy=\"watermark\",knob=\"innodb_purge_threads\",outcome=\"applied\"} 2",
            "innopilot_errors_total{kind=\"timeout\"} 1",
            "innopilot_sample_duration_seconds_bucket{le=\"0.005\"} 1",
            "innopilot_sample_duration_seconds_bucket{le=\"0.25\"} 2",
            "innopilot_sample_duration_seconds_bucket{le=\"+Inf\"} 2",
            "innopilot_sample_duration_seconds_count 2",
            "# TYPE innopilot_decisions_total counter",
        ] {
            assert!(text.contains(want), "missing {want:?} in\n{text}");
        }
        // Unknown signals are absent, not zero.
        assert!(!text.contains("innopilot_replica_lag_seconds"), "{text}");
        // Every sample line belongs to a declared family.
        let mut declared = BTreeSet::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                declared.insert(rest.split(' ').next().unwrap().to_string());
            } else if !line.starts_with('#') {
                let name = line.split(['{', ' ']).next().unwrap();
                let base = name
                    .strip_suffix("_bucket")
                    .or_else(|| name.strip_suffix("_sum"))
                    .or_else(|| name.strip_suffix("_count"))
                    .filter(|b| declared.contains(*b))
                    .unwrap_or(name);
                assert!(declared.contains(base), "{line} has no TYPE");
            }
        }
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }

    #[test]
    fn health_follows_freshness_and_connection() {
        let mut s = snapshot();
        let now = Instant::now();
        assert!(healthz(&s, now, Duration::from_secs(5)).ok);
        assert!(readyz(&s).ok);
        let later = now + Duration::from_secs(10);
        let h = healthz(&s, later, Duration::from_secs(5));
        assert!(!h.ok && h.message.contains("stale"), "{h:?}");
        s.connected = false;
        assert!(!healthz(&s, now, Duration::from_secs(5)).ok);
        assert!(
            readyz(&s).ok,
            "a lost server does not make innopilot unready"
        );
        s.phase = Phase::Stopping;
        assert!(!readyz(&s).ok);
        s.phase = Phase::Starting;
        assert!(!healthz(&s, now, Duration::from_secs(5)).ok);
    }

    #[test]
    fn histogram_is_cumulative() {
        let mut h = Histogram::default();
        for v in [0.0005, 0.002, 0.002, 3.0, f64::NAN, -1.0] {
            h.observe(v);
        }
        assert_eq!(h.count(), 4);
        let c = h.cumulative();
        assert_eq!(c[0], (0.001, 1));
        assert_eq!(c[1], (0.0025, 3));
        assert_eq!(c.last().unwrap().1, 3, "3 s is only in +Inf");
    }
}
