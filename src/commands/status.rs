//! `status`: two samples an interval apart ([`snapshot`]); and the rendering of
//! `status` and `watch`: one flattened list of signals, each with its unit, shown as a
//! human table, a compact line, or JSON.

use std::time::Duration;

use serde::Serialize;
use serde_json::{json, Map, Value};

use crate::control::state::{LockState, StateFile};
use crate::server::{Capabilities, Dynamic, Knob, Server, ServerError};
use crate::signals::{SignalWindow, Signals};

/// What `status` shows: the capabilities, and the signals of two samples `interval`
/// apart (so rates exist) over a window of `window`.
pub async fn snapshot<S: Server>(
    server: &mut S,
    interval: Duration,
    window: Duration,
) -> Result<(Capabilities, Signals), ServerError> {
    let caps = server.probe().await?;
    let mut w = SignalWindow::new(window);
    w.push(server.sample().await?);
    tokio::time::sleep(interval).await;
    let signals = w.push(server.sample().await?);
    Ok((caps, signals))
}

/// One signal for display.
#[derive(Debug, Clone, Serialize)]
pub struct SignalRow {
    pub key: &'static str,
    pub value: Value,
    pub unit: &'static str,
    pub help: &'static str,
}

fn num(v: Option<f64>) -> Value {
    match v {
        Some(x) if x.is_finite() => json!((x * 100.0).round() / 100.0),
        _ => Value::Null,
    }
}

fn int(v: Option<u64>) -> Value {
    v.map(Value::from).unwrap_or(Value::Null)
}

