//! `innopilot diagnose`: a one-shot report for an incident. It samples the server a few
//! times (so rates are real), reads the variables that matter, and turns them into
//! findings, each with a severity, an explanation with the numbers behind it, a
//! recommendation and the exact SQL to apply, built from typed values only.
//!
//! Areas: flushing (checkpoint age against this flavor's async and sync flush points,
//! minutes of redo headroom at the current LSN rate, redo size), purge (history, its
//! rate, whether a read view blocks it and which transaction holds it, with its
//! statement), undo (sizes, truncation), the buffer-pool dump/load settings (seed 004,
//! and seed 000's cold restart), and replication lag. `SHOW ENGINE INNODB STATUS` is
//! read once, under `server.query_timeout`, when a transaction is open (to confirm
//! which one holds the oldest read view: [`read_view_holders`]; the oldest transaction
//! need not hold one) or with `--engine-status` (seed 004 saw it hang for minutes).
//!
//! Gathering ([`gather`]) talks to the server, through the [`Server`] trait only, so it
//! runs on the simulator and on a recording too (what a recording cannot tell is left
//! out); everything else is a pure function of [`Facts`], so the rules are unit-tested
//! on fixtures.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;
use serde_json::{json, Value};

use crate::commands::advice;
use crate::server::{Capabilities, Flavor, Globals, Knob, Server, ServerError, SessionInfo};
use crate::signals::purge::{split_by_trx_numbers, Basis, PurgeEstimate, TrxNumbers};
use crate::signals::{SignalWindow, Signals};

/// Variables `diagnose` reads besides the sample (constant names only).
pub use super::finding::{Finding, Severity};

pub const VARIABLES: &[&str] = &[
    "innodb_io_capacity",
    "innodb_io_capacity_max",
    "innodb_log_file_size",
    "innodb_redo_log_capacity",
    "innodb_adaptive_flushing",
    "innodb_adaptive_flushing_lwm",
    "innodb_max_dirty_pages_pct",
    "innodb_max_dirty_pages_pct_lwm",
    "innodb_flush_neighbors",
    "innodb_flush_log_at_trx_commit",
    "innodb_purge_threads",
    "innodb_purge_batch_size",
    "innodb_max_purge_lag",
    "innodb_max_purge_lag_delay",
    "innodb_undo_tablespaces",
    "innodb_undo_log_truncate",
    "innodb_max_undo_log_size",
    "innodb_buffer_pool_dump_at_shutdown",
    "innodb_buffer_pool_load_at_startup",
    "innodb_buffer_pool_dump_pct",
    "innodb_buffer_pool_size",
    "innodb_fast_shutdown",
    "innodb_log_group_home_dir",
    "datadir",
    "slave_parallel_threads",
    "replica_parallel_workers",
    "slave_parallel_workers",
];

/// Status values `diagnose` reads besides the sample.
pub const STATUS: &[&str] = &[
    "Innodb_buffer_pool_dump_status",
    "Innodb_buffer_pool_load_status",
];

/// Longest statement text shown for the transaction that blocks purge.
pub const STATEMENT_CHARS: u32 = 300;

/// What the SHOW ENGINE INNODB STATUS read gave.
#[derive(Debug, Clone, PartialEq)]
pub enum EngineStatus {
    /// The lines about history and purge.
    Lines(Vec<String>),
    Failed(String),
}

/// One transaction of SHOW ENGINE INNODB STATUS that holds a read view.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ViewHolder {
    /// The InnoDB transaction id; `None` for a read-only transaction (printed by its
    /// address, it has no id yet).
    pub trx_id: Option<u64>,
    /// The connection (`MariaDB thread id` / `MySQL thread id`); `None` for a
    /// background transaction.
    pub thread_id: Option<u64>,
    /// `ACTIVE N sec`.
    pub age_s: Option<u64>,
    /// The `will not see trx with id >= X` limit: the view was created when X was the
    /// next number to hand out, and purge may not remove the undo of commits from X
    /// on while it lives. The oldest view has the lowest.
    pub not_see_from: u64,
    /// The `sees < Y` limit of its read view: history of transactions from `Y` on
    /// cannot be purged while the view lives.
    pub sees_below: u64,
}

/// Every transaction with a read view in the TRANSACTIONS section of SHOW ENGINE
/// INNODB STATUS, in the order printed. Blocks look like (MariaDB 10.11):
///
/// ```text
/// ---TRANSACTION (0x7f8944973680), ACTIVE 2 sec
/// 0 lock struct(s), heap size 1128, 0 row lock(s)
/// MariaDB thread id 5, OS thread handle 140227529299648, query id 14 localhost root User sleep
/// SELECT SLEEP(30)
/// Trx read view will not see trx with id >= 23, sees < 23
/// ```
///
/// (MySQL prints `---TRANSACTION 421..., ACTIVE` and `MySQL thread id`.) Only lines
/// that match exactly, with integers, are taken, so a statement's text cannot pose as
/// a read view unless it spells one out; the thread id is the first integer after
/// `thread id`.
pub fn read_view_holders(text: &str) -> Vec<ViewHolder> {
    struct Block {
        trx_id: Option<u64>,
        thread_id: Option<u64>,
        age_s: Option<u64>,
        limits: Option<(u64, u64)>,
    }
    fn flush(b: Option<Block>, out: &mut Vec<ViewHolder>) {
        if let Some(Block {
            trx_id,
            thread_id,
            age_s,
            limits: Some((not_see_from, sees_below)),
        }) = b
        {
            out.push(ViewHolder {
                trx_id,
                thread_id,
                age_s,
                not_see_from,
                sees_below,
            });
        }
    }
    fn leading_u64(s: &str) -> Option<u64> {
        let d: String = s.chars().take_while(char::is_ascii_digit).collect();
        d.parse().ok()
    }
    let mut out = Vec::new();
    let mut cur: Option<Block> = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("---TRANSACTION ") {
            flush(cur.take(), &mut out);
            let age_s = rest
                .split_once(", ACTIVE ")
                .and_then(|(_, a)| leading_u64(a));
            cur = Some(Block {
                trx_id: leading_u64(rest).filter(|id| *id > 0),
                thread_id: None,
                age_s,
                limits: None,
            });
            continue;
        }
        // A line of dashes closes the section (and with it the last block).
        if line.len() >= 4 && line.bytes().all(|b| b == b'-') {
            flush(cur.take(), &mut out);
            continue;
        }
        let Some(b) = cur.as_mut() else { continue };
        if b.thread_id.is_none() {
            for p in ["MariaDB thread id ", "MySQL thread id "] {
                if let Some(rest) = line.strip_prefix(p) {
                    b.thread_id = leading_u64(rest);
                }
            }
        }
        if let Some(rest) = line.strip_prefix("Trx read view will not see trx with id >= ") {
            if let Some((lo, hi)) = rest.trim_end().split_once(", sees < ") {
                if let (Ok(lo), Ok(hi)) = (lo.parse::<u64>(), hi.parse::<u64>()) {
                    b.limits = Some((lo, hi));
                }
            }
        }
    }
    flush(cur, &mut out);
    out
}

/// The read view that holds purge back: the oldest, the one with the lowest `will not
/// see` limit (purge's own view is a copy of it: `trx_sys.clone_oldest_view()`), then
/// the lowest `sees <`; ties go to the transaction printed first.
pub fn blocking_view(holders: &[ViewHolder]) -> Option<&ViewHolder> {
    holders
        .iter()
        .min_by_key(|h| (h.not_see_from, h.sees_below))
}

/// Whether the transaction that holds purge back could be confirmed.
#[derive(Debug, Clone, PartialEq)]
pub enum Holder {
    /// Read from the per-transaction read-view lines of SHOW ENGINE INNODB STATUS.
    Confirmed(ViewHolder),
    /// SHOW ENGINE INNODB STATUS answered and no transaction holds a read view.
    NoView,
    /// It could not be read; why.
    Unconfirmed(String),
}

/// Everything the rules look at.
#[derive(Debug, Clone)]
pub struct Facts {
    pub caps: Capabilities,
    pub signals: Signals,
    /// Lower-cased variable name → value.
    pub vars: BTreeMap<String, String>,
    /// Lower-cased status name → value.
    pub status: BTreeMap<String, String>,
    /// The process-list row of the connection that holds purge back (the confirmed
    /// holder, else the oldest transaction's).
    pub culprit_session: Option<SessionInfo>,
    pub engine_status: Option<EngineStatus>,
    /// Who holds the oldest read view, as far as it could be confirmed; `None` when
    /// no transaction is open that could hold one.
    pub holder: Option<Holder>,
    /// The transaction counter and purge's position, read with the holder: with a
    /// confirmed holder they split history exactly where it matters
    /// ([`crate::signals::purge::split_by_trx_numbers`]).
    pub trx_numbers: Option<TrxNumbers>,
    /// `policy.replica.max_lag`, the lag above which a replica counts as lagging.
    pub max_lag: Duration,
    /// `policy.purge_rate.min_view_age`: a read view younger than this does not count
    /// as blocking purge (the same split `run` and `status` make).
    pub min_view_age: Duration,
    /// The whole run's samples: sustained rates, the device's peak flushing.
    pub observed: advice::Observed,
    /// Free space on the redo volume, where it could be checked.
    pub redo_free: advice::FreeDisk,
}

