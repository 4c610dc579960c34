//! What the controller acts on ([`Signals`]): rates, the smoothed history derivative,
//! the redo-fill trend and restart detection, derived from a window of samples by
//! [`SignalWindow`]. Pure: samples in, signals out. The split of history into
//! purgeable and blocked is [`purge`]'s; the share purge has handled but the server has
//! not freed is integrated in `unfreed`.

use std::collections::VecDeque;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::server::sample::Sample;

pub mod purge;
mod unfreed;

pub use unfreed::{KEEP_PACE, PACE_MIN_ROWS};

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
    /// Of those, pages the LRU flushed to free buffer-pool pages per second (MariaDB
    /// ≥ 10.5): they retire little redo, so the redo one flushed page retires is
    /// measured on the rest.
    #[serde(default)]
    pub lru_flushed_rate: Option<f64>,
    /// Waits for a free buffer-pool page per second (latest interval): above zero,
    /// users wait for LRU flushing, which competes with background (flush-list)
    /// flushing for the same device.
    #[serde(default)]
    pub free_page_wait_rate: Option<f64>,
    /// Pages read into the buffer pool per second (latest interval,
    /// `Innodb_buffer_pool_reads`): above zero with a short free list, the pool evicts.
    #[serde(default)]
    pub read_rate: Option<f64>,
    pub history_len: Option<u64>,
    /// History derivative, undo logs per second: least-squares slope over the window.
    pub history_rate: Option<f64>,
    /// Rows inserted + updated + deleted per second (latest interval).
    pub dml_rate: Option<f64>,
    pub rows_inserted_rate: Option<f64>,
    pub rows_updated_rate: Option<f64>,
    pub rows_deleted_rate: Option<f64>,
    /// `Com_commit` per second: COMMIT statements only, so 0 under autocommit writes.
    pub commit_rate: Option<f64>,
    /// Read-write transactions committed per second (latest interval), from MariaDB's
    /// `Innodb_max_trx_id`, which advances by two for each ([`Sample::max_trx_id`]).
    /// `None` on MySQL. See [`Signals::undo_inflow`].
    #[serde(default)]
    pub rw_trx_rate: Option<f64>,
    pub dirty_fraction: Option<f64>,
    /// History length around the oldest transaction's read view, from the window's
    /// long memory of history ([`HISTORY_MEMORY`]); `None` when the oldest
    /// transaction holds no read view. What [`crate::signals::purge::estimate`]
    /// splits history into purgeable and blocked with.
    #[serde(default)]
    pub view_history: Option<ViewHistory>,
    /// Fastest history decrease seen lately, undo logs/s (positive): the largest
    /// −history_rate, decaying with a [`DRAIN_HALF_LIFE`] half-life. Purge drained at
    /// least this fast then, so it is a rough lower bound on what purge can do.
    #[serde(default)]
    pub history_drain_rate: Option<f64>,
    /// Users are held at the maximum checkpoint age: the redo fill at [`HELD_FILL`] of
    /// the sync point and the DML rate under [`HELD_SHARE`] of its reference (a slow
    /// average of the ticks when they were not held). `None` when the fill or the DML
    /// rate is unknown, or before a reference exists.
    #[serde(default)]
    pub users_held: Option<bool>,
    /// Undo records purge handled per second over the window
    /// ([`Sample::purge_records`]); `None` while the counters are off.
    #[serde(default)]
    pub purge_handled_rate: Option<f64>,
    /// Purge's pace over the window: records it handled per row users updated or
    /// deleted (1.0: it keeps up; above 1: it works off a backlog). `None` while the
    /// counters are off or users changed fewer than [`PACE_MIN_ROWS`] rows.
    #[serde(default)]
    pub purge_pace: Option<f64>,
    /// Of the history, undo logs purge has handled but the server has not yet freed
    /// (an estimate, [`SignalWindow`]'s integral of the history growth that purge's
    /// pace does not account for): not debt, whatever the history count says. `None`
    /// while the counters are off.
    #[serde(default)]
    pub unfreed_history: Option<u64>,
    /// Slope of [`Signals::unfreed_history`] over the window, undo logs/s.
    #[serde(default)]
    pub unfreed_rate: Option<f64>,
}