/// Every signal, in a fixed order, with units. `min_view_age` is the configured
/// `policy.purge_rate.min_view_age`, so that `status` splits history into blocked and
/// purgeable exactly as `run` does under the same configuration.
pub fn signal_rows(s: &Signals, min_view_age: Duration) -> Vec<SignalRow> {
    let x = &s.sample;
    // Ratios stay ratios (0–1) here as in the metrics, the audit log and the
    // simulator's CSV: one name and one unit per signal, the unit in the name.
    let ratio = |v: Option<f64>| match v {
        Some(x) if x.is_finite() => json!((x * 10_000.0).round() / 10_000.0),
        _ => Value::Null,
    };
    let trx = x.oldest_trx.as_ref();
    let purge = crate::signals::purge::estimate(s, min_view_age);
    let row = |key, value, unit, help| SignalRow {
        key,
        value,
        unit,
        help,
    };
    vec![
        row(
            "history_len",
            int(s.history_len),
            "undo logs",
            "History list length: undo logs not yet purged, one per committed transaction that changed rows",
        ),
        row(
            "history_rate",
            num(s.history_rate),
            "undo logs/s",
            "history derivative, least-squares over the window",
        ),
        row(
            "history_purgeable",
            int(purge.as_ref().map(|e| e.purgeable)),
            "undo logs",
            "history purge can remove now (estimate from the sampled history, see docs/signals.md)",
        ),
        row(
            "history_blocked",
            int(purge.as_ref().map(|e| e.blocked)),
            "undo logs",
            "history newer than the oldest read view: unpurgeable until it ends",
        ),
        row(
            "history_unfreed",
            int(purge.as_ref().map(|e| e.unfreed).filter(|_| s.unfreed_history.is_some())),
            "undo logs",
            "history purge has handled and the server has not yet freed: not debt (an estimate; needs the INNODB_METRICS purge counters, innodb_monitor_enable = module_purge)",
        ),
        row(
            "purge_pace",
            ratio(s.purge_pace),
            "ratio",
            "records purge handled per row users updated or deleted, over the window (1: it keeps up; needs the purge counters)",
        ),
        row(
            "history_blocked_by",
            purge
                .as_ref()
                .and_then(|e| e.culprit.as_ref())
                .map(|c| json!(format!("{} ({})", c.describe(), c.evidence)))
                .unwrap_or(Value::Null),
            "",
            "the transaction presumed to hold the oldest read view: a hypothesis from the oldest transaction's isolation level; `innopilot diagnose` confirms it before naming a KILL",
        ),
        row(
            "redo_fill_ratio",
            ratio(s.redo_fill),
            "ratio",
            "checkpoint age / the point where InnoDB flushes synchronously (1 = users wait)",
        ),
        row(
            "redo_fill_trend_ratio_per_second",
            ratio(s.redo_fill_trend),
            "ratio/s",
            "slope of redo fill over the window",
        ),
        row(
            "redo_checkpoint_age",
            int(x.redo.checkpoint_age),
            "bytes",
            "LSN − last checkpoint LSN",
        ),
        row(
            "redo_async_point",
            int(x.redo.async_point),
            "bytes",
            "checkpoint age where flushing ahead starts",
        ),
        row(
            "redo_sync_point",
            int(x.redo.sync_point),
            "bytes",
            "checkpoint age where users wait for flushing",
        ),
        row(
            "redo_capacity",
            int(x.redo.capacity),
            "bytes",
            "configured redo size",
        ),
        row(
            "lsn_rate",
            num(s.lsn_rate),
            "bytes/s",
            "redo written per second",
        ),
        row(
            "dirty_pages",
            int(x.dirty_pages),
            "pages",
            "modified pages in the buffer pool",
        ),
        row(
            "total_pages",
            int(x.total_pages),
            "pages",
            "buffer pool size",
        ),
        row(
            "dirty_ratio",
            ratio(s.dirty_fraction),
            "ratio",
            "dirty / total pages",
        ),
        row(
            "pages_flushed_rate",
            num(s.pages_flushed_rate),
            "pages/s",
            "pages written by flushing",
        ),
        row(
            "free_page_wait_rate",
            num(s.free_page_wait_rate),
            "waits/s",
            "user threads that waited for a free page (LRU flushing behind)",
        ),
        row(
            "rows_inserted_rate",
            num(s.rows_inserted_rate),
            "rows/s",
            "InnoDB rows inserted",
        ),
        row(
            "rows_updated_rate",
            num(s.rows_updated_rate),
            "rows/s",
            "InnoDB rows updated",
        ),
        row(
            "rows_deleted_rate",
            num(s.rows_deleted_rate),
            "rows/s",
            "InnoDB rows deleted",
        ),
        row("commit_rate", num(s.commit_rate), "commits/s", "Com_commit"),
        row(
            "rw_trx_rate",
            num(s.rw_trx_rate),
            "trx/s",
            "read-write transactions (Innodb_max_trx_id / 2)",
        ),
        row(
            "threads_running",
            int(x.threads_running),
            "threads",
            "Threads_running",
        ),
        row(
            "active_trx",
            json!(trx.and_then(|t| t.active_count).unwrap_or(0)),
            "transactions",
            "active InnoDB transactions",
        ),
        row(
            "oldest_trx_age",
            int(trx.map(|t| t.age_s)),
            "s",
            "age of the oldest active transaction",
        ),
        row(
            "oldest_trx_id",
            trx.map(|t| json!(t.trx_id)).unwrap_or(Value::Null),
            "",
            "its InnoDB transaction id",
        ),
        row(
            "oldest_trx_thread",
            int(trx.and_then(|t| t.thread_id)),
            "",
            "its connection id (KILL takes it)",
        ),
        row(
            "oldest_trx_account",
            trx.map(|t| {
                json!(format!(
                    "{}@{}",
                    t.user.as_deref().unwrap_or("?"),
                    t.host.as_deref().unwrap_or("?")
                ))
            })
            .unwrap_or(Value::Null),
            "",
            "its user@host",
        ),
        row(
            "oldest_trx_read_view",
            trx.map(|t| json!(t.holds_read_view)).unwrap_or(Value::Null),
            "",
            "whether it (probably) holds a read view that blocks purge",
        ),
        row(
            "undo_bytes",
            int(x.undo_bytes),
            "bytes",
            "undo tablespace size (null: not visible from here)",
        ),
        row(
            "undo_truncations",
            int(x.undo_truncations),
            "count",
            "undo truncations since start",
        ),
        row(
            "replica_lag",
            int(x.replica_lag_s),
            "s",
            "seconds behind the source (null: not a replica, or unknown)",
        ),
        row("uptime", int(x.uptime_s), "s", "server uptime"),
        row(
            "sample_duration_seconds",
            json!((x.duration_ms * 10.0).round() / 10_000.0),
            "s",
            "time the sample took",
        ),
        row(
            "round_trips",
            json!(x.round_trips),
            "",
            "queries the sample cost",
        ),
    ]
}