impl Facts {
    /// The read view confirmed from SHOW ENGINE INNODB STATUS, if any.
    fn confirmed_view(&self) -> Option<&ViewHolder> {
        match &self.holder {
            Some(Holder::Confirmed(v)) => Some(v),
            _ => None,
        }
    }
    fn var(&self, name: &str) -> Option<&str> {
        self.vars.get(name).map(String::as_str)
    }
    fn var_u64(&self, name: &str) -> Option<u64> {
        self.var(name)
            .and_then(|v| crate::server::sample::parse_u64(v).ok())
    }
    fn var_on(&self, name: &str) -> Option<bool> {
        self.var_u64(name).map(|v| v != 0)
    }
}

fn mib(bytes: u64) -> String {
    let m = bytes as f64 / (1024.0 * 1024.0);
    if m >= 10.0 {
        format!("{m:.0} MiB")
    } else {
        format!("{m:.1} MiB")
    }
}

/// A byte rate; small rates in KiB/s, so a slow rate never reads "0.0 MiB/s".
fn per_s(bytes_per_s: f64) -> String {
    if bytes_per_s < 0.1 * 1024.0 * 1024.0 {
        format!("{:.0} KiB", bytes_per_s / 1024.0)
    } else {
        mib(bytes_per_s as u64)
    }
}

fn pct(x: f64) -> String {
    format!("{:.0} %", x * 100.0)
}

/// All findings, most severe first (stable within a severity: area order).
pub fn analyze(f: &Facts) -> Vec<Finding> {
    let mut out = Vec::new();
    out.extend(flushing(f));
    out.extend(purge(f));
    out.extend(static_settings(f));
    out.extend(undo(f));
    out.extend(buffer_pool(f));
    out.extend(free_reserve(f));
    out.extend(replica(f));
    out.extend(engine_status(f));
    out.sort_by_key(|f| std::cmp::Reverse(f.severity));
    out
}

fn flushing(f: &Facts) -> Vec<Finding> {
    let mut out = Vec::new();
    let r = &f.signals.sample.redo;
    let rate = f.signals.lsn_rate.filter(|r| r.is_finite());
    let (Some(age), Some(sync), Some(async_point)) = (
        r.checkpoint_age,
        r.sync_point.filter(|s| *s > 0),
        r.async_point_or_share(),
    ) else {
        out.push(
            Finding::new("flushing", "redo_unknown", Severity::Info, "Redo fill is not visible on this server".into())
                .why("The checkpoint age or the sync-flush point could not be read (see `innopilot status`)."),
        );
        return out;
    };
    let fill = age as f64 / sync as f64;
    // Below 1 KiB/s the rate is background noise: a projection from it would be a
    // number without meaning.
    let rate = rate.filter(|r| *r >= 1024.0);
    let headroom_min = rate
        .filter(|r| *r > 0.0)
        .map(|r| sync.saturating_sub(age) as f64 / r / 60.0);
    let headroom = match (headroom_min, rate) {
        // At or past the sync point there is no time left to project.
        (Some(m), Some(_)) if m < 0.05 => {
            "; the sync point is reached: users wait for flushing now".into()
        }
        (Some(m), Some(r)) => format!(
            "; at the current redo rate ({}/s) the sync point is {:.1} minutes away",
            per_s(r),
            m
        ),
        _ => "; no redo is being written right now".into(),
    };
    let io_max = f.var_u64("innodb_io_capacity_max");
    let io_txt = io_max
        .map(|v| format!(" (innodb_io_capacity_max is {v})"))
        .unwrap_or_default();
    let numbers = format!(
        "Checkpoint age {} is {} of the sync-flush point {} (async flushing starts at {}, {}){headroom}.",
        mib(age),
        pct(fill),
        mib(sync),
        mib(async_point),
        pct(async_point as f64 / sync as f64)
    );
    // From what the device has shown (peak pages flushed per second), never a guess.
    let want_io = advice::io_capacity_max_from_device(io_max, &f.observed);
    let io_sql = |w: u64| advice::io_capacity_max_sql(f.var_u64("innodb_io_capacity"), w);
    if age >= sync {
        let mut x = Finding::new(
            "flushing",
            "sync_flush",
            Severity::Critical,
            "InnoDB is flushing synchronously: user threads wait for page flushes".into(),
        )
        .why(format!("{numbers} At this point writes stall until pages are flushed and the checkpoint advances."))
        .todo(format!("Size the redo log for the peak write rate (see redo_size): at the sync point only headroom helps. Flushing is paced by innodb_io_capacity_max{io_txt}, the page cleaner's batch here: where the device has shown more, raise it to that, no further (a batch the device cannot write in about a second holds the checkpoint still)."));
        if let Some(w) = want_io {
            x.sql = io_sql(w);
        }
        out.push(x);
    } else if age >= async_point || headroom_min.is_some_and(|m| m < 1.0) {
        let mut x = Finding::new(
            "flushing",
            "async_flush",
            Severity::Warning,
            "Redo is close to the sync-flush point".into(),
        )
        .why(format!("{numbers} Past the async point InnoDB flushes ahead hard; a little more write load makes users wait."))
        .todo(format!("Give flushing more I/O before the cliff: raise innodb_io_capacity_max{io_txt} to what the device has shown, no further (past the async point it is the batch size); innodb_io_capacity cancels out of the page cleaner's redo term."));
        if let Some(w) = want_io {
            x.sql = io_sql(w);
        }
        out.push(x);
    } else {
        out.push(
            Finding::new(
                "flushing",
                "redo_fill",
                Severity::Ok,
                format!("Redo fill {}", pct(fill)),
            )
            .why(numbers),
        );
    }

    // Redo size against the write rate, from the rate sustained over the whole run
    // and within the bounds of advice::redo_size.
    if let (Some(r), Some(cap)) = (rate.filter(|r| *r > 0.0), r.capacity.filter(|c| *c > 0)) {
        let fill_minutes = sync as f64 / r / 60.0;
        if fill_minutes < 15.0 {
            let adv = advice::redo_size(
                cap,
                sync as f64 / cap as f64,
                &f.observed,
                f.var_u64("innodb_buffer_pool_size"),
                &f.redo_free,
            );
            let knob = f.caps.redo_size_knob();
            let dynamic = f.caps.settable(knob);
            let mut x = Finding::new(
                "flushing",
                "redo_size",
                if fill_minutes < 1.0 { Severity::Warning } else { Severity::Info },
                format!("The redo log holds {fill_minutes:.1} minutes of writes at the current rate"),
            )
            .why(format!(
                "{knob} is {}; the flushable part ({}) fills in {fill_minutes:.1} minutes at {}/s. Redo space exists to absorb peaks: with less than a few minutes of headroom, flushing cannot be smooth. {}",
                mib(cap),
                mib(sync),
                per_s(r),
                adv.text
            ));
            x.details = json!({
                "advised_bytes": adv.bytes,
                "buffer_pool_multiple": advice::BUFFER_POOL_MULTIPLE,
                "sustained_seconds": f.observed.seconds,
                "sustained_lsn_rate": f.observed.lsn_rate,
            });
            if let Some(want) = adv.bytes {
                x = x.todo(if dynamic {
                    format!("Grow the redo log to {}; the resize runs online (the statement waits until it is done).", mib(want))
                } else {
                    format!("Set {knob} = {want} ({}) in the server configuration and restart: it is not dynamic on this server.", mib(want))
                });
                if dynamic {
                    x = x.sql(format!("SET GLOBAL {knob} = {want};"));
                }
            }
            out.push(x);
        }
    }
    out
}

/// The static-settings findings (advice.rs), with this server's flavor and settings.
fn static_settings(f: &Facts) -> Vec<Finding> {
    let set = advice::Settings {
        flavor: Some(f.caps.identity.flavor),
        max_purge_lag: f.var_u64("innodb_max_purge_lag"),
        max_purge_lag_delay: f.var_u64("innodb_max_purge_lag_delay"),
        io_capacity: f.var_u64("innodb_io_capacity"),
        io_capacity_max: f.var_u64("innodb_io_capacity_max"),
        purge_threads: f.var_u64("innodb_purge_threads"),
        purge_batch_size: f.var_u64("innodb_purge_batch_size"),
        purge_threads_dynamic: f.caps.settable(Knob::PurgeThreads),
        max_dirty_pages_pct_lwm: f.var_u64("innodb_max_dirty_pages_pct_lwm"),
        flush_neighbors: f.var_u64("innodb_flush_neighbors"),
    };
    let blocked = f
        .signals
        .sample
        .oldest_trx
        .as_ref()
        .is_some_and(|t| t.holds_read_view && t.age_s >= f.min_view_age.as_secs());
    advice::static_findings(&set, &f.signals, &f.observed, blocked)
}