impl Signals {
    /// How fast the history purge has not handled grows, undo logs/s: the history
    /// rate less the unfreed share's ([`Signals::unfreed_rate`]), or the history rate
    /// where that is unknown.
    pub fn debt_rate(&self) -> Option<f64> {
        let y = self.history_rate.filter(|r| r.is_finite())?;
        Some(match self.unfreed_rate.filter(|r| r.is_finite()) {
            Some(u) => y - u,
            None => y,
        })
    }

    /// Undo logs entering history per second: one per read-write transaction
    /// committed. MariaDB's transaction-id counter says exactly that
    /// ([`Signals::rw_trx_rate`]). Elsewhere `Com_commit` counts only COMMIT
    /// statements (autocommit writes, such as sysbench's `oltp_update_*`, leave it at
    /// 0 while history grows), so the commit rate serves only while it is above zero,
    /// and the DML rate (one row a transaction at least, an upper bound) otherwise.
    pub fn undo_inflow(&self) -> Option<f64> {
        let ok = |r: &Option<f64>| r.filter(|x| x.is_finite() && *x >= 0.0);
        ok(&self.rw_trx_rate)
            .or_else(|| ok(&self.commit_rate).filter(|c| *c > 0.0))
            .or_else(|| ok(&self.dml_rate))
    }
}

/// Users are held at the maximum checkpoint age when the redo fill is at least this
/// share of the sync point and the DML rate has collapsed under [`HELD_SHARE`] of its
/// reference. MariaDB's `log_free_check()` → `log_checkpoint_margin()` (log0log.cc)
/// makes every writer wait for the checkpoint once the age passes
/// `max_checkpoint_age`: the rate collapses there (the real-server g_checkpoint_stall:
/// 2 300 → 0–30 transactions/s at a 100 % fill). A fill at the maximum with users at
/// their rate is not that (the real-server f_cold_view: 90–100 % for most of a minute
/// at 21 000 transactions/s).
pub const HELD_FILL: f64 = 0.97;

/// See [`HELD_FILL`]: the share of the reference DML rate under which users are held.
/// Lower than f_cold_view's dips while purge surges through cold undo at 77–91 % fill
/// (4 900 of 21 000, 0.23), which are read contention, not a checkpoint wait.
pub const HELD_SHARE: f64 = 0.2;

/// Weight of each tick in the reference DML rate (a slow average of the ticks when
/// users were not held: about 20 s).
pub const DML_REF_WEIGHT: f64 = 0.05;

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
    /// Decaying peak of −history_rate: (undo logs/s, when).
    drain: Option<(f64, u64)>,
    /// Reference DML rate for [`Signals::users_held`], rows/s.
    dml_ref: Option<f64>,
    /// (t_ms, [`Signals::unfreed_history`]) over the window; empty while unknown.
    unfreed: VecDeque<(u64, f64)>,
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