fn knob_json(caps: &Capabilities, s: &Signals) -> Value {
    let mut out = Map::new();
    for knob in Knob::ALL {
        let cap = caps.knob(knob);
        out.insert(
            knob.var_name().to_string(),
            json!({
                "value": int(s.sample.knobs.get(&knob).copied()),
                "unit": knob.unit(),
                "exists": cap.is_some_and(|c| c.exists),
                "dynamic": cap.map(|c| c.dynamic),
                "server_min": cap.and_then(|c| c.server_min),
                "server_max": cap.and_then(|c| c.server_max),
                "note": cap.map(|c| c.note.clone()),
            }),
        );
    }
    Value::Object(out)
}

/// What a controller's state file and its lock say about the run that wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunState {
    /// The last run restored its baseline and marked the file clean.
    Finished,
    /// A live run holds the lock (its pid, as it wrote it).
    Running(String),
    /// Stopped, leaving redo resizes back to the baseline to the server, which
    /// finishes them at its next checkpoint.
    HandedOver,
    /// Stopped, keeping a redo log it grew while users wrote: the next start carries
    /// it on; `innopilot restore` or a server restart puts the baseline back.
    Kept,
    /// Ended without restoring (crashed or killed): the next start or
    /// `innopilot restore` puts the baseline back.
    Unrestored,
    /// Unclean, and whether a run holds the lock cannot be told from here (why).
    Unknown(String),
}

impl RunState {
    /// Reads the file's `clean` flag and handover against the lock's state.
    pub fn of(st: &StateFile, lock: &LockState) -> RunState {
        match lock {
            LockState::Held(pid) => RunState::Running(pid.clone()),
            // A clean file with no lock holder: the last run finished.
            _ if st.clean => RunState::Finished,
            LockState::Free if !st.handed_over.is_empty() => RunState::HandedOver,
            LockState::Free if !st.kept.is_empty() => RunState::Kept,
            LockState::Free => RunState::Unrestored,
            LockState::Unknown(why) => RunState::Unknown(why.clone()),
        }
    }

    fn key(&self) -> &'static str {
        match self {
            RunState::Finished => "finished",
            RunState::Running(_) => "running",
            RunState::HandedOver => "handed_over",
            RunState::Kept => "kept",
            RunState::Unrestored => "unrestored",
            RunState::Unknown(_) => "unknown",
        }
    }
}

/// What `status` tells about a controller, from its state file and its lock.
pub fn controller_json(state: Option<&StateFile>, lock: &LockState) -> Value {
    match state {
        None => Value::Null,
        Some(st) => {
            let run = RunState::of(st, lock);
            json!({
                "state": run.key(),
                // true, false, or null when the lock cannot be probed from here.
                "running": match &run {
                    RunState::Running(_) => Some(true),
                    RunState::Unknown(_) => None,
                    _ => Some(false),
                },
                "pid": st.pid,
                "server": st.server,
                "started_unix_ms": st.started_unix_ms,
                "changed_by_innopilot": st.last_set,
                "baseline": st.baseline,
                "operator_owned": st.operator_owned,
                "handed_over": st.handed_over,
                "kept": st.kept,
                "learned": st.learned,
                "lock_unknown": match &run {
                    RunState::Unknown(why) => Some(why.as_str()),
                    _ => None,
                },
            })
        }
    }
}

/// `status --json`.
pub fn status_json(caps: &Capabilities, s: &Signals, min_view_age: Duration) -> Value {
    let signals: Map<String, Value> = signal_rows(s, min_view_age)
        .into_iter()
        .map(|r| (r.key.to_string(), json!({"value": r.value, "unit": r.unit})))
        .collect();
    json!({
        "server": {
            "flavor": caps.identity.flavor,
            "version": caps.identity.version.to_string(),
            "version_string": caps.identity.version_string,
            "account": caps.account,
            "can_set_global": caps.can_set_global,
            "sources": caps.signals,
        },
        "unix_ms": s.sample.unix_ms,
        "signals": signals,
        "knobs": knob_json(caps, s),
        "unparsed": s.sample.unparsed,
    })
}