fn purge(f: &Facts) -> Vec<Finding> {
    let mut out = Vec::new();
    let s = &f.signals;
    let Some(h) = s.history_len else {
        out.push(Finding::new(
            "purge",
            "history_unknown",
            Severity::Info,
            "History length is not visible on this server".into(),
        ));
        return out;
    };
    let rate = s.history_rate.filter(|r| r.is_finite());
    let rate_txt = rate
        .map(|r| format!("{r:+.0} undo logs/s"))
        .unwrap_or_else(|| "unknown rate".into());
    let trx = s.sample.oldest_trx.as_ref();
    let est = purge_split(f, h);
    let culprit = culprit(f);
    // Where the split exists it decides: a view that holds back nothing (0 undo logs
    // blocked) is not reported as blocking purge, whatever the history's trend. With
    // nothing in the history there is nothing to purge, so nothing is blocked.
    let blocking = culprit.as_ref().filter(|c| {
        h > 0
            && c.age_s >= f.min_view_age.as_secs()
            && match est.as_ref() {
                Some(e) => {
                    e.blocked > 0 && (e.blocked >= e.purgeable || rate.is_none_or(|r| r >= 0.0))
                }
                None => rate.is_none_or(|r| r >= 0.0),
            }
    });
    let split = est
        .as_ref()
        .filter(|e| e.basis != Basis::NoBlockingView)
        .map(|e| split_text(f, e))
        .unwrap_or_default();
    if let Some(c) = blocking {
        let session = f.culprit_session.as_ref();
        let statement = session.and_then(|s| s.info.clone());
        // The account and isolation come from the oldest transaction's row: only
        // shown when that is the holder.
        let oldest = trx.filter(|_| c.is_oldest);
        let user = oldest
            .and_then(|t| t.user.clone())
            .or_else(|| session.and_then(|s| s.user.clone()));
        let host = oldest
            .and_then(|t| t.host.clone())
            .or_else(|| session.and_then(|s| s.host.clone()));
        let account = match (&user, &host) {
            (None, None) => String::new(),
            (u, h) => format!(
                ", {}@{}",
                u.as_deref().unwrap_or("?"),
                h.as_deref().unwrap_or("?")
            ),
        };
        let stmt_txt = match &statement {
            Some(q) if q.trim_end().ends_with(['.', ';']) => format!("It is running: {q}"),
            Some(q) => format!("It is running: {q}."),
            None => "It runs no statement now: idle in an open transaction (the application began it and did not commit; `performance_schema` would show its last statement).".into(),
        };
        let severity = if h > 1_000_000 || c.age_s > 3600 {
            Severity::Critical
        } else {
            Severity::Warning
        };
        let thread = c.thread_id;
        let name = crate::commands::drain::trx_name(c.trx_id.as_deref().unwrap_or(""));
        let conn = thread.map(|i| i.to_string()).unwrap_or_else(|| "?".into());
        let command = session
            .and_then(|s| s.command.clone())
            .or_else(|| oldest.and_then(|t| t.command.clone()));
        let view_txt = match (&c.confirmed, oldest.and_then(|t| t.isolation.as_deref())) {
            (Ok(sees), Some(iso)) => {
                format!("Its read view ({iso} isolation, sees transactions < {sees})")
            }
            (Ok(sees), None) => format!("Its read view (sees transactions < {sees})"),
            (Err(_), iso) => format!(
                "Its isolation level ({}) suggests a read view, which",
                iso.unwrap_or("?")
            ),
        };
        let title = match &c.confirmed {
            Ok(_) => format!("Purge is blocked by {name} (connection {conn}{account}), open for {} s", c.age_s),
            Err(_) => format!("Purge may be blocked by {name} (connection {conn}{account}), open for {} s: unconfirmed", c.age_s),
        };
        let unconfirmed = match &c.confirmed {
            Ok(_) => String::new(),
            Err(why) => format!(" Unconfirmed: {why}. An old transaction does not always hold a read view (an idle write-only one does not), so no KILL is given; run diagnose again where SHOW ENGINE INNODB STATUS can be read (it needs the PROCESS privilege)."),
        };
        let mut x = Finding::new("purge", "purge_blocked", severity, title)
        .why(format!(
            "{view_txt} keeps every row version newer than its snapshot, so purge cannot remove the history written since it began: {h} undo logs in all, {rate_txt}.{split} {stmt_txt} When it ends, purge surges and competes with users for CPU, redo and I/O.{unconfirmed}{}",
            command.map(|c| format!(" Command: {c}.")).unwrap_or_default(),
        ))
        .todo("Find out why it is open (the statement, the application behind the account) and end it; long reads belong on a replica or in READ COMMITTED. If it is safe to end it now, kill the connection.".to_string());
        // Only a confirmed holder gets a KILL: killing the wrong connection rolls its
        // work back and purge still does not move.
        if let (Some(id), Ok(_)) = (thread, &c.confirmed) {
            x = x.sql(format!("KILL {id};"));
        }
        x.details = json!({
            "trx_id": c.trx_id,
            "thread_id": thread,
            "confirmed": c.confirmed.is_ok(),
            "unconfirmed_reason": c.confirmed.as_ref().err(),
            "sees_below": c.confirmed.as_ref().ok(),
            "user": user,
            "host": host,
            "age_s": c.age_s,
            "isolation": oldest.and_then(|t| t.isolation.clone()),
            "command": session.and_then(|s| s.command.clone()).or_else(|| oldest.and_then(|t| t.command.clone())),
            "state": session.and_then(|s| s.state.clone()),
            "statement": statement,
            "history_len": h,
            "history_rate": rate,
            "purgeable": est.as_ref().map(|e| e.purgeable),
            "blocked": est.as_ref().map(|e| e.blocked),
            "split_basis": est.as_ref().map(|e| e.basis),
            "trx_numbers": f.trx_numbers,
            "view_not_see_from": f.confirmed_view().map(|v| v.not_see_from),
        });
        out.push(x);
        return out;
    }
    if rate.is_some_and(|r| r > 0.0) && h > 10_000 {
        let threads = f.var_u64("innodb_purge_threads");
        let mut x = Finding::new(
            "purge",
            "purge_lagging",
            if h > 1_000_000 { Severity::Critical } else if h > 100_000 { Severity::Warning } else { Severity::Info },
            format!("History grows ({rate_txt}) though no read view blocks purge"),
        )
        .why(format!(
            "History {h} undo logs, {rate_txt}, with {} purge threads: purge does not keep up with the write load.",
            threads.map(|t| t.to_string()).unwrap_or_else(|| "?".into())
        ));
        if let Some(t) = threads.filter(|_| f.caps.settable(Knob::PurgeThreads)) {
            let want = (t * 2).clamp(2, 32);
            if want > t {
                x = x
                    .todo(format!("More purge threads while the redo has room (innopilot's watermark policy takes them back when redo fills): {t} → {want}."))
                    .sql(format!("SET GLOBAL innodb_purge_threads = {want};"));
            }
        } else {
            x = x.todo("Purge threads are not dynamic here: raise innodb_purge_threads in the configuration (restart), or reduce the write rate.");
        }
        out.push(x);
        return out;
    }
    let mut x = Finding::new(
        "purge",
        "purge_ok",
        Severity::Ok,
        format!("History {h} undo logs, {rate_txt}"),
    );
    if let Some(c) = culprit {
        let conn = c
            .thread_id
            .map(|i| i.to_string())
            .unwrap_or_else(|| "?".into());
        let name = crate::commands::drain::trx_name(c.trx_id.as_deref().unwrap_or(""));
        x.explanation = if h == 0 {
            format!("The history is empty: nothing to purge, so {name} (connection {conn}, {} s) blocks nothing.", c.age_s)
        } else {
            format!(
                "The oldest read view ({name}, connection {conn}, {} s{}) holds back little or nothing.",
                c.age_s,
                if c.confirmed.is_ok() { "" } else { ", unconfirmed" }
            )
        };
    }
    out.push(x);
    out
}

/// History split into purgeable and blocked, the best way the facts allow: by the
/// server's transaction numbers when the holder is confirmed and they were read; all
/// purgeable when SHOW ENGINE INNODB STATUS showed no read view; otherwise the loop's
/// estimate from the sampled series (which errs toward "blocked"), with the
/// configured minimum view age. `docs/signals.md` gives each one's error bounds.
fn purge_split(f: &Facts, h: u64) -> Option<PurgeEstimate> {
    let whole = |purgeable: u64, basis: Basis| PurgeEstimate {
        history: h,
        purgeable,
        blocked: h - purgeable,
        unfreed: 0,
        culprit: None,
        basis,
    };
    match (&f.holder, f.trx_numbers) {
        (Some(Holder::Confirmed(v)), Some(n)) => {
            let (purgeable, _) = split_by_trx_numbers(h, n, v.not_see_from);
            Some(whole(purgeable, Basis::TrxNumbers))
        }
        (Some(Holder::NoView), _) => Some(whole(h, Basis::NoBlockingView)),
        _ => crate::signals::purge::estimate(&f.signals, f.min_view_age),
    }
}