/// Drops entries at the front older than `span` before `now` (ms), keeping at least
/// `keep` of them: the window's samples and its series share one rule.
fn trim_older<T>(
    q: &mut VecDeque<T>,
    now: u64,
    span: Duration,
    keep: usize,
    t: impl Fn(&T) -> u64,
) {
    let span_ms = span.as_millis() as u64;
    while q.len() > keep
        && q.front()
            .is_some_and(|e| now.saturating_sub(t(e)) > span_ms)
    {
        q.pop_front();
    }
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
/// An iterator, walked three times, so that a tick's slopes over the window build no
/// vector.
pub fn slope<I>(points: I) -> Option<f64>
where
    I: IntoIterator<Item = (f64, f64)>,
    I::IntoIter: Clone,
{
    let points = points.into_iter();
    let count = points.clone().count();
    if count < 2 {
        return None;
    }
    let n = count as f64;
    let mt = points.clone().map(|p| p.0).sum::<f64>() / n;
    let my = points.clone().map(|p| p.1).sum::<f64>() / n;
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
            dml_ref: None,
            unfreed: VecDeque::new(),
        }
    }

    /// Forgets everything (after a reconnect: samples from before cannot be trusted).
    pub fn reset(&mut self) {
        self.samples.clear();
        self.history_log.clear();
        self.drain = None;
        self.dml_ref = None;
        self.unfreed.clear();
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
                self.reset();
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
            trim_older(&mut self.history_log, t, HISTORY_MEMORY, 0, |p| p.0);
        }
        let newest = sample.t_ms;
        self.samples.push_back(sample);
        trim_older(&mut self.samples, newest, self.span, 2, |s| s.t_ms);
        let mut sig = self.derive(reset);
        sig.view_history = self.view_history(&sig.sample);
        sig.history_drain_rate = self.update_drain(&sig);
        sig.users_held = self.users_held(&sig);
        self.update_unfreed(&mut sig);
        sig
    }

    /// [`Signals::users_held`]; the reference follows the ticks that are not held.
    fn users_held(&mut self, sig: &Signals) -> Option<bool> {
        let dml = sig.dml_rate.filter(|r| r.is_finite() && *r >= 0.0)?;
        let fill = sig.redo_fill.filter(|f| f.is_finite())?;
        let held = match self.dml_ref {
            Some(r) => fill >= HELD_FILL && dml < HELD_SHARE * r,
            None => false,
        };
        let known = self.dml_ref.is_some();
        if !held {
            self.dml_ref = Some(self.dml_ref.map_or(dml, |r| r + DML_REF_WEIGHT * (dml - r)));
        }
        known.then_some(held)
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
            sig.lru_flushed_rate = rate(prev.pages_lru_flushed, cur.pages_lru_flushed, dt);
            sig.free_page_wait_rate = rate(prev.free_page_waits, cur.free_page_waits, dt);
            sig.read_rate = rate(prev.pages_read, cur.pages_read, dt);
            sig.commit_rate = rate(prev.commits, cur.commits, dt);
            sig.rw_trx_rate = rate(prev.max_trx_id, cur.max_trx_id, dt).map(|r| r / 2.0);
            sig.rows_inserted_rate = rate(prev.rows_inserted, cur.rows_inserted, dt);
            sig.rows_updated_rate = rate(prev.rows_updated, cur.rows_updated, dt);
            sig.rows_deleted_rate = rate(prev.rows_deleted, cur.rows_deleted, dt);
            sig.dml_rate = rate(
                sum3(prev.rows_inserted, prev.rows_updated, prev.rows_deleted),
                sum3(cur.rows_inserted, cur.rows_updated, cur.rows_deleted),
                dt,
            );
            let pts = |f: fn(&Sample) -> Option<f64>| {
                self.samples
                    .iter()
                    .filter_map(move |s| f(s).map(|y| ((s.t_ms - first_t) as f64 / 1000.0, y)))
            };
            sig.history_rate = slope(pts(|s| s.history_len.map(|h| h as f64)));
            sig.redo_fill_trend = slope(pts(|s| s.redo.fill()));
        }
        sig.sample = cur;
        sig
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::sample::TrxInfo;
    use proptest::prelude::*;

    #[test]
    fn view_history_and_drain_rate() {
        let trx = |age_s| TrxInfo {
            trx_id: "7".into(),
            thread_id: Some(1),
            age_s,
            holds_read_view: true,
            ..TrxInfo::default()
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

    pub(super) fn sample_at(t_s: u64, uptime: u64, history: u64, updated: u64) -> Sample {
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

    /// The inflow of undo logs: MariaDB's transaction-id counter (two ids a read-write
    /// transaction) first; without it the commit rate while above 0; the DML rate when
    /// `Com_commit` does not move (autocommit writes).
    #[test]
    fn undo_inflow_counts_read_write_transactions() {
        // 3 000 autocommit single-row updates a second: Com_commit does not move.
        let at = |t: u64, ids: Option<u64>, commits: u64| Sample {
            max_trx_id: ids,
            commits: Some(commits),
            ..sample_at(t, 100 + t, 0, 3_000 * t)
        };
        let mut w = SignalWindow::new(Duration::from_secs(10));
        w.push(at(0, Some(1_000), 7));
        let sig = w.push(at(2, Some(1_000 + 12_000), 7));
        assert_eq!(sig.rw_trx_rate, Some(3_000.0));
        assert_eq!(sig.commit_rate, Some(0.0));
        assert_eq!(sig.undo_inflow(), Some(3_000.0));
        // MySQL: no counter; Com_commit at 0 while rows change means autocommit.
        let mut w = SignalWindow::new(Duration::from_secs(10));
        w.push(at(0, None, 7));
        let sig = w.push(at(2, None, 7));
        assert_eq!(sig.rw_trx_rate, None);
        assert_eq!(sig.undo_inflow(), Some(3_000.0));
        // Explicit transactions of three rows: the commit rate.
        let mut w = SignalWindow::new(Duration::from_secs(10));
        w.push(at(0, None, 7));
        let sig = w.push(at(2, None, 7 + 2_000));
        assert_eq!(sig.undo_inflow(), Some(1_000.0));
        // Nothing known: nothing said.
        assert_eq!(Signals::default().undo_inflow(), None);
    }

    /// The g_checkpoint_stall shape: users at 2 000 rows/s, then the fill at the sync
    /// point with the rate collapsed (held); the f_cold_view shape: the fill at the
    /// sync point with users at their rate, and a dip at 88 % (neither held).
    #[test]
    fn users_held_at_the_maximum_checkpoint_age() {
        let sync = 80u64 << 20;
        let at = |t: u64, rows: u64, fill: f64| Sample {
            redo: crate::server::sample::RedoSample {
                checkpoint_age: Some((fill * sync as f64) as u64),
                sync_point: Some(sync),
                ..Default::default()
            },
            ..sample_at(t, 100 + t, 0, rows)
        };
        let mut w = SignalWindow::new(Duration::from_secs(10));
        let mut rows = 0;
        assert_eq!(w.push(at(0, rows, 0.5)).users_held, None, "no rate yet");
        rows += 2_000;
        assert_eq!(
            w.push(at(1, rows, 0.5)).users_held,
            None,
            "no reference yet"
        );
        for t in 2..=30 {
            rows += 2_000;
            let fill = if t > 20 { 1.0 } else { 0.5 };
            assert_eq!(w.push(at(t, rows, fill)).users_held, Some(false), "t={t}");
        }
        // The fill at the maximum and 20 rows/s: held, and it stays held (the
        // reference does not follow the held ticks down).
        for t in 31..=60 {
            rows += 20;
            assert_eq!(w.push(at(t, rows, 1.0)).users_held, Some(true), "t={t}");
        }
        // Users back at their rate: not held.
        rows += 2_000;
        assert_eq!(w.push(at(61, rows, 1.0)).users_held, Some(false));
        // A collapse below the maximum (purge's reads at 88 %): not held.
        rows += 20;
        assert_eq!(w.push(at(62, rows, 0.88)).users_held, Some(false));
        // Unknown fill: unknown.
        rows += 20;
        let mut s = at(63, rows, 1.0);
        s.redo = Default::default();
        assert_eq!(w.push(s).users_held, None);
        // A restart forgets the reference.
        assert_eq!(w.push(at(64, 0, 1.0)).users_held, None);
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