fn show(key: &str, v: &Value) -> String {
    match v {
        Value::Null if key.starts_with("oldest_trx") || key.ends_with("_by") => "none".into(),
        Value::Null => "unknown".into(),
        Value::String(s) => s.clone(),
        Value::Bool(b) => {
            if *b {
                "yes".into()
            } else {
                "no".into()
            }
        }
        other => other.to_string(),
    }
}

/// The controller section of `status` as text (empty without a state file).
pub fn controller_text(state: Option<&StateFile>, lock: &LockState) -> String {
    let Some(st) = state else {
        return String::new();
    };
    let mut out = String::new();
    let head = match RunState::of(st, lock) {
        RunState::Finished => {
            return format!(
                "\ncontroller   last run (pid {}) finished cleanly\n{}",
                st.pid,
                learned_text(st)
            )
        }
        RunState::Running(pid) => format!("running: pid {pid} on {}", st.server),
        RunState::HandedOver => format!(
            "stopped: the last run (pid {} on {}) left {} on its way back to the baseline \
             (a redo resize the server finishes at its next checkpoint); the next start or \
             `innopilot restore` waits for it and checks the size",
            st.pid,
            st.server,
            Knob::list(&st.handed_over)
        ),
        RunState::Kept => format!(
            "stopped: the last run (pid {} on {}) kept {} as it grew it, because users were \
             writing at exit (a shrink then flushes every dirty page under them); the next \
             start carries it on and shrinks it back at a quiet exit, `innopilot restore` \
             puts the baseline back now, and so does a server restart (its option files)",
            st.pid,
            st.server,
            Knob::list(&st.kept)
        ),
        RunState::Unrestored => format!(
            "not running: the last run (pid {} on {}) ended without restoring its changes \
             (crashed or killed); the next start or `innopilot restore` puts the baseline back",
            st.pid, st.server
        ),
        RunState::Unknown(why) => format!(
            "running, or ended without restoring: pid {} on {} (whether it runs cannot be \
             told here: {why}; run `innopilot status` as the service's user, or check the \
             pid); a run that ended is cleaned up by the next start or `innopilot restore`",
            st.pid, st.server
        ),
    };
    out.push_str(&format!("\ncontroller   {head}\n"));
    for (k, v) in &st.last_set {
        out.push_str(&format!(
            "  changed    {k} = {v} (baseline {})\n",
            st.baseline
                .get(k)
                .map(|b| b.to_string())
                .unwrap_or_else(|| "?".into())
        ));
    }
    for (k, v) in &st.operator_owned {
        out.push_str(&format!(
            "  operator   {k} = {v}: changed by someone else; innopilot leaves it alone (`innopilot release {k}` hands it back)\n"
        ));
    }
    out.push_str(&learned_text(st));
    out
}

/// The state file's `learned` as a line of `status` (empty when nothing was measured).
fn learned_text(st: &StateFile) -> String {
    let Some(r) = &st.learned else {
        return String::new();
    };
    let Some(limit) = r.learned.device_limit_pages_s else {
        return String::new();
    };
    let when = std::time::UNIX_EPOCH + Duration::from_millis(r.unix_ms);
    format!(
        "  learned    the device flushes about {limit:.0} pages/s when it is the limit \
         (last measured {}; the next start on this server begins from it)\n",
        humantime::format_rfc3339_seconds(when)
    )
}