/// One sentence: the split and where it comes from.
fn split_text(f: &Facts, e: &PurgeEstimate) -> String {
    let numbers = f
        .trx_numbers
        .zip(f.confirmed_view().map(|v| v.not_see_from));
    match (e.basis, numbers) {
        (Basis::TrxNumbers, Some((n, limit))) if limit <= n.purged_below => format!(
            " Purge has reached the view: it has handled every commit numbered below {}, and the view does not see transactions from {limit} on, so all {} undo logs wait for it to end.",
            n.purged_below, e.history
        ),
        (Basis::TrxNumbers, Some((n, limit))) => format!(
            " Of them, {} are purgeable now and {} blocked by the view: of the transaction numbers handed out since purge's position {} (counter now {}), the view does not see those from {limit} on. The split assumes transactions that leave undo are spread evenly over those numbers.",
            e.purgeable, e.blocked, n.purged_below, n.counter
        ),
        _ => format!(
            " Of them, about {} are purgeable now and {} blocked by the view (estimated from the sampled history, erring toward blocked).",
            e.purgeable, e.blocked
        ),
    }
}

/// The transaction taken to hold the oldest read view.
struct Culprit {
    /// `None` for a read-only transaction (no id yet; MariaDB shows "0").
    trx_id: Option<String>,
    thread_id: Option<u64>,
    age_s: u64,
    /// `Ok(sees_below)` when confirmed from SHOW ENGINE INNODB STATUS, else why not.
    confirmed: Result<u64, String>,
    /// Whether it is the oldest transaction of the sample (whose account and
    /// isolation are known).
    is_oldest: bool,
}

/// A transaction id worth printing: MariaDB reports read-only transactions as "0".
fn real_trx_id(id: &str) -> Option<String> {
    (!id.is_empty() && id != "0").then(|| id.to_string())
}

/// The confirmed holder of the oldest read view; failing confirmation, the oldest
/// transaction when its isolation level and command suggest a view (a suspect only).
fn culprit(f: &Facts) -> Option<Culprit> {
    let trx = f.signals.sample.oldest_trx.as_ref();
    let suspect = |why: String| {
        trx.filter(|t| t.holds_read_view).map(|t| Culprit {
            trx_id: real_trx_id(&t.trx_id),
            thread_id: t.thread_id,
            age_s: t.age_s,
            confirmed: Err(why),
            is_oldest: true,
        })
    };
    match &f.holder {
        Some(Holder::Confirmed(v)) => {
            let oldest = trx.filter(|t| t.thread_id.is_some() && t.thread_id == v.thread_id);
            Some(Culprit {
                trx_id: v
                    .trx_id
                    .map(|i| i.to_string())
                    .or_else(|| oldest.and_then(|t| real_trx_id(&t.trx_id))),
                thread_id: v.thread_id,
                age_s: v.age_s.or(oldest.map(|t| t.age_s)).unwrap_or(0),
                confirmed: match v.thread_id {
                    Some(_) => Ok(v.sees_below),
                    None => Err(
                        "the oldest read view belongs to a transaction without a connection".into(),
                    ),
                },
                is_oldest: oldest.is_some(),
            })
        }
        Some(Holder::NoView) => None,
        Some(Holder::Unconfirmed(why)) => suspect(format!(
            "SHOW ENGINE INNODB STATUS could not be read ({why})"
        )),
        None => suspect("SHOW ENGINE INNODB STATUS was not read".into()),
    }
}

fn undo(f: &Facts) -> Vec<Finding> {
    let mut out = Vec::new();
    let spaces = f.var_u64("innodb_undo_tablespaces");
    let truncate = f.var_on("innodb_undo_log_truncate");
    let max = f.var_u64("innodb_max_undo_log_size");
    let size = f.signals.sample.undo_bytes;
    // With no undo tablespaces the size the server reports is the system tablespace's.
    let in_ibdata = spaces == Some(0);
    let size_txt = size
        .map(|b| {
            if in_ibdata {
                format!("ibdata1 (undo and the system tables) takes {}", mib(b))
            } else {
                format!("undo tablespaces take {}", mib(b))
            }
        })
        .unwrap_or_else(|| {
            "undo size is not visible from here (set server.datadir on the database host)".into()
        });
    if f.caps.identity.flavor == Flavor::MariaDb && spaces == Some(0) {
        out.push(
            Finding::new("undo", "undo_in_system_tablespace", Severity::Info, "Undo logs live in the system tablespace".into())
                .why(format!("innodb_undo_tablespaces = 0: undo is in ibdata1, which never shrinks after a history surge; {size_txt}."))
                .todo("For new installations set innodb_undo_tablespaces = 3 (or more) before initialising the datadir, so undo can be truncated."),
        );
        return out;
    }
    match (truncate, max) {
        (Some(false), Some(m)) => {
            let over = size.is_some_and(|s| s > m);
            out.push(
                Finding::new(
                    "undo",
                    "undo_truncate_off",
                    if over { Severity::Warning } else { Severity::Info },
                    "Undo truncation is off".into(),
                )
                .why(format!("innodb_undo_log_truncate = OFF; {size_txt}; tablespaces above innodb_max_undo_log_size ({}) would be truncated once purged if it were on.", mib(m)))
                .todo("Turn truncation on, so undo space grown by a long transaction is given back after purge.")
                .sql("SET GLOBAL innodb_undo_log_truncate = ON;"),
            );
        }
        (Some(true), Some(m)) => out.push(
            Finding::new(
                "undo",
                "undo_truncate_on",
                Severity::Ok,
                "Undo truncation is on".into(),
            )
            .why(format!(
                "{size_txt}; tablespaces above {} are truncated once purged.",
                mib(m)
            )),
        ),
        _ => out.push(
            Finding::new(
                "undo",
                "undo_settings_unknown",
                Severity::Info,
                "Undo settings not readable".into(),
            )
            .why(size_txt),
        ),
    }
    out
}

fn buffer_pool(f: &Facts) -> Vec<Finding> {
    let mut out = Vec::new();
    let dump = f.var_on("innodb_buffer_pool_dump_at_shutdown");
    let load = f.var_on("innodb_buffer_pool_load_at_startup");
    let dump_pct = f.var_u64("innodb_buffer_pool_dump_pct");
    let dump_status = f
        .status
        .get("innodb_buffer_pool_dump_status")
        .cloned()
        .unwrap_or_default();
    let load_status = f
        .status
        .get("innodb_buffer_pool_load_status")
        .cloned()
        .unwrap_or_default();
    let settings = format!(
        "innodb_buffer_pool_dump_at_shutdown = {}, innodb_buffer_pool_load_at_startup = {}, innodb_buffer_pool_dump_pct = {}; dump status: {}; load status: {}",
        onoff(dump),
        onoff(load),
        dump_pct.map(|p| p.to_string()).unwrap_or_else(|| "?".into()),
        if dump_status.is_empty() { "-" } else { &dump_status },
        if load_status.is_empty() { "-" } else { &load_status },
    );
    let busy = |s: &str| {
        let l = s.to_ascii_lowercase();
        (l.contains("dumping") || l.contains("loading") || l.contains("loaded ") && l.contains('/'))
            && !l.contains("completed")
            && !l.contains("finished")
    };
    if f.signals.sample.is_replica && (busy(&dump_status) || busy(&load_status)) {
        out.push(
            Finding::new("buffer_pool", "buffer_pool_dump_on_replica", Severity::Warning, "A buffer pool dump or load is running on a replica".into())
                .why(format!("{settings}. A dump or load reads the whole LRU list and competes with the SQL thread; together with a backup it once made a replica fall 11 hours behind."))
                .todo("Avoid dumps during backups or catch-up; dump at shutdown only."),
        );
    }
    if dump == Some(false) || load == Some(false) {
        let mut x = Finding::new("buffer_pool", "buffer_pool_cold_restart", Severity::Info, "After a restart the buffer pool starts cold".into())
            .why(format!("{settings}. A cold buffer pool makes purge of a large history I/O bound right after a restart, when users come back."))
            .todo("Dump the buffer pool at shutdown and load it at startup (the load setting is read at startup: put innodb_buffer_pool_load_at_startup = ON in the configuration).");
        if dump == Some(false) {
            x = x.sql("SET GLOBAL innodb_buffer_pool_dump_at_shutdown = ON;");
        }
        out.push(x);
    } else if out.is_empty() {
        out.push(
            Finding::new(
                "buffer_pool",
                "buffer_pool_dump_load",
                Severity::Ok,
                "Buffer pool is dumped at shutdown and loaded at startup".into(),
            )
            .why(settings),
        );
    }
    out
}

