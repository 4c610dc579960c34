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
//! The exposition is the `prometheus` crate's: each scrape registers fresh collectors,
//! set from the snapshot, in a registry of its own and encodes them with its
//! `TextEncoder` (format 0.0.4, which `promtool check metrics` accepts). The counters
//! live in the controller's [`Telemetry`], so the control loop needs no shared
//! registry; only the sample-duration histogram is a `prometheus::Histogram` from the
//! start (a histogram cannot be set from counts).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use prometheus::core::Collector;
use prometheus::{
    Gauge, GaugeVec, Histogram, HistogramOpts, IntCounter, IntCounterVec, Opts, Registry,
    TextEncoder,
};
use tokio::time::Instant;

use crate::server::{Knob, KnobValues, ServerError};
use crate::signals::Signals;

/// Upper bounds (seconds) of the sample-duration histogram: a healthy sample takes a
/// few milliseconds; anything near `server.query_timeout` is a server in trouble.
pub const SAMPLE_DURATION_BUCKETS: [f64; 11] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];

/// `innopilot_sample_duration_seconds`, empty.
fn sample_duration_histogram() -> Histogram {
    let opts = HistogramOpts::new(
        "innopilot_sample_duration_seconds",
        "Wall time of one sample of the server (all its queries).",
    )
    .buckets(SAMPLE_DURATION_BUCKETS.to_vec());
    Histogram::with_opts(opts).expect("constant, valid histogram options")
}

/// Counters the control loop keeps for the metrics endpoint, cumulative over the
/// process (not reset by a reload or a reconnect).
#[derive(Debug, Clone)]
pub struct Telemetry {
    /// Decisions by (policy, knob, outcome), as written to the audit log.
    pub decisions: BTreeMap<(String, Knob, String), u64>,
    /// Errors by kind (see [`error_kind`]).
    pub errors: BTreeMap<&'static str, u64>,
    /// Audit events by their `event` name.
    pub events: BTreeMap<String, u64>,
    /// Wall time of successful samples, seconds. A clone shares the observations, so
    /// a published snapshot's histogram is the live one.
    pub sample_duration: Histogram,
    /// Configuration reloads (SIGHUP) that were applied.
    pub reloads_ok: u64,
    /// Configuration reloads refused because the new file was invalid.
    pub reloads_failed: u64,
    /// Whether the last reload attempt was applied (true until one fails).
    pub last_reload_ok: bool,
}

impl Default for Telemetry {
    fn default() -> Self {
        Telemetry::new()
    }
}

impl Telemetry {
    pub fn new() -> Self {
        Telemetry {
            decisions: BTreeMap::new(),
            errors: BTreeMap::new(),
            events: BTreeMap::new(),
            sample_duration: sample_duration_histogram(),
            reloads_ok: 0,
            reloads_failed: 0,
            last_reload_ok: true,
        }
    }