/// `status` as a human table.
pub fn status_text(caps: &Capabilities, s: &Signals, min_view_age: Duration) -> String {
    let mut out = String::new();
    let id = &caps.identity;
    out.push_str(&format!(
        "server   {} {} ({}) as {}; SET GLOBAL {}\n\n",
        id.flavor,
        id.version,
        id.version_string,
        caps.account,
        if caps.can_set_global {
            "allowed"
        } else {
            "not allowed (dry-run only)"
        }
    ));
    out.push_str(&format!(
        "{:<32} {:>16}  {:<12} {}\n",
        "SIGNAL", "VALUE", "UNIT", "MEANING"
    ));
    for r in signal_rows(s, min_view_age) {
        out.push_str(&format!(
            "{:<32} {:>16}  {:<12} {}\n",
            r.key,
            show(r.key, &r.value),
            r.unit,
            r.help
        ));
    }
    out.push_str(&format!(
        "\n{:<28} {:>14}  {:<16} {:<10} {}\n",
        "KNOB", "VALUE", "UNIT", "DYNAMIC", "WHY"
    ));
    for knob in Knob::ALL {
        let cap = caps.knob(knob);
        let dynamic = match cap {
            Some(c) if !c.exists => "absent",
            Some(c) => match c.dynamic {
                Dynamic::Yes => "yes",
                Dynamic::No => "no",
                Dynamic::Unverified => "unverified",
            },
            None => "absent",
        };
        out.push_str(&format!(
            "{:<28} {:>14}  {:<16} {:<10} {}\n",
            knob.var_name(),
            s.sample
                .knobs
                .get(&knob)
                .map(|v| v.to_string())
                .unwrap_or_else(|| "-".into()),
            knob.unit(),
            dynamic,
            cap.map(|c| c.note.as_str()).unwrap_or(""),
        ));
    }
    if !s.sample.unparsed.is_empty() {
        out.push_str(&format!(
            "\nvalues not understood: {}\n",
            s.sample.unparsed.join("; ")
        ));
    }
    out
}

/// The column header for `watch`.
pub fn watch_header() -> String {
    format!(
        "{:<8} {:>10} {:>11} {:>7} {:>8} {:>11} {:>9} {:>9} {:>7} {:>7} {:>6}",
        "time",
        "history",
        "hist/s",
        "redo",
        "redo/s",
        "lsn B/s",
        "dml/s",
        "flush/s",
        "dirty",
        "oldest",
        "lag"
    )
}

/// One `watch` line.
pub fn watch_line(s: &Signals) -> String {
    let f = |v: Option<f64>, scale: f64, prec: usize| {
        v.map(|x| format!("{:.*}", prec, x * scale))
            .unwrap_or_else(|| "-".into())
    };
    let secs = (s.sample.unix_ms / 1000) % 86_400;
    let mark = if s.window_reset { " (new window)" } else { "" };
    format!(
        "{:02}:{:02}:{:02} {:>10} {:>11} {:>7} {:>8} {:>11} {:>9} {:>9} {:>7} {:>7} {:>6}{}",
        secs / 3600,
        (secs / 60) % 60,
        secs % 60,
        s.history_len
            .map(|h| h.to_string())
            .unwrap_or_else(|| "-".into()),
        f(s.history_rate, 1.0, 0),
        f(s.redo_fill, 1.0, 3),
        f(s.redo_fill_trend, 1.0, 4),
        f(s.lsn_rate, 1.0, 0),
        f(s.dml_rate, 1.0, 0),
        f(s.pages_flushed_rate, 1.0, 0),
        f(s.dirty_fraction, 1.0, 3),
        s.sample
            .oldest_trx
            .as_ref()
            .map(|t| format!("{}s", t.age_s))
            .unwrap_or_else(|| "-".into()),
        s.sample
            .replica_lag_s
            .map(|l| format!("{l}s"))
            .unwrap_or_else(|| "-".into()),
        mark
    )
}

/// One `watch --json` line.
pub fn watch_json(s: &Signals, min_view_age: Duration) -> Value {
    let signals: Map<String, Value> = signal_rows(s, min_view_age)
        .into_iter()
        .map(|r| (r.key.to_string(), r.value))
        .collect();
    let knobs: Map<String, Value> = s
        .sample
        .knobs
        .iter()
        .map(|(k, v)| (k.var_name().to_string(), json!(v)))
        .collect();
    json!({
        "unix_ms": s.sample.unix_ms,
        "window_reset": s.window_reset,
        "signals": signals,
        "knobs": knobs,
    })
}