/// A reserve of free pages at least this share of the pool is worth a finding.
const FREE_RESERVE_SHARE: f64 = 0.02;

/// MariaDB's page cleaner keeps innodb_lru_scan_depth pages free while the pool evicts
/// (`policy::free_pages` has the server code and the measurement); on a small pool
/// that is a large share of it, caching nothing. Only where users do not already wait
/// for free pages: there the page cleaner cannot keep up even with the default.
fn free_reserve(f: &Facts) -> Vec<Finding> {
    let s = &f.signals.sample;
    let (Some(free), Some(total), Some(&depth), Some(reads)) = (
        s.free_pages,
        s.total_pages,
        s.knobs.get(&Knob::LruScanDepth),
        f.signals.read_rate,
    ) else {
        return Vec::new();
    };
    use crate::policy::free_pages::{held_at_depth, FreePagesConfig};
    let cfg = FreePagesConfig::default();
    let (min, lower_below) = (cfg.min_pages, cfg.max_wait_pct / 4.0);
    let waits = f.signals.free_page_wait_rate.unwrap_or(0.0);
    let evicting = reads > 0.0 && held_at_depth(free, depth);
    let share = depth as f64 / total.max(1) as f64;
    if !crate::policy::free_pages::FreePages::applies(&f.caps)
        || !evicting
        || depth <= min
        || share < FREE_RESERVE_SHARE
        || waits > 0.01 * reads
    {
        return Vec::new();
    }
    vec![Finding::new(
        "buffer_pool",
        "free_list_reserve",
        Severity::Info,
        format!(
            "The page cleaner keeps up to {depth} pages free ({} of the buffer pool) while the pool evicts",
            pct(share)
        ),
    )
    .why(format!(
        "{reads:.0} pages read/s, free list {free} pages, innodb_lru_scan_depth {depth}, {waits:.0} free-page waits/s. \
         MariaDB refills the free list to innodb_lru_scan_depth pages once it falls under half of it, and free pages cache nothing. \
         On a 128 MiB pool at 6 000 reads/s, 256 instead of 1 536 gave users 1.14-1.16 x the transactions at the same read rate, \
         and 0.8-1.4 % of the reads waited for a free page (docs/policies.md, \"Free pages\")."
    ))
    .todo(format!(
        "Lower innodb_lru_scan_depth while watching Innodb_buffer_pool_wait_free, or let `innopilot run` do it ([policy.free_pages] halves it down to {min} while at most {lower_below} % of the reads wait)."
    ))
    .sql(format!("SET GLOBAL innodb_lru_scan_depth = {min};"))]
}

fn onoff(v: Option<bool>) -> &'static str {
    match v {
        Some(true) => "ON",
        Some(false) => "OFF",
        None => "?",
    }
}

fn replica(f: &Facts) -> Vec<Finding> {
    let x = &f.signals.sample;
    if f.caps.signals.replica == crate::server::flavor::ReplicaSource::Unreadable {
        let privilege = crate::server::flavor::replica_status_privilege(&f.caps.identity);
        let account = match f.caps.account.split_once('@') {
            Some((u, h)) => format!("'{u}'@'{h}'"),
            None if f.caps.account.is_empty() => "'innopilot'@'localhost'".to_string(),
            None => format!("'{}'", f.caps.account),
        };
        return vec![Finding::new(
            "replica",
            "replica_status_unreadable",
            Severity::Warning,
            "Replica status cannot be read: whether this is a replica, and its lag, are unknown".into(),
        )
        .why(format!("{} was refused for this account. On {} {} it needs {privilege}; without it a lagging replica looks like a primary.", crate::server::flavor::replica_statement(&f.caps.identity), f.caps.identity.flavor, f.caps.identity.version))
        .todo("Grant the privilege, then run diagnose again.".to_string())
        .sql(format!("GRANT {privilege} ON *.* TO {account};"))];
    }
    if !x.is_replica {
        return vec![Finding::new(
            "replica",
            "not_a_replica",
            Severity::Ok,
            "Not a replica".into(),
        )];
    }
    let max = f.max_lag.as_secs();
    match x.replica_lag_s {
        None => vec![Finding::new("replica", "replica_stopped", Severity::Warning, "Replica lag is unknown: replication is not running".into())
            .why("SHOW REPLICA STATUS reports no Seconds_Behind_Master: the SQL thread is stopped or the I/O thread is not connected.")
            .todo("Check Slave_IO_Running / Slave_SQL_Running and Last_Error in SHOW REPLICA STATUS.")],
        Some(l) if l > max => {
            let (var, sql) = match f.caps.identity.flavor {
                Flavor::MariaDb => ("slave_parallel_threads", vec![
                    "STOP SLAVE SQL_THREAD;".to_string(),
                    "SET GLOBAL slave_parallel_threads = 4;".to_string(),
                    "START SLAVE SQL_THREAD;".to_string(),
                ]),
                Flavor::MySql => ("replica_parallel_workers", vec![
                    "STOP REPLICA SQL_THREAD;".to_string(),
                    "SET GLOBAL replica_parallel_workers = 4;".to_string(),
                    "START REPLICA SQL_THREAD;".to_string(),
                ]),
            };
            let parallel = f
                .var_u64(var)
                .or_else(|| f.var_u64("slave_parallel_workers"))
                .unwrap_or(0);
            let mut fd = Finding::new("replica", "replica_lagging", if l > max * 10 { Severity::Critical } else { Severity::Warning }, format!("The replica is {l} s behind (limit {max} s)"))
                .why(format!("On a replica the SQL thread is the foreground: purge, flushing, backups and buffer pool dumps compete with it. {var} = {parallel}."))
                .todo("Enable innopilot's [policy.replica] so purge yields while the replica lags; move backups and dumps off the catch-up window; with parallel replication off, consider a few parallel appliers.");
            if parallel == 0 {
                fd.sql = sql;
            }
            vec![fd]
        }
        Some(l) => vec![Finding::new("replica", "replica_ok", Severity::Ok, format!("Replica lag {l} s (limit {max} s)"))],
    }
}

/// The lines of SHOW ENGINE INNODB STATUS about history and purge.
pub fn engine_status_lines(text: &str) -> Vec<String> {
    text.lines()
        .map(str::trim)
        .filter(|l| {
            l.starts_with("History list length")
                || l.starts_with("Purge done for trx")
                || l.starts_with("Log sequence number")
                || l.starts_with("Last checkpoint at")
                || l.starts_with("Pending flushes")
                || l.contains("read views open inside InnoDB")
        })
        .map(str::to_string)
        .collect()
}

fn engine_status(f: &Facts) -> Vec<Finding> {
    match &f.engine_status {
        None => Vec::new(),
        Some(EngineStatus::Lines(lines)) => vec![Finding::new(
            "engine_status",
            "engine_status",
            Severity::Info,
            "SHOW ENGINE INNODB STATUS (purge and log lines)".into(),
        )
        .why(lines.join("\n"))],
        Some(EngineStatus::Failed(e)) => vec![Finding::new(
            "engine_status",
            "engine_status_failed",
            Severity::Warning,
            "SHOW ENGINE INNODB STATUS did not answer".into(),
        )
        .why(format!("{e}. The statement takes the lock-system latch and walks all transactions; when it hangs, the server itself is struggling."))],
    }
}