    /// One sample's wall time, seconds; NaN, infinite and negative values are dropped
    /// (they would poison the histogram's sum).
    pub fn observe_sample_duration(&mut self, seconds: f64) {
        if seconds.is_finite() && seconds >= 0.0 {
            self.sample_duration.observe(seconds);
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
        ServerError::ResizeUnderWay { .. } => "resize_under_way",
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

/// The families of one scrape, in a registry of their own (the counters live in the
/// controller's [`Telemetry`] and [`Snapshot`], so each scrape sets fresh collectors
/// from those values). Registration fails only for an invalid or duplicate name, a
/// bug the unit tests catch; a scrape then goes on without that family.
struct Families {
    registry: Registry,
}

impl Families {
    fn add<C: Collector + 'static>(&self, c: Result<C, prometheus::Error>) {
        if let Err(e) = c.and_then(|c| self.registry.register(Box::new(c))) {
            debug_assert!(false, "metric family: {e}");
            tracing::error!("metric family left out: {e}");
        }
    }

    /// A gauge with one unlabelled value; nothing at all when unknown.
    fn gauge(&self, name: &str, help: &str, v: Option<f64>) {
        if let Some(v) = v.filter(|v| v.is_finite()) {
            self.add(Gauge::new(name, help).inspect(|g| g.set(v)));
        }
    }

    /// A counter with one unlabelled value; nothing at all when unknown.
    fn counter(&self, name: &str, help: &str, v: Option<u64>) {
        if let Some(v) = v {
            self.add(IntCounter::new(name, help).inspect(|c| c.inc_by(v)));
        }
    }

    /// A labelled gauge; nothing at all without samples.
    fn gauges<'a>(
        &self,
        name: &str,
        help: &str,
        labels: &[&str],
        samples: impl IntoIterator<Item = (Vec<&'a str>, f64)>,
    ) {
        self.add(GaugeVec::new(Opts::new(name, help), labels).inspect(|g| {
            for (values, v) in samples {
                g.with_label_values(&values).set(v);
            }
        }));
    }

    /// A labelled counter; nothing at all without samples.
    fn counters<'a>(
        &self,
        name: &str,
        help: &str,
        labels: &[&str],
        samples: impl IntoIterator<Item = (Vec<&'a str>, u64)>,
    ) {
        self.add(
            IntCounterVec::new(Opts::new(name, help), labels).inspect(|c| {
                for (values, v) in samples {
                    c.with_label_values(&values).inc_by(v);
                }
            }),
        );
    }
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

/// The metric-name suffix of a knob's unit and the factor to its base unit.
pub fn knob_unit(k: Knob) -> (&'static str, f64) {
    match k {
        Knob::PurgeThreads => ("threads", 1.0),
        Knob::PurgeBatchSize => ("pages", 1.0),
        Knob::MaxPurgeLag => ("undo_logs", 1.0),
        Knob::MaxPurgeLagDelay => ("seconds", 1e-6),
        Knob::IoCapacity | Knob::IoCapacityMax => ("iops", 1.0),
        Knob::LogFileSize | Knob::RedoLogCapacity | Knob::MaxUndoLogSize => ("bytes", 1.0),
        Knob::UndoLogTruncate => ("enabled", 1.0),
        Knob::MaxDirtyPagesPctLwm => ("percent", 1.0),
        Knob::FlushNeighbors => ("mode", 1.0),
        Knob::LruScanDepth => ("pages", 1.0),
    }
}

/// `<prefix>_<unit>{knob}` families, one per unit present in `values`.
fn knob_families(f: &Families, prefix: &str, what: &str, values: &KnobValues) {
    let mut by_unit: BTreeMap<&'static str, Vec<(Vec<&str>, f64)>> = BTreeMap::new();
    for (k, v) in values {
        let (unit, scale) = knob_unit(*k);
        by_unit
            .entry(unit)
            .or_default()
            .push((vec![k.var_name()], *v as f64 * scale));
    }
    for (unit, knobs) in by_unit {
        f.gauges(
            &format!("{prefix}_{unit}"),
            &format!("Knobs measured in {unit}, value {what}."),
            &["knob"],
            knobs,
        );
    }
}

/// Renders the snapshot in the Prometheus text format 0.0.4 (what `/metrics` serves).
pub fn render(s: &Snapshot) -> String {
    let f = Families {
        registry: Registry::new(),
    };
    f.gauges(
        "innopilot_build_info",
        "innopilot's version, as a label; always 1.",
        &["version"],
        [(vec![env!("CARGO_PKG_VERSION")], 1.0)],
    );
    if let Some(server) = &s.server {
        // "MariaDB 10.11.19": flavor and version as separate labels, so a query can
        // select on either (mysqld_exporter's mysql_version_info habit).
        let (flavor, version) = server.split_once(' ').unwrap_or((server, ""));
        let flavor = flavor.to_ascii_lowercase();
        f.gauges(
            "innopilot_server_info",
            "The server innopilot watches: flavor and version as labels; always 1.",
            &["flavor", "version"],
            [(vec![flavor.as_str(), version], 1.0)],
        );
    }
    f.gauge(
        "innopilot_up",
        "Whether the last sample of the server succeeded (1) or not (0).",
        Some(b(s.connected && s.last_sample.is_some())),
    );
    f.gauge(
        "innopilot_connected",
        "Whether innopilot has a working connection to the server.",
        Some(b(s.connected)),
    );
    f.gauge(
        "innopilot_ready",
        "Whether the controller has started and is not stopping (as /readyz).",
        Some(b(s.phase == Phase::Running)),
    );
    f.gauge(
        "innopilot_dry_run",
        "1 when innopilot only decides and logs (run --dry-run), 0 when it acts.",
        Some(b(s.dry_run)),
    );
    f.gauge(
        "innopilot_sampler_interval_seconds",
        "Configured sampling interval.",
        Some(s.interval.as_secs_f64()),
    );
    // Timestamps, not ages: an age is stale the moment it is scraped, a timestamp
    // lets `time() - x` compute the age at query time (Prometheus' naming guide).
    f.gauge(
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
        f.counter(name, help, Some(v));
    }

    // ---- signals ------------------------------------------------------------------
    if let Some(sig) = &s.signals {
        let x = &sig.sample;
        let trx = x.oldest_trx.as_ref();
        f.gauge(
            "innopilot_innodb_history_list_length",
            "Undo logs not yet purged, one per committed transaction that changed rows (InnoDB history list length).",
            u(sig.history_len),
        );
        f.gauge(
            "innopilot_innodb_history_rate_per_second",
            "History derivative, undo logs per second (least squares over sampler.window).",
            sig.history_rate,
        );
        f.gauge(
            "innopilot_innodb_history_unfreed",
            "Of the history, undo logs purge has handled and the server not yet freed: not debt (estimate; needs innodb_monitor_enable = module_purge).",
            u(sig.unfreed_history),
        );
        f.gauge(
            "innopilot_purge_pace_ratio",
            "Records purge handled per row users updated or deleted over the window (1 = it keeps up; needs the purge counters).",
            sig.purge_pace,
        );
        f.gauge(
            "innopilot_redo_fill_ratio",
            "Checkpoint age over the sync-flush point (1 = users wait for flushing).",
            sig.redo_fill,
        );
        f.gauge(
            "innopilot_redo_fill_trend_ratio_per_second",
            "Slope of the redo fill ratio over the window.",
            sig.redo_fill_trend,
        );
        f.gauge(
            "innopilot_redo_checkpoint_age_bytes",
            "Current LSN minus last checkpoint LSN.",
            u(x.redo.checkpoint_age),
        );
        f.gauge(
            "innopilot_redo_async_flush_point_bytes",
            "Checkpoint age where this server starts flushing ahead asynchronously.",
            u(x.redo.async_point),
        );
        f.gauge(
            "innopilot_redo_sync_flush_point_bytes",
            "Checkpoint age where this server flushes synchronously (users wait).",
            u(x.redo.sync_point),
        );
        f.gauge(
            "innopilot_redo_capacity_bytes",
            "Configured redo log size.",
            u(x.redo.capacity),
        );
        f.counter(
            "innopilot_redo_written_bytes_total",
            "Redo written since the server started (the LSN), bytes; rate() gives the write rate.",
            x.redo.lsn,
        );
        f.gauge(
            "innopilot_buffer_pool_dirty_pages",
            "Modified pages in the buffer pool.",
            u(x.dirty_pages),
        );
        f.gauge(
            "innopilot_buffer_pool_pages",
            "Pages in the buffer pool.",
            u(x.total_pages),
        );
        f.gauge(
            "innopilot_buffer_pool_dirty_ratio",
            "Dirty pages over total pages.",
            sig.dirty_fraction,
        );
        // The server's own counters stay counters (as mysqld_exporter exports them):
        // rate() over any window beats a rate fixed to innopilot's interval.
        f.counter(
            "innopilot_innodb_pages_flushed_total",
            "Pages written by flushing since the server started (Innodb_buffer_pool_pages_flushed).",
            x.pages_flushed,
        );
        f.counter(
            "innopilot_innodb_buffer_pool_wait_free_total",
            "Times a user thread waited for a free buffer-pool page (Innodb_buffer_pool_wait_free).",
            x.free_page_waits,
        );
        let rows: Vec<(Vec<&str>, u64)> = [
            ("inserted", x.rows_inserted),
            ("updated", x.rows_updated),
            ("deleted", x.rows_deleted),
        ]
        .into_iter()
        .filter_map(|(op, v)| Some((vec![op], v?)))
        .collect();
        if !rows.is_empty() {
            f.counters(
                "innopilot_innodb_rows_total",
                "InnoDB rows changed since the server started, by operation (Innodb_rows_*).",
                &["operation"],
                rows,
            );
        }
        f.counter(
            "innopilot_commits_total",
            "Commits since the server started (Com_commit).",
            x.commits,
        );
        f.gauge(
            "innopilot_threads_running",
            "Threads_running.",
            u(x.threads_running),
        );
        f.gauge(
            "innopilot_innodb_active_transactions",
            "Active InnoDB transactions.",
            Some(trx.and_then(|t| t.active_count).unwrap_or(0) as f64),
        );
        f.gauge(
            "innopilot_oldest_transaction_start_timestamp_seconds",
            "Unix time the oldest active InnoDB transaction started (absent when there is none).",
            trx.map(|t| (x.unix_ms / 1000).saturating_sub(t.age_s) as f64),
        );
        f.gauge(
            "innopilot_oldest_transaction_holds_read_view",
            "Whether the oldest transaction (probably) holds a read view that blocks purge.",
            Some(b(trx.is_some_and(|t| t.holds_read_view))),
        );
        f.gauge(
            "innopilot_undo_tablespace_bytes",
            "Size of the undo tablespaces (absent when not visible from here).",
            u(x.undo_bytes),
        );
        f.counter(
            "innopilot_undo_truncations_total",
            "Undo tablespace truncations since the server started.",
            x.undo_truncations,
        );
        f.gauge(
            "innopilot_replica",
            "Whether the server is a replica.",
            Some(b(x.is_replica)),
        );
        f.gauge(
            "innopilot_replica_lag_seconds",
            "Seconds behind the source (absent when not a replica or unknown).",
            u(x.replica_lag_s),
        );
        f.gauge(
            "innopilot_server_start_time_seconds",
            "Unix time the server started (from its Uptime).",
            x.uptime_s
                .map(|up| (x.unix_ms / 1000).saturating_sub(up) as f64),
        );
        f.gauge(
            "innopilot_sample_round_trips",
            "Queries the last sample cost.",
            Some(x.round_trips as f64),
        );
    }

    // ---- knobs --------------------------------------------------------------------
    // One family per unit: threads, bytes and seconds never share a metric.
    knob_families(
        &f,
        "innopilot_knob",
        "in effect, as innopilot last read or set it (dry-run: would have set)",
        &s.knobs,
    );
    knob_families(
        &f,
        "innopilot_knob_baseline",
        "found at start: what innopilot restores on exit",
        &s.baseline,
    );
    f.gauges(
        "innopilot_knob_managed",
        "Whether innopilot may change the knob ([knobs.*] manage).",
        &["knob"],
        Knob::ALL
            .into_iter()
            .map(|k| (vec![k.var_name()], b(s.managed.contains(&k)))),
    );
    f.gauges(
        "innopilot_knob_operator_owned",
        "Whether someone else changed the knob during this run, so innopilot leaves it alone.",
        &["knob"],
        Knob::ALL
            .into_iter()
            .map(|k| (vec![k.var_name()], b(s.operator_owned.contains(&k)))),
    );

    // ---- decisions, events, errors --------------------------------------------------
    let t = &s.telemetry;
    // Once a policy has decided about a knob, every outcome of that pair has a series
    // (0 until it happens), so `increase(...{outcome="failed"}[10m])` sees the first
    // failure. Pairs that never decided stay absent: policies × knobs × outcomes of
    // zeros would be noise.
    let mut decisions: BTreeMap<(&str, &str, &str), u64> = BTreeMap::new();
    for (policy, knob, _) in t.decisions.keys() {
        for outcome in DECISION_OUTCOMES {
            decisions.insert((policy, knob.var_name(), outcome), 0);
        }
    }
    for ((policy, knob, outcome), n) in &t.decisions {
        decisions.insert((policy, knob.var_name(), outcome), *n);
    }
    f.counters(
        "innopilot_decisions_total",
        "Decisions written to the audit log, by policy, knob and outcome.",
        &["policy", "knob", "outcome"],
        decisions
            .into_iter()
            .map(|((policy, knob, outcome), n)| (vec![policy, knob, outcome], n)),
    );
    // Every event and error kind, zero or not: a series that appears only with the
    // first occurrence makes `increase()` miss it.
    let events = AUDIT_EVENTS
        .into_iter()
        .map(|e| (e, 0))
        .chain(t.events.iter().map(|(e, n)| (e.as_str(), *n)));
    f.counters(
        "innopilot_audit_events_total",
        "Audit log records, by event.",
        &["event"],
        events
            .collect::<BTreeMap<_, _>>()
            .into_iter()
            .map(|(e, n)| (vec![e], n)),
    );
    let errors = ERROR_KINDS
        .into_iter()
        .map(|k| (k, 0))
        .chain(t.errors.iter().map(|(k, n)| (*k, *n)));
    f.counters(
        "innopilot_errors_total",
        "Errors, by kind: connect, timeout, lost, query, denied, unexpected, not_settable, unsupported, audit, state_file.",
        &["kind"],
        errors.collect::<BTreeMap<_, _>>().into_iter().map(|(k, n)| (vec![k], n)),
    );
    f.counters(
        "innopilot_config_reloads_total",
        "Configuration reloads (SIGHUP), by result.",
        &["result"],
        [
            (vec!["applied"], t.reloads_ok),
            (vec!["rejected"], t.reloads_failed),
        ],
    );
    f.gauge(
        "innopilot_config_last_reload_successful",
        "Whether the last reload was applied (1 before any reload).",
        Some(b(t.last_reload_ok)),
    );
    // The telemetry's histogram itself (its observations are the controller's).
    f.add(Ok(t.sample_duration.clone()));

    let mut text = String::with_capacity(8 * 1024);
    if let Err(e) = TextEncoder::new().encode_utf8(&f.registry.gather(), &mut text) {
        tracing::error!("encoding /metrics: {e}");
    }
    text
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
        t.observe_sample_duration(0.003);
        t.observe_sample_duration(0.2);
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
        let text = render(&s);
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
            "innopilot_decisions_total{knob=\"innodb_purge_threads\",outcome=\"failed\",policy=\"watermark\"} 0",
            "innopilot_knob_operator_owned{knob=\"innodb_io_capacity\"} 1",
            "innopilot_decisions_total{knob=\"innodb_purge_threads\",outcome=\"applied\",policy=\"watermark\"} 2",
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
        let mut s = snapshot();
        s.server = Some("Odd\"Server\\ 1\n2".into());
        let text = render(&s);
        assert!(
            text.contains(r#"innopilot_server_info{flavor="odd\"server\\",version="1\n2"} 1"#),
            "{text}"
        );
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
        let mut t = Telemetry::new();
        for v in [0.0005, 0.002, 0.002, 3.0, f64::NAN, -1.0, f64::INFINITY] {
            t.observe_sample_duration(v);
        }
        let s = Snapshot {
            telemetry: t,
            ..Snapshot::default()
        };
        let text = render(&s);
        for want in [
            "innopilot_sample_duration_seconds_bucket{le=\"0.001\"} 1",
            "innopilot_sample_duration_seconds_bucket{le=\"0.0025\"} 3",
            // 3 s is only in +Inf.
            "innopilot_sample_duration_seconds_bucket{le=\"2.5\"} 3",
            "innopilot_sample_duration_seconds_bucket{le=\"+Inf\"} 4",
            "innopilot_sample_duration_seconds_sum 3.0045",
            "innopilot_sample_duration_seconds_count 4",
        ] {
            assert!(text.contains(want), "missing {want:?} in\n{text}");
        }
    }

    #[test]
    fn every_family_has_help_and_type() {
        let text = render(&snapshot());
        let mut help = BTreeSet::new();
        let mut types = BTreeSet::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# HELP ") {
                help.insert(rest.split(' ').next().unwrap().to_string());
            } else if let Some(rest) = line.strip_prefix("# TYPE ") {
                types.insert(rest.split(' ').next().unwrap().to_string());
            }
        }
        assert_eq!(help, types);
        assert!(types.len() > 30, "{types:?}");
    }
}