/// Units of the `watch --json` signal keys (printed by `--help`-level docs).
pub fn signal_units() -> Vec<(&'static str, &'static str)> {
    signal_rows(
        &Signals::default(),
        crate::config::PurgeRateConfig::default().min_view_age,
    )
    .into_iter()
    .map(|r| (r.key, r.unit))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::KnobValues;

    fn unclean(handed_over: Vec<Knob>) -> StateFile {
        let mut st = StateFile::new(
            4242,
            "root@127.0.0.1:3306".into(),
            0,
            KnobValues::from([(Knob::LogFileSize, 128 << 20)]),
        );
        st.record_set(Knob::LogFileSize, 1152 << 20, 1);
        st.handed_over = handed_over;
        st
    }

    /// An unclean state file is a live run only when the lock says so: after a crash
    /// it is a run to restore, after a handed-over shrink a run that stopped, and when
    /// the lock cannot be probed the status says it cannot tell.
    #[test]
    fn the_lock_tells_running_from_stopped() {
        let held = LockState::Held("4242".into());
        let crashed = unclean(Vec::new());
        let text = controller_text(Some(&crashed), &held);
        assert!(text.contains("controller   running: pid 4242"), "{text}");
        assert_eq!(controller_json(Some(&crashed), &held)["running"], true);

        let text = controller_text(Some(&crashed), &LockState::Free);
        assert!(
            text.contains("not running") && text.contains("crashed"),
            "{text}"
        );
        assert!(
            text.contains("innodb_log_file_size = 1207959552 (baseline 134217728)"),
            "{text}"
        );
        let json = controller_json(Some(&crashed), &LockState::Free);
        assert_eq!(
            (&json["state"], &json["running"]),
            (&"unrestored".into(), &false.into())
        );

        let handed = unclean(vec![Knob::LogFileSize]);
        let text = controller_text(Some(&handed), &LockState::Free);
        assert!(
            text.contains("stopped") && text.contains("left innodb_log_file_size on its way back"),
            "{text}"
        );
        assert!(!text.contains("crashed"), "{text}");
        let json = controller_json(Some(&handed), &LockState::Free);
        assert_eq!(json["state"], "handed_over");
        assert_eq!(
            json["handed_over"],
            serde_json::json!(["innodb_log_file_size"])
        );

        let mut finished = unclean(Vec::new());
        finished.clean = true;
        assert!(!controller_text(Some(&finished), &LockState::Free).contains("learned"));
        finished.learned = Some(crate::control::state::Remembered {
            learned: crate::policy::Learned {
                device_limit_pages_s: Some(495.4),
            },
            unix_ms: 1_796_040_000_000,
        });
        let text = controller_text(Some(&finished), &LockState::Free);
        assert!(
            text.contains("finished cleanly")
                && text.contains("learned    the device flushes about 495 pages/s")
                && text.contains("2026-11-30T"),
            "{text}"
        );
        let json = controller_json(Some(&finished), &LockState::Free);
        assert_eq!(json["learned"]["device_limit_pages_s"], 495.4, "{json}");

        let mut kept = unclean(Vec::new());
        kept.kept = vec![Knob::LogFileSize];
        let text = controller_text(Some(&kept), &LockState::Free);
        assert!(
            text.contains("stopped") && text.contains("kept innodb_log_file_size as it grew it"),
            "{text}"
        );
        assert!(!text.contains("crashed"), "{text}");
        let json = controller_json(Some(&kept), &LockState::Free);
        assert_eq!(json["state"], "kept");
        assert_eq!(json["kept"], serde_json::json!(["innodb_log_file_size"]));

        let unknown = LockState::Unknown("cannot open /x.lock: Permission denied".into());
        let text = controller_text(Some(&crashed), &unknown);
        assert!(
            text.contains("cannot be told here: cannot open /x.lock: Permission denied"),
            "{text}"
        );
        let json = controller_json(Some(&crashed), &unknown);
        assert_eq!(
            (&json["state"], &json["running"]),
            (&"unknown".into(), &serde_json::Value::Null)
        );

        let mut clean = crashed.clone();
        clean.clean = true;
        let text = controller_text(Some(&clean), &LockState::Free);
        assert!(text.contains("finished cleanly"), "{text}");
        assert_eq!(controller_text(None, &LockState::Free), "");
    }
}