/// Reads the facts: `samples` samples `interval` apart (at least 2, so rates exist),
/// the variables and status above, the blocking session, and optionally SHOW ENGINE
/// INNODB STATUS once.
pub async fn gather<S: Server>(
    server: &mut S,
    samples: u32,
    interval: Duration,
    window: Duration,
    engine: bool,
    max_lag: Duration,
    min_view_age: Duration,
) -> Result<Facts, ServerError> {
    let caps = server.probe().await?;
    let mut w = SignalWindow::new(window.max(interval * (samples + 1)));
    let first = w.push(server.sample().await?);
    let mut signals = first.clone();
    let mut peak_flushed: Option<f64> = None;
    let n = samples.max(2);
    for _ in 1..n {
        tokio::time::sleep(interval).await;
        signals = w.push(server.sample().await?);
        if let Some(r) = signals.pages_flushed_rate.filter(|r| r.is_finite()) {
            peak_flushed = Some(peak_flushed.map_or(r, |p: f64| p.max(r)));
        }
    }
    let observed = advice::Observed::from_run(&first, &signals, peak_flushed, n);
    let vars = server.read_globals(Globals::Variables, VARIABLES).await;
    let vars = unless_unsupported(vars)?.unwrap_or_default();
    let redo_free = advice::redo_free_disk(
        advice::redo_dir(
            vars.get("innodb_log_group_home_dir").map(String::as_str),
            vars.get("datadir").map(String::as_str),
        )
        .as_deref(),
        vars.get("innodb_log_file_size")
            .and_then(|v| crate::server::sample::parse_u64(v).ok()),
    );
    let status = server.read_globals(Globals::Status, STATUS).await;
    let status = unless_unsupported(status)?.unwrap_or_default();
    // The oldest transaction is only a suspect: an idle write-only transaction is old
    // without holding a read view. Whenever one is open, SHOW ENGINE INNODB STATUS is
    // read once (under the query timeout: it can hang) to confirm who holds the view.
    let suspect = signals.sample.oldest_trx.is_some();
    let (engine_status, holder, trx_numbers) = if engine || suspect {
        match server.engine_innodb_status().await {
            Ok(text) => {
                let holders = read_view_holders(&text);
                let holder = match blocking_view(&holders) {
                    Some(v) => Holder::Confirmed(v.clone()),
                    None => Holder::NoView,
                };
                (
                    engine.then(|| EngineStatus::Lines(engine_status_lines(&text))),
                    Some(holder),
                    TrxNumbers::parse(&text),
                )
            }
            // A recording holds no engine status: there is nothing to report, not a
            // server that failed to answer.
            Err(e) if e.is_unsupported() => (None, Some(Holder::Unconfirmed(e.to_string())), None),
            Err(e) => (
                engine.then(|| EngineStatus::Failed(e.to_string())),
                Some(Holder::Unconfirmed(e.to_string())),
                None,
            ),
        }
    } else {
        (None, None, None)
    };
    let holder = holder.filter(|_| suspect);
    let culprit_thread = match &holder {
        Some(Holder::Confirmed(v)) => v.thread_id,
        _ => signals.sample.oldest_trx.as_ref().and_then(|t| t.thread_id),
    };
    let culprit_session = match culprit_thread {
        Some(id) => unless_unsupported(server.session(id, STATEMENT_CHARS).await)?.flatten(),
        None => None,
    };
    Ok(Facts {
        caps,
        signals,
        vars,
        status,
        culprit_session,
        engine_status,
        holder,
        trx_numbers,
        max_lag,
        min_view_age,
        observed,
        redo_free,
    })
}

/// What a server cannot tell at all (a recording has no process list) is left out of
/// the facts, as if absent; every other error stops `diagnose`.
fn unless_unsupported<T>(r: Result<T, ServerError>) -> Result<Option<T>, ServerError> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.is_unsupported() => Ok(None),
        Err(e) => Err(e),
    }
}

/// `diagnose --json`.
pub fn to_json(f: &Facts, findings: &[Finding], target: &str) -> Value {
    let worst = findings
        .iter()
        .map(|x| x.severity)
        .max()
        .unwrap_or(Severity::Ok);
    json!({
        "server": {
            "target": target,
            "flavor": f.caps.identity.flavor,
            "version": f.caps.identity.version.to_string(),
            "version_string": f.caps.identity.version_string,
            // Unknown (null) when replica status could not be read.
            "is_replica": (f.caps.signals.replica != crate::server::flavor::ReplicaSource::Unreadable)
                .then_some(f.signals.sample.is_replica),
        },
        "unix_ms": f.signals.sample.unix_ms,
        "worst": worst,
        "findings": findings,
        "purge": f.signals.history_len.and_then(|h| purge_split(f, h)).map(|e| json!({
            "history": e.history,
            "purgeable": e.purgeable,
            "blocked": e.blocked,
            "basis": e.basis,
            "trx_numbers": f.trx_numbers,
            "view_not_see_from": f.confirmed_view().map(|v| v.not_see_from),
            "holder_thread_id": f.confirmed_view().and_then(|v| v.thread_id),
        })),
        "signals": crate::commands::status::watch_json(&f.signals, f.min_view_age)["signals"],
        // What the samples showed over the whole run: the basis of the advice that
        // follows the device (io_capacity_max) and the sustained redo rate (redo size).
        "observed": {
            "seconds": f.observed.seconds,
            "samples": f.observed.samples,
            "lsn_rate": f.observed.lsn_rate,
            "peak_pages_flushed_rate": f.observed.peak_pages_flushed_rate,
        },
    })
}

/// `diagnose` as text.
pub fn to_text(f: &Facts, findings: &[Finding], target: &str) -> String {
    let mut out = format!(
        "innopilot diagnose: {} {} ({}) at {target}\n",
        f.caps.identity.flavor, f.caps.identity.version, f.caps.identity.version_string
    );
    for x in findings {
        out.push_str(&format!(
            "\n[{}] {}: {}\n",
            x.severity.label(),
            x.area,
            x.title
        ));
        if !x.explanation.is_empty() {
            for l in x.explanation.lines() {
                out.push_str(&format!("    {l}\n"));
            }
        }
        if !x.recommendation.is_empty() {
            out.push_str(&format!("  → {}\n", x.recommendation));
        }
        for s in &x.sql {
            out.push_str(&format!("    {s}\n"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::testkit::SharedBuf;
    use crate::server::flavor::ReplicaSource;
    use crate::server::recording::{Recorder, Recording, RecordingServer, ReplayServer};
    use crate::server::sample::{RedoSample, Sample, TrxInfo};
    use crate::sim::model::SimServer;
    use crate::sim::scenario::SimFlavor;

    fn caps() -> Capabilities {
        crate::server::flavor::fixture_caps_writable("10.11.19-MariaDB", ReplicaSource::NotReplica)
    }

    fn facts(sample: Sample, history_rate: f64, lsn_rate: f64) -> Facts {
        let vars = [
            ("innodb_io_capacity", "200"),
            ("innodb_io_capacity_max", "2000"),
            ("innodb_purge_threads", "4"),
            ("innodb_undo_tablespaces", "3"),
            ("innodb_undo_log_truncate", "OFF"),
            ("innodb_max_undo_log_size", "10485760"),
            ("innodb_buffer_pool_dump_at_shutdown", "ON"),
            ("innodb_buffer_pool_load_at_startup", "ON"),
            ("innodb_buffer_pool_dump_pct", "25"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let signals = Signals {
            history_len: sample.history_len,
            history_rate: Some(history_rate),
            lsn_rate: Some(lsn_rate),
            redo_fill: sample.redo.fill(),
            sample,
            ..Signals::default()
        };
        Facts {
            caps: caps(),
            signals,
            vars,
            status: BTreeMap::new(),
            culprit_session: Some(SessionInfo {
                user: None,
                host: None,
                command: Some("Sleep".into()),
                time_s: Some(40),
                state: None,
                info: None,
            }),
            engine_status: None,
            holder: Some(Holder::Confirmed(ViewHolder {
                trx_id: Some(421),
                thread_id: Some(17),
                age_s: Some(45),
                not_see_from: 400,
                sees_below: 400,
            })),
            trx_numbers: None,
            max_lag: Duration::from_secs(60),
            min_view_age: Duration::from_secs(10),
            observed: advice::Observed {
                seconds: 30.0,
                samples: 31,
                lsn_rate: Some(lsn_rate),
                peak_pages_flushed_rate: None,
            },
            redo_free: advice::FreeDisk::Unknown("fixture".into()),
        }
    }

    fn redo(age: u64) -> RedoSample {
        RedoSample {
            lsn: Some(1),
            checkpoint_age: Some(age),
            async_point: Some(46_935_384),
            sync_point: Some(53_640_439),
            capacity: Some(64 << 20),
        }
    }

    /// History 250 k, and connection 17 idle in a REPEATABLE READ transaction
    /// with a read view for 45 s.
    fn idle_view_sample() -> Sample {
        Sample {
            history_len: Some(250_000),
            redo: redo(1 << 20),
            oldest_trx: Some(TrxInfo {
                trx_id: "421".into(),
                thread_id: Some(17),
                age_s: 45,
                user: Some("root".into()),
                host: Some("127.0.0.1:5555".into()),
                state: Some("RUNNING".into()),
                isolation: Some("REPEATABLE READ".into()),
                command: Some("Sleep".into()),
                holds_read_view: true,
                active_count: Some(3),
            }),
            ..Sample::default()
        }
    }

    #[test]
    fn held_read_view_names_the_culprit() {
        let s = idle_view_sample();
        let fs = analyze(&facts(s, 5000.0, 0.0));
        let p = fs
            .iter()
            .find(|x| x.id == "purge_blocked")
            .expect("purge_blocked");
        assert_eq!(p.severity, Severity::Warning);
        assert_eq!(p.details["thread_id"], 17);
        assert_eq!(p.sql, vec!["KILL 17;"]);
        assert!(
            p.explanation.contains("idle in an open transaction"),
            "{}",
            p.explanation
        );
        assert!(p.title.contains("connection 17"));
        // Undo truncation off is reported with its SQL.
        let u = fs.iter().find(|x| x.id == "undo_truncate_off").unwrap();
        assert_eq!(u.sql, vec!["SET GLOBAL innodb_undo_log_truncate = ON;"]);
        // Sorted most severe first.
        assert!(fs.windows(2).all(|w| w[0].severity >= w[1].severity));
    }

    /// A pool that evicts with MariaDB's default free-list target, at e's size.
    fn evicting(depth: u64, waits_per_s: f64) -> Facts {
        let mut s = Sample {
            free_pages: Some(depth * 3 / 4),
            total_pages: Some(8192),
            ..Sample::default()
        };
        s.knobs.insert(Knob::LruScanDepth, depth);
        let mut f = facts(s, 0.0, 0.0);
        f.signals.read_rate = Some(6000.0);
        f.signals.free_page_wait_rate = Some(waits_per_s);
        f
    }

    #[test]
    fn a_large_free_list_reserve_in_an_evicting_pool_is_reported() {
        let fs = analyze(&evicting(1536, 0.0));
        let x = fs
            .iter()
            .find(|x| x.id == "free_list_reserve")
            .expect("free_list_reserve");
        assert_eq!(x.severity, Severity::Info);
        assert!(x.title.contains("1536 pages free (19 %"), "{}", x.title);
        assert_eq!(x.sql, vec!["SET GLOBAL innodb_lru_scan_depth = 256;"]);
        let none = |f: &Facts| analyze(f).iter().all(|x| x.id != "free_list_reserve");
        // Already low; users already waiting (the page cleaner cannot keep up); the
        // pool not evicting; a pool so large the reserve is nothing; MySQL.
        assert!(none(&evicting(256, 0.0)));
        assert!(none(&evicting(1536, 120.0)));
        let mut f = evicting(1536, 0.0);
        f.signals.sample.free_pages = Some(5000);
        assert!(none(&f));
        let mut f = evicting(1536, 0.0);
        f.signals.sample.total_pages = Some(4 << 20);
        assert!(none(&f));
        let mut f = evicting(1536, 0.0);
        f.caps = crate::server::flavor::fixture_caps("8.0.40", |_| None, ReplicaSource::NotReplica);
        assert!(none(&f));
    }

    #[test]
    fn a_read_view_that_blocks_nothing_is_not_called_blocking() {
        // A long view while the history is flat: the estimate says none of it is
        // held back by the view, so no "Purge is blocked by" finding (whose body
        // would say 0 undo logs are blocked).
        let s = idle_view_sample();
        let fs = analyze(&facts(s, 0.0, 0.0));
        assert!(
            fs.iter().all(|x| x.id != "purge_blocked"),
            "{:#?}",
            fs.iter().map(|x| (&x.id, &x.title)).collect::<Vec<_>>()
        );
    }

    #[test]
    fn sync_flush_is_critical_with_io_capacity_max_sql() {
        let s = Sample {
            history_len: Some(10),
            redo: redo(53_640_439),
            ..Sample::default()
        };
        let mut fx = facts(s, 0.0, 20.0 * 1048576.0);
        // io_capacity_max follows what the device showed: 2 950 pages/s → 3 000.
        fx.observed.peak_pages_flushed_rate = Some(2950.0);
        let fs = analyze(&fx);
        let x = fs.iter().find(|x| x.id == "sync_flush").unwrap();
        assert_eq!(x.severity, Severity::Critical);
        assert_eq!(x.sql, vec!["SET GLOBAL innodb_io_capacity_max = 3000;"]);
        let r = fs.iter().find(|x| x.id == "redo_size").unwrap();
        assert!(
            r.sql[0].starts_with("SET GLOBAL innodb_log_file_size = "),
            "{:?}",
            r.sql
        );
        let n: u64 = r.sql[0]
            .trim_start_matches("SET GLOBAL innodb_log_file_size = ")
            .trim_end_matches(';')
            .parse()
            .unwrap();
        assert!(n > 64 << 20 && n % (1 << 20) == 0);
        // No buffer pool size in the fixture: the recovery bound applies.
        assert!(n <= 50 * 300 * (1 << 20) * 64 / 51, "{n}");
    }

    #[test]
    fn lagging_replica() {
        let s = Sample {
            history_len: Some(10),
            redo: redo(1 << 20),
            is_replica: true,
            replica_lag_s: Some(900),
            ..Sample::default()
        };
        let fs = analyze(&facts(s, 0.0, 0.0));
        let x = fs.iter().find(|x| x.id == "replica_lagging").unwrap();
        assert_eq!(x.severity, Severity::Critical);
        assert_eq!(x.sql.len(), 3);
    }

    /// The long-read-view scenario 40 s into its read view.
    fn sim_in_read_view() -> SimServer {
        let server = SimServer::for_scenario(
            &crate::sim::Scenario::named("long_read_view").unwrap(),
            SimFlavor::MySql80,
            1,
        );
        server.advance(100);
        server
    }

    async fn gather_from<S: Server>(server: &mut S) -> Facts {
        gather(
            server,
            3,
            Duration::from_secs(1),
            Duration::from_secs(30),
            true,
            Duration::from_secs(60),
            Duration::from_secs(10),
        )
        .await
        .unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn diagnose_on_the_simulator_names_the_read_view_and_its_statement() {
        let mut server = sim_in_read_view();
        let facts = gather_from(&mut server).await;
        assert_eq!(facts.vars["innodb_undo_log_truncate"], "ON");
        let fs = analyze(&facts);
        let p = fs.iter().find(|x| x.id == "purge_blocked").unwrap();
        let (title, why) = (&p.title, &p.explanation);
        let culprit = "Purge is blocked by transaction 421000 (connection 1000, report@batch.sim)";
        assert!(title.starts_with(culprit), "{title}");
        assert!(why.contains("It is running: SELECT customer_id"), "{why}");
        assert_eq!(p.sql, vec!["KILL 1000;"]);
        assert_eq!(p.details["state"], "Sending data");
        let e = fs
            .iter()
            .find(|x| x.id == "engine_status")
            .expect("engine status");
        assert!(
            e.explanation.contains("History list length"),
            "{}",
            e.explanation
        );
        assert!(fs.iter().any(|x| x.area == "flushing"));
        assert!(fs.windows(2).all(|w| w[0].severity >= w[1].severity));
    }

    #[tokio::test(start_paused = true)]
    async fn diagnose_on_a_recording_leaves_out_what_was_not_recorded() {
        let buf = SharedBuf::default();
        let recorder = Recorder::to_writer(Box::new(buf.clone()));
        let mut rec = RecordingServer::new(sim_in_read_view(), recorder);
        let live = gather_from(&mut rec).await;
        let recording = Recording::parse(&buf.text(), std::path::Path::new("sim.jsonl")).unwrap();
        assert_eq!(recording.samples.len(), 3);
        let mut replay = ReplayServer::new(&recording);
        let facts = gather_from(&mut replay).await;
        assert_eq!(facts.signals.history_len, live.signals.history_len);
        assert_eq!(facts.vars["innodb_undo_log_truncate"], "ON");
        assert!(facts.status.is_empty() && facts.culprit_session.is_none());
        assert!(facts.engine_status.is_none());
        let fs = analyze(&facts);
        let p = fs
            .iter()
            .find(|x| x.id == "purge_blocked")
            .expect("purge_blocked");
        assert!(p.title.contains("connection 1000"), "{}", p.title);
        // A recording cannot confirm the holder: a suspect, with no KILL.
        assert!(p.title.ends_with("unconfirmed"), "{}", p.title);
        assert!(p.sql.is_empty(), "{:?}", p.sql);
    }

    /// Captured from MariaDB 10.11: connection 4 holds an idle write-only transaction
    /// (trx 23, no read view), connection 5 a consistent snapshot, connection 6 a READ
    /// COMMITTED transaction between statements (no view).
    const WRONG_CULPRIT: &str =
        include_str!("testdata/engine_status_mariadb_10_11_wrong_culprit.txt");
    /// Captured from MariaDB 10.11: two snapshots, connection 12's older than 16's
    /// (the newer is printed first).
    const TWO_VIEWS: &str = include_str!("testdata/engine_status_mariadb_10_11_two_views.txt");

    #[test]
    fn parser_finds_the_read_view_not_the_oldest_transaction() {
        let hs = read_view_holders(WRONG_CULPRIT);
        assert_eq!(
            hs,
            vec![ViewHolder {
                trx_id: None,
                thread_id: Some(5),
                age_s: Some(2),
                not_see_from: 23,
                sees_below: 23
            }]
        );
        assert_eq!(blocking_view(&hs).unwrap().thread_id, Some(5));
    }

    #[test]
    fn parser_picks_the_oldest_view_by_its_limit() {
        let hs = read_view_holders(TWO_VIEWS);
        assert_eq!(hs.len(), 2, "{hs:?}");
        assert_eq!(hs[0].thread_id, Some(16));
        let b = blocking_view(&hs).unwrap();
        assert_eq!((b.thread_id, b.sees_below), (Some(12), 31));
    }

    #[test]
    fn parser_takes_mysql_text_and_ignores_lookalikes() {
        let text = "LIST OF TRANSACTIONS FOR EACH SESSION:\n---TRANSACTION 421937, ACTIVE 45 sec\nMySQL tables in use 1, locked 0\nMySQL thread id 17, OS thread handle 1402, query id 99 127.0.0.1 root\nSELECT 'Trx read view will not see trx with id >= 1, sees < 1'\nTrx read view will not see trx with id >= 500, sees < 480\n---TRANSACTION 421938, ACTIVE 3 sec\nMySQL thread id 18, OS thread handle 1403, query id 100 127.0.0.1 root\nTrx read view will not see trx with id >= x, sees < 1\n--------\nFILE I/O\n";
        let hs = read_view_holders(text);
        assert_eq!(
            hs,
            vec![ViewHolder {
                trx_id: Some(421937),
                thread_id: Some(17),
                age_s: Some(45),
                not_see_from: 500,
                sees_below: 480
            }]
        );
        assert!(read_view_holders("").is_empty());
    }

    #[test]
    fn a_confirmed_holder_other_than_the_oldest_transaction_is_named() {
        // The oldest transaction (17) holds no view; connection 5 does.
        let mut f = facts(idle_view_sample(), 5000.0, 0.0);
        f.holder = Some(Holder::Confirmed(
            blocking_view(&read_view_holders(WRONG_CULPRIT))
                .unwrap()
                .clone(),
        ));
        f.signals.sample.oldest_trx.as_mut().unwrap().age_s = 45;
        f.min_view_age = Duration::from_secs(0);
        let fs = analyze(&f);
        let p = fs
            .iter()
            .find(|x| x.id == "purge_blocked")
            .expect("purge_blocked");
        assert!(p.title.contains("connection 5"), "{}", p.title);
        assert!(!p.title.contains("connection 17"), "{}", p.title);
        assert_eq!(p.sql, vec!["KILL 5;"]);
        assert_eq!(p.details["thread_id"], 5);
        assert!(p.details["trx_id"].is_null(), "{}", p.details);
        assert_eq!(p.details["confirmed"], true);
    }

    #[test]
    fn an_unconfirmed_suspect_gets_no_kill() {
        let mut f = facts(idle_view_sample(), 5000.0, 0.0);
        f.holder = Some(Holder::Unconfirmed(
            "SHOW ENGINE INNODB STATUS did not answer within 5s".into(),
        ));
        let fs = analyze(&f);
        let p = fs
            .iter()
            .find(|x| x.id == "purge_blocked")
            .expect("purge_blocked");
        assert!(p.sql.is_empty(), "{:?}", p.sql);
        assert!(p.title.ends_with("unconfirmed"), "{}", p.title);
        assert!(
            p.explanation.contains("did not answer"),
            "{}",
            p.explanation
        );
        assert_eq!(p.details["confirmed"], false);
        // Engine status read, no read view in it: nothing is named.
        f.holder = Some(Holder::NoView);
        let fs = analyze(&f);
        assert!(fs
            .iter()
            .all(|x| x.id != "purge_blocked" && x.sql.iter().all(|s| !s.starts_with("KILL"))));
    }

    /// Facts with the holder and the transaction numbers of a captured SHOW ENGINE
    /// INNODB STATUS.
    fn facts_from_engine_status(text: &str, history: u64) -> Facts {
        let mut s = idle_view_sample();
        s.history_len = Some(history);
        let mut f = facts(s, 5000.0, 0.0);
        f.holder = Some(match blocking_view(&read_view_holders(text)) {
            Some(v) => Holder::Confirmed(v.clone()),
            None => Holder::NoView,
        });
        f.trx_numbers = TrxNumbers::parse(text);
        f.min_view_age = Duration::ZERO;
        f
    }

    #[test]
    fn a_view_older_than_the_history_blocks_all_of_it() {
        // Captured: counter 30, purge done below 25, the view does not see from 23.
        let f = facts_from_engine_status(WRONG_CULPRIT, 3);
        assert_eq!(
            f.trx_numbers,
            Some(TrxNumbers {
                counter: 30,
                purged_below: 25
            })
        );
        let fs = analyze(&f);
        let p = fs
            .iter()
            .find(|x| x.id == "purge_blocked")
            .expect("purge_blocked");
        assert_eq!(p.details["split_basis"], "trx_numbers");
        assert_eq!(
            (
                p.details["purgeable"].as_u64(),
                p.details["blocked"].as_u64()
            ),
            (Some(0), Some(3))
        );
        assert!(
            p.explanation.contains("Purge has reached the view"),
            "{}",
            p.explanation
        );
        assert!(!p.explanation.contains("estimate"), "{}", p.explanation);
        // The older of two views is the holder, and it blocks everything too.
        let f = facts_from_engine_status(TWO_VIEWS, 4);
        let p = analyze(&f)
            .into_iter()
            .find(|x| x.id == "purge_blocked")
            .unwrap();
        assert_eq!(p.sql, vec!["KILL 12;"]);
        assert_eq!(p.details["view_not_see_from"], 31);
        assert_eq!(p.details["blocked"], 4);
    }

    #[test]
    fn a_view_younger_than_the_history_blocks_only_what_came_after_it() {
        let text = WRONG_CULPRIT.replace(
            "Trx read view will not see trx with id >= 23, sees < 23",
            "Trx read view will not see trx with id >= 30, sees < 30",
        );
        // Nothing began since the view: it blocks nothing, whatever the history.
        let f = facts_from_engine_status(&text, 250_000);
        let fs = analyze(&f);
        assert!(fs.iter().all(|x| x.id != "purge_blocked"), "{fs:#?}");
        assert!(fs
            .iter()
            .all(|x| x.sql.iter().all(|q| !q.starts_with("KILL"))));
        // Three of the five numbers since purge's position came after it.
        let text = WRONG_CULPRIT.replace(
            "Trx read view will not see trx with id >= 23, sees < 23",
            "Trx read view will not see trx with id >= 27, sees < 27",
        );
        let f = facts_from_engine_status(&text, 250_000);
        let p = analyze(&f)
            .into_iter()
            .find(|x| x.id == "purge_blocked")
            .unwrap();
        assert_eq!(
            (
                p.details["purgeable"].as_u64(),
                p.details["blocked"].as_u64()
            ),
            (Some(100_000), Some(150_000))
        );
        assert!(p.explanation.contains("spread evenly"), "{}", p.explanation);
    }

    #[test]
    fn empty_history_blocks_nothing() {
        let mut s = idle_view_sample();
        s.history_len = Some(0);
        let fs = analyze(&facts(s, 0.0, 0.0));
        assert!(fs.iter().all(|x| x.id != "purge_blocked"));
        assert!(fs
            .iter()
            .all(|x| x.sql.iter().all(|q| !q.starts_with("KILL"))));
        assert!(fs
            .iter()
            .all(|x| !x.explanation.contains("cannot remove the history")));
        let ok = fs.iter().find(|x| x.id == "purge_ok").unwrap();
        assert!(
            ok.explanation.contains("nothing to purge"),
            "{}",
            ok.explanation
        );
    }

    #[test]
    fn undo_in_ibdata_and_slow_redo_read_right() {
        let mut s = idle_view_sample();
        s.undo_bytes = Some(76 << 20);
        let mut f = facts(s, 0.0, 10.0);
        f.vars.insert("innodb_undo_tablespaces".into(), "0".into());
        let fs = analyze(&f);
        let u = fs
            .iter()
            .find(|x| x.id == "undo_in_system_tablespace")
            .unwrap();
        assert!(
            u.explanation
                .contains("ibdata1 (undo and the system tables) takes 76 MiB"),
            "{}",
            u.explanation
        );
        assert!(!u.explanation.contains("undo tablespaces take"));
        let text = to_text(&f, &fs, "t");
        assert!(!text.contains("minutes away"), "{text}");
        assert!(!text.contains("0.0 MiB/s"), "{text}");
        assert!(!text.contains("seed 0"), "{text}");
    }

    #[test]
    fn at_the_sync_point_no_time_is_projected() {
        let s = Sample {
            history_len: Some(10),
            redo: redo(53_640_439),
            ..Sample::default()
        };
        let f = facts(s, 0.0, 4.0e6);
        let text = to_text(&f, &analyze(&f), "t");
        assert!(!text.contains("0.0 minutes away"), "{text}");
        assert!(text.contains("the sync point is reached"), "{text}");
    }

    #[test]
    fn engine_status_extracts_purge_lines() {
        let text = "------------\nTRANSACTIONS\n------------\nTrx id counter 123\nPurge done for trx's n:o < 100 undo n:o < 0 state: running\nHistory list length 42\n";
        assert_eq!(
            engine_status_lines(text),
            vec![
                "Purge done for trx's n:o < 100 undo n:o < 0 state: running",
                "History list length 42"
            ]
        );
    }
}
