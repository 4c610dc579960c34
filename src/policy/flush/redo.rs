//! Redo headroom, the flush policy's second lever: grow the redo log when the fill
//! sits at the maximum checkpoint age, within a disk budget and a recovery-time bound
//! that is measured, and keep it until innopilot exits (`redo_shrink` gives it back
//! when quiet instead). Part of [`Flush`]: it reads the episode and the device the
//! page-cleaner half measures.
//!
//! `redo_resize` is on by default; the knob's `manage` must be true too, which it is by
//! default for MariaDB's innodb_log_file_size only. When f has been at or above
//! `redo_grow_fill_pct` (95 %: the maximum checkpoint age) for `redo_grow_after` (20 s)
//! of a pressure episode (f at or above the target; the seconds need not be in one
//! stay) while flushing can do no more (the device's limit, or past the async point),
//! the grow is armed — when the log holds less than `redo_min_span` (20 s) of the
//! episode's demand (too small whatever the wait), once the episode has lasted
//! [`SPAN_SUSTAIN_MS`] (not a start-up transient), at the first tick at the maximum or,
//! once the fill has touched it, at any tick while the users' rate still spans less
//! (a sawing fill), and then proposed at once, before users are held; armed by the
//! seconds, it is proposed
//! at the first lull (fill falling), as soon as users are held, or after
//! `redo_lull_wait`, whichever comes first ([`GrowSend`]): growing the redo
//! (innodb_log_file_size on MariaDB ≥ 10.9, innodb_redo_log_capacity on MySQL ≥
//! 8.0.30) to the size that would have held the episode under the target
//! ([`redo_capacity_for`]: the redo its demand would have added while users were held
//! at the maximum), at least double and at least `redo_min_span` of the demand, within
//! the disk budget `redo_max_size` and the recovery-time bound. One grow per pressure
//! episode: the next is armed only once the fill has fallen under the target.
//!
//! **The grown log is kept** until innopilot exits and restores the baseline. A burst
//! that comes back (h: a nightly batch) then meets the log the last one showed it
//! needs; shrunk back in between, it would stall again as the first did, since a grow
//! sent once a burst has begun is adopted only after the burst's hot set has been
//! written once (below). The size stays within both budgets: the disk's
//! (`redo_max_size`) and recovery's (a crash at the larger log's maximum checkpoint
//! age recovers within `recovery_time_budget`). With `redo_shrink` on (off by
//! default), the log goes back to the baseline once users have written less than
//! `redo_shrink_fill_pct` of the *baseline* log's maximum checkpoint age a minute for
//! `redo_shrink_after` ([`shrink_landing_fill`]: where a shrink would land). The exit
//! restore asks the same before it shrinks, and otherwise keeps the grown log
//! (`control::restore`).
//!
//! **What a resize at 100 % fill does** (MariaDB `log0log.cc` `log_t::resize_start()`,
//! `log_t::write_checkpoint()`). `resize_start` creates ib_logfile101 at the new size,
//! sets `resize_lsn` to the current write LSN, and ends with
//! `buf_flush_ahead(start_lsn, false)`: flush every page modified before that LSN. From
//! then on every redo write goes to both files (`resize_write_buf`). The new file, and
//! with it `set_capacity()`'s larger max_checkpoint_age, is adopted only in
//! `write_checkpoint()` once `resizing <= checkpoint_lsn`, i.e. once the checkpoint has
//! passed the LSN of the SET. Started at 100 % fill that means the whole current age
//! (every dirty page) is flushed at the device's rate before any relief; users stay at
//! the old maximum meanwhile, then the forced checkpoint drops the fill at once (the
//! issue's run: 92 % → 6 % in a second, a second at 0 TPS). Started in a lull the age
//! to flush first is smaller: hence the preference. `log_t::resize_abort()` discards
//! ib_logfile101 (SET GLOBAL innodb_log_file_size to the current size while a resize
//! runs); only the session running the SET waits. `tests/redo_resize.rs` checks both on
//! the real server, and that the maximum age keeps its share of the file, which
//! [`Flush::recovery_bound`] divides by. `write_checkpoint()` sets the new
//! `srv_log_file_size` and `set_capacity()` in one critical section, so
//! `@@innodb_log_file_size` and `Innodb_checkpoint_max_age` change together; only the
//! SET's own session may return later (its loop in `innodb_log_file_size_update()`
//! waits on the page cleaner's condition with a 5 s timeout).
//!
//! **Where adoption waits** (the real-server benchmark's g, a burst against a device
//! of about 500 page writes a second with the doublewrite buffer): the checkpoint that
//! ends the stall lands just before the LSN of a SET sent at the maximum, and the
//! pages the burst dirtied in the seconds before that LSN must be written first,
//! about 3 k pages, so adoption comes 6–8 s after the stall whether the grow was
//! sent a second before users were held or three seconds after. The stall itself is
//! the hot set written once: uniform updates dirty every page of it within the base
//! load and the burst's first second, and the checkpoint cannot pass a page before
//! it is written (h's defaults, with the LSN recorded: the checkpoint stayed at the
//! LSN the base load began from while about 26 k pages were written, 49 s, then
//! jumped 95 MB in four seconds). No grow sent once the burst has begun is adopted
//! before that; only a larger log from the start avoids the stall. The checkpoint
//! stands still rather than creeping because MariaDB writes each page's dirty
//! neighbours with it on a rotational device (`buf_flush_try_neighbors()`,
//! `innodb_flush_neighbors = 1`): with `innodb_flush_neighbors = 0` the fifty-first
//! run's g moved it 1–5 MB a batch and let users through between batches, though the
//! stall ended no sooner; the flush policy now sets it to 0 while it manages flushing
//! (`neighbors_off`, in mod.rs).
//!
//! **Recovery model.** Crash recovery parses and applies the redo since the last
//! checkpoint and reads and writes back every page changed since
//! ([`recovery_time_s`]: age / [`REDO_APPLY_BYTES_PER_S`] + 2 · dirty / D, D the
//! best page rate the device has shown: recovery is not paced by io_capacity, and the
//! limit learned under the policy's own small batches understates the device). The
//! pages per byte of age are measured now (dirty pages over checkpoint age) and capped
//! by the buffer pool ([`recovery_age_bound`]): past a pool that is all dirty, more
//! redo adds only apply time. The bound on the redo size is the largest age that
//! recovers within `recovery_time_budget`, over the sync point's share of the capacity.
//! `tests/recovery.rs` checks the prediction against a private MariaDB
//! killed with SIGKILL. Without a device rate and a dirty-page count, nothing grows.
//!
//! [`Flush::recovery_bound`]: super::Flush::recovery_bound

use std::time::Duration;

use super::{pct, Flush};
use crate::policy::{Intent, Policy, PolicyInput, Proposal};
use crate::signals::Signals;

/// Redo crash recovery scans and applies per second, bytes: the redo term of
/// [`recovery_time_s`]. Conservative on purpose; `tests/recovery.rs` measures the
/// whole model against a private MariaDB killed with SIGKILL and prints the numbers.
pub const REDO_APPLY_BYTES_PER_S: f64 = 20e6;

/// The seconds of users' redo a shrink back to the baseline is judged on: about how
/// long one takes to be adopted once started (the checkpoint must pass the LSN of its
/// SET, so every page dirty then is written first; run 113's h took 110 s under its
/// base load, tests/redo_resize.rs measures seconds on a quiet server).
pub const SHRINK_LANDING_S: f64 = 60.0;

/// Where a shrink back to `base` bytes started now would land, as a share of that
/// log's maximum checkpoint age: the redo users write in [`SHRINK_LANDING_S`] at the
/// window's rate. What a shrink costs is the users': it is adopted only with a
/// checkpoint past its LSN (`log_t::write_checkpoint()`), so every page dirty at its
/// start is written under them first, and what they write meanwhile is the age the
/// smaller log starts with. Even a light load stretches that: in the
/// hundred-and-fourteenth run's h a shrink sent under 0.29 MB/s (16 % of the 128 MiB
/// log's maximum a minute) had not been adopted 130 s later, the page cleaner wrote
/// about 500 pages/s toward it all that time, and the burst that came meanwhile ran
/// at half the rate of the arm that kept its log; on an idle server
/// (tests/redo_resize.rs) one was adopted in 14 s. Hence the shipped threshold,
/// `redo_shrink_fill_pct` 5 %: nearly idle. The grown log's own fill says
/// nothing about that (run 113's h sent a shrink at 9 % of its 926 MiB log under a
/// 0.7 MB/s base load, 39 % of the 128 MiB log's maximum a minute by this measure,
/// and it was adopted 110 s later at 88 %), and neither does the age alone: an idle
/// MariaDB keeps its checkpoint age for minutes (the page cleaner does not flush below
/// `innodb_max_dirty_pages_pct`), and a shrink then writes those pages while nobody
/// waits. `None` without an LSN rate or the redo geometry.
pub fn shrink_landing_fill(s: &Signals, base: u64) -> Option<f64> {
    let max = s.sample.redo.sync_point_at(base)?;
    let rate = s.lsn_rate.filter(|r| r.is_finite() && *r >= 0.0)?;
    Some(rate * SHRINK_LANDING_S / max)
}

/// Crash recovery time predicted for a checkpoint age of `age_bytes` with
/// `dirty_pages` dirty in the buffer pool, on a device that moves `device_pages_per_s`
/// pages a second (seconds).
///
/// Recovery must parse and apply every byte of redo since the last checkpoint
/// (`recv_sys_t::parse`/`apply`, log0recv.cc) and bring every page changed since up
/// to date: each is read once, and written back before the first checkpoint (the
/// dirty pages of the buffer pool at the crash are those pages). So: age at the apply
/// rate plus two page I/Os per dirty page at the device's rate. It is an upper
/// estimate: reads are often faster than the writes the device was limited to.
pub fn recovery_time_s(age_bytes: f64, dirty_pages: f64, device_pages_per_s: f64) -> f64 {
    age_bytes.max(0.0) / REDO_APPLY_BYTES_PER_S
        + 2.0 * dirty_pages.max(0.0) / device_pages_per_s.max(1.0)
}

/// The largest checkpoint age whose predicted recovery ([`recovery_time_s`]) fits in
/// `budget_s`, given the dirty pages one byte of age brings (`pages_per_byte`, as
/// measured now), capped at the buffer pool (`pool_pages`): once every page of the
/// pool is dirty, more redo adds only apply time. Bytes.
pub fn recovery_age_bound(
    budget_s: f64,
    pages_per_byte: f64,
    pool_pages: f64,
    device_pages_per_s: f64,
) -> f64 {
    let d = device_pages_per_s.max(1.0);
    let per_byte = 1.0 / REDO_APPLY_BYTES_PER_S + 2.0 * pages_per_byte.max(0.0) / d;
    let a1 = budget_s / per_byte;
    if pages_per_byte <= 0.0 || pages_per_byte * a1 <= pool_pages {
        return a1;
    }
    // The pool is all dirty before the budget is spent: the rest is apply time.
    let rest = budget_s - 2.0 * pool_pages / d;
    (rest * REDO_APPLY_BYTES_PER_S).max(pool_pages / pages_per_byte)
}

/// Why an armed redo grow is sent now, in the order the policy tests them. It decides
/// how the seconds the grow no longer waits are counted in its size, and the reason
/// text says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GrowSend {
    /// The fill is falling: the resize starts with the least to flush first.
    Lull,
    /// `redo_lull_wait` has passed with no lull.
    TimedOut,
    /// Users are held at the maximum: the server is flushing every older page anyway.
    Held,
    /// Armed by the log's span (`redo_min_span`): the maximum is seconds away.
    Span,
}

/// A fill trend at or below this (fraction of the sync point per second) is a lull.
/// Pinned at the maximum checkpoint age the trend is noise around 0 (the thirty-first
/// real-server run's h grew "in a lull" of −0.0 %/s at 100 % fill), and only a fill
/// that really falls has a smaller age to flush before the resize is adopted.
const LULL_TREND: f64 = -0.001;

/// The span rule (`redo_min_span`) arms only once the pressure episode has lasted this
/// long (ms): a rate that fills the log in a second or two and is gone the next is a
/// transient, not a demand the log must hold. The fiftieth real-server run's e: at the
/// load's start the redo rate was 44 MB/s for two seconds (then about 1 MB/s for the
/// rest of the run), the fill touched 99.9 % once, three seconds after reaching the
/// target, and the rule grew the 96 MiB log to 1 120 MiB; the defaults' fill peaked at
/// 73–87 % and fell back on its own. The bursts the rule exists for stay: g's and h's
/// fill is at or above the target 7–9 s before it reaches the maximum and then holds
/// there, i's saws between 88 and 100 % for the whole run.
const SPAN_SUSTAIN_MS: u64 = 5_000;

/// Whether a redo grow has been asked for and is not in effect yet: while a resize
/// runs, the controller shows the size asked for (so that no policy asks again) and
/// the sample the size the server still uses. A shrink never counts.
pub(super) fn grow_pending(input: &PolicyInput<'_>) -> bool {
    let knob = input.caps.redo_size_knob();
    match (input.current.get(&knob), input.signals.sample.redo.capacity) {
        (Some(&asked), Some(used)) => asked > used,
        _ => false,
    }
}

/// The redo capacity (bytes) that would have kept a pressure episode's age at
/// `target_share` of the sync point, given what was measured in it: the episode's
/// demand (`demand_bps`, the highest redo write rate seen from the tick before the
/// fill reached the target), how long the fill stayed at the maximum checkpoint age
/// (`held_s`) and the redo written meanwhile (`written`). At the maximum the age cannot
/// grow: the checkpoint paces the writes, and what users would have written beyond
/// that, `demand_bps · held_s − written`, is the age the episode lacked. With it the
/// peak age is the sync point plus that deficit; the capacity whose sync point holds
/// it at the target share is that over the share, scaled by the flavor's capacity per
/// byte of sync point (`capacity / sync_point`: MariaDB ≈ 1 / 0.8, MySQL ≈ 1 / 0.83).
///
/// It over-counts on purpose: the seconds the fill stays pinned after the load has
/// gone (the backlog being flushed) count at the demand rate too. The disk budget and
/// the recovery bound cap the result. `None` when the geometry is unknown.
pub fn redo_capacity_for(
    sync_point: f64,
    capacity: f64,
    demand_bps: f64,
    held_s: f64,
    written: f64,
    target_share: f64,
) -> Option<f64> {
    if !(sync_point > 0.0 && capacity > 0.0 && target_share > 0.0) {
        return None;
    }
    let deficit = (demand_bps.max(0.0) * held_s.max(0.0) - written.max(0.0)).max(0.0);
    let v = (sync_point + deficit) / target_share * (capacity / sync_point);
    v.is_finite().then_some(v)
}

/// What a pressure episode (fill at or above the target) has shown, for the size of
/// the redo grow.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Episode {
    /// The highest redo write rate seen, bytes/s, from the tick before the episode.
    demand_bps: f64,
    /// Seconds at or above `redo_grow_fill_pct` (the maximum checkpoint age) with the
    /// redo write rate known: what the size is computed over.
    held_s: f64,
    /// Redo written over those seconds, bytes.
    written: f64,
    /// Seconds at or above `redo_grow_fill_pct` in the episode, rate known or not:
    /// what arms the grow. The time after a tick at the maximum counts (so an unbroken
    /// stay counts from its first tick, as before).
    at_max_s: f64,
    /// Whether the last tick was at or above `redo_grow_fill_pct`.
    was_at_max: bool,
    /// The last tick counted (ms).
    t_ms: u64,
    /// The episode's first tick (ms).
    since_ms: u64,
}

impl Episode {
    /// Whether the fill has been at or above `redo_grow_fill_pct` at some tick of the
    /// episode.
    fn touched_max(&self) -> bool {
        self.was_at_max || self.at_max_s > 0.0
    }
}

impl Flush {
    /// The largest redo size the recovery-time budget allows, when measured: the age
    /// [`recovery_age_bound`] allows over the sync point's share of the capacity.
    pub fn recovery_bound(&self, s: &Signals) -> Option<u64> {
        // Recovery reads and writes pages with no io_capacity pacing, so the device's
        // rate here is the best it has shown (what tests/recovery.rs validates the
        // model with), not its limit under the knobs in effect: under the policy's own
        // small batch past the async point the limit says little about the device. In
        // the fourth real-server run's g the limit read 200 pages/s (learned in the
        // first second after the page cleaner woke), the bound allowed 128 → 134 MiB,
        // and the device wrote 600 pages/s a few seconds later.
        let dev = &self.state.device;
        let rate = match (dev.best, dev.limit) {
            (Some(b), Some(l)) => b.max(l),
            (b, l) => b.or(l)?,
        };
        let r = &s.sample.redo;
        let age = match r.checkpoint_age {
            Some(a) => a as f64,
            None => s.redo_fill? * r.sync_point? as f64,
        };
        if age <= 0.0 {
            return None;
        }
        let dirty = s.sample.dirty_pages? as f64;
        let pool = s
            .dirty_fraction
            .filter(|f| *f > 0.0 && f.is_finite())
            .map_or(f64::INFINITY, |f| dirty / f);
        let share = match (r.sync_point, r.capacity) {
            (Some(sp), Some(c)) if c > 0 && sp > 0 => sp as f64 / c as f64,
            _ => 0.8,
        };
        let bound = recovery_age_bound(
            self.cfg.recovery_time_budget.as_secs_f64(),
            dirty / age,
            pool,
            rate,
        ) / share;
        (bound.is_finite() && bound > 0.0).then(|| bound.min(u64::MAX as f64 / 2.0) as u64)
    }

    /// How many seconds of the pressure episode's demand (its highest redo write rate)
    /// the log holds before the maximum checkpoint age: the sync point over the demand.
    fn span_s(&self, s: &Signals) -> Option<f64> {
        let sp = s.sample.redo.sync_point? as f64;
        let d = self.state.episode?.demand_bps;
        (d > 0.0 && sp > 0.0).then(|| sp / d)
    }

    pub(super) fn redo_size(
        &mut self,
        input: &PolicyInput<'_>,
        fill: f64,
        trend: f64,
        at_ceiling: bool,
    ) -> Vec<Proposal> {
        let s = input.signals;
        let t = s.t_ms;
        let grow = self.cfg.redo_grow_fill_pct / 100.0;
        // The episode's measurements, for the size of the grow.
        let target = self.cfg.target_fill_pct / 100.0;
        let lsn = s.lsn_rate.filter(|r| r.is_finite() && *r >= 0.0);
        // Flushing raised for a burst slows its writers before the fill reaches the
        // target (the forty-eighth real-server run's g: 7.3 MB/s in the burst's first
        // second, 2.6–4.2 MB/s at the target), and an episode measured from there took
        // the log for one that spans 26 s, not 15: the span rule did not arm, and the
        // grow went 20 s at the maximum later, once users were held.
        let recent = self
            .state
            .lsn_recent
            .iter()
            .map(|&(_, r)| r)
            .fold(0.0f64, f64::max);
        if fill >= target {
            let e = self.state.episode.get_or_insert(Episode {
                demand_bps: recent,
                t_ms: t,
                since_ms: t,
                ..Episode::default()
            });
            let dt = t.saturating_sub(e.t_ms) as f64 / 1000.0;
            e.t_ms = t;
            if e.was_at_max {
                e.at_max_s += dt;
            }
            e.was_at_max = fill >= grow;
            if let Some(r) = lsn {
                e.demand_bps = e.demand_bps.max(r);
                if fill >= grow {
                    e.held_s += dt;
                    e.written += r * dt;
                }
            }
        } else {
            self.state.episode = None;
        }
        let window_ms = self.cfg.redo_min_span.as_millis().max(1_000) as u64;
        self.state
            .lsn_recent
            .retain(|&(at, _)| at + window_ms > t && at <= t);
        if let Some(r) = lsn {
            self.state.lsn_recent.push_back((t, r));
        }
        let held = |since: Option<u64>| since.map_or(0, |x| t.saturating_sub(x));
        // One grow per episode. A grow sent while users are held takes effect only at
        // the checkpoint that ends the stall, and until then the fill stays at the
        // maximum: re-armed on it, the policy asked a second, larger grow 20 s later,
        // which only the 10 min dwell refused (the thirty-fourth real-server run's h).
        // The episode ends when the fill falls under the target — which the larger
        // file brings — and the grow is void when the size in effect is still the one
        // it started from (refused, abandoned, or set back by someone else); then the
        // next grow is measured afresh. (While a resize runs, the size in effect is the
        // one asked for: the controller shows it so that no policy asks again.)
        let knob = input.caps.redo_size_knob();
        let in_effect = input.current.get(&knob).copied();
        if let Some(from) = self.state.grown_from {
            if fill < target || in_effect.is_none_or(|c| c <= from) {
                self.state.grown_from = None;
            }
        }
        // Time at the maximum counts over the whole pressure episode, not only while it
        // lasts unbroken: a redo too small for the steady load keeps the fill between
        // the async point and the maximum, where MariaDB's flush-ahead pulls it back
        // under 95 % every few seconds (the forty-first real-server run's i: 88–100 %
        // for the whole run, 65–75 s of 150 at the maximum, and no grow, because no
        // stay lasted 20 s). An unbroken stay counts the same, because
        // `redo_grow_fill_pct` exceeds the target (validated): the episode has begun by
        // the stay's first tick. One grow per episode: not while one is in effect.
        let at_max_ms = match (self.state.grown_from, self.state.episode) {
            (None, Some(e)) => (e.at_max_s * 1000.0) as u64,
            _ => 0,
        };
        // A log that holds less than `redo_min_span` of the users' write rate is too
        // small whatever the wait: at that rate it fills in seconds, so each second of
        // the wait is a second users spend throttled at the maximum (the
        // forty-second real-server run's i: 32 MiB against about 25 MB/s, a span of
        // about 1 s; the grow came 51–65 s in, and those seconds at 32 MiB were all
        // of the gap to a static 256 MiB). It arms at once, once the episode has lasted
        // `SPAN_SUSTAIN_MS`: at a tick at the maximum, or at any tick once the fill has
        // touched the maximum in the episode while the users' rate now still spans
        // less than `redo_min_span`. The fill saws under a log that small (MariaDB's
        // flush-ahead pulls it back under 95 % every few seconds), and waiting for a
        // tick at the maximum after the 5 s put the grow 11–20 s in (the sixty-fourth
        // run's i, fill 88–100 %; the forty-sixth, before `SPAN_SUSTAIN_MS`, 2–7 s). The
        // rate now tells a sawtooth from e's start-up transient, whose 44 MB/s were
        // gone (about 1 MB/s, a span of 80 s) by the time the episode had lasted 5 s.
        // Held at the maximum the rate is the held one, not the users': there the tick
        // at the maximum arms it, as before.
        let span_s = self.span_s(s);
        let min_span = self.cfg.redo_min_span.as_secs_f64();
        let sustained = self
            .state
            .episode
            .is_some_and(|e| t.saturating_sub(e.since_ms) >= SPAN_SUSTAIN_MS);
        let sawing = self.state.episode.is_some_and(|e| e.touched_max())
            && lsn
                .zip(s.sample.redo.sync_point)
                .is_some_and(|(r, sp)| r > 0.0 && (sp as f64) / r < min_span);
        let short = self.state.grown_from.is_none()
            && (fill >= grow || sawing)
            && sustained
            && span_s.is_some_and(|x| x < min_span);
        let long_enough = at_max_ms >= self.cfg.redo_grow_after.as_millis() as u64;
        if (long_enough || short) && at_ceiling && self.state.armed_at.is_none() {
            self.state.armed_at = Some(t);
            self.state.armed_span_s = if long_enough { None } else { span_s };
        }
        // Pressure over: nothing to grow for.
        if fill < self.cfg.target_fill_pct / 100.0 {
            self.state.armed_at = None;
        }
        if !self.cfg.redo_resize {
            return Vec::new();
        }
        if !input.caps.settable(knob) {
            return Vec::new();
        }
        let (Some(&cur), Some(&base)) = (input.current.get(&knob), input.baseline.get(&knob))
        else {
            return Vec::new();
        };
        // Quiet is judged against the baseline log, by what users write
        // ([`shrink_landing_fill`]), not by the grown log's fill.
        let shrink = self.cfg.redo_shrink_fill_pct / 100.0;
        let landing = shrink_landing_fill(s, base);
        self.state.low_since = if landing.is_some_and(|f| f < shrink) {
            Some(self.state.low_since.unwrap_or(t))
        } else {
            None
        };
        let mib = |b: u64| format!("{} MiB", b >> 20);
        if let Some(armed) = self.state.armed_at {
            let waited = t.saturating_sub(armed);
            let timed_out = waited >= self.cfg.redo_lull_wait.as_millis() as u64;
            // Users held at the maximum: the server is flushing every page older than
            // now already, and the larger file is adopted at the first checkpoint past
            // the SET's LSN, which the end of the stall brings. Later is worse: the
            // thirty-second real-server run's h sent it as the stall ended (the lull
            // wait) and the checkpoint, having jumped to just before that LSN, then
            // crept under the base load for 84 s, into the next burst.
            let pinned = s.users_held == Some(true);
            // Armed by the log's span it goes at once, before users are held: at that
            // span the fill reaches the maximum within seconds whatever the wait, and
            // every second of a wait is a second at the old size (the forty-sixth
            // real-server run's i: sent 2–3 s in and adopted by 5 s, 1.003 × a static
            // redo 8 × larger; waiting for a lull it went 15–20 s in). On a throttled
            // device in a burst it changes little: adoption waits for every page first
            // dirtied before the SET's LSN, most of the burst's, and the forty-seventh
            // run's g adopted it 6–8 s after the stall sent before users were held,
            // as the forty-fifth's did sent 1–3 s into the stall.
            let span_armed = self.state.armed_span_s.is_some();
            let send = if trend <= LULL_TREND {
                Some(GrowSend::Lull)
            } else if timed_out {
                Some(GrowSend::TimedOut)
            } else if pinned {
                Some(GrowSend::Held)
            } else if span_armed {
                Some(GrowSend::Span)
            } else {
                None
            };
            if let Some(send) = send {
                let bound = self.recovery_bound(s);
                let limit = bound.map_or(0, |b| b.min(self.cfg.redo_max_bytes));
                let r = &s.sample.redo;
                let episode = self.state.episode.unwrap_or_default();
                // Sent at once while users are held, the episode is not over: it counts
                // as lasting the lull wait it no longer waits, at the rates measured so
                // far, so it is sized as the wait would have sized it, only sooner (the
                // thirty-third real-server run's h: sized on its first 22 s at the
                // maximum it asked 544 MiB, and the next burst filled that).
                // Armed by the log's span, before `redo_grow_after` at the maximum had
                // added up, the wait it skips includes those seconds: counted as the
                // wait would have counted it, the grow in h's first burst is as large
                // as before the span rule, and its second burst needs that size. (Armed
                // by the wait, those seconds have added up: nothing.) Sent by the span
                // before users are held, the same: the stall is seconds away.
                let extra_s = if matches!(send, GrowSend::Held | GrowSend::Span) {
                    let unwaited =
                        (self.cfg.redo_grow_after.as_secs_f64() - episode.at_max_s).max(0.0);
                    self.cfg
                        .redo_lull_wait
                        .saturating_sub(Duration::from_millis(waited))
                        .as_secs_f64()
                        + unwaited
                } else {
                    0.0
                };
                // Held, the seconds measured are at the held write rate, which the
                // skipped ones go on at. Not yet held, they were at the users' rate,
                // which the stall ends: the skipped seconds count at the held rate,
                // taken as nothing (g's users wrote 0.3–2.1 MB/s held against the
                // 11–22 MB/s they asked).
                let (held_s, written) = if send == GrowSend::Held && episode.held_s > 0.0 {
                    let h = episode.held_s + extra_s;
                    (h, episode.written * h / episode.held_s)
                } else {
                    (episode.held_s + extra_s, episode.written)
                };
                // The knob in effect is the capacity (the SET returns only once the
                // server has adopted the new file).
                let need = match r.sync_point {
                    Some(sp) => redo_capacity_for(
                        sp as f64,
                        cur as f64,
                        episode.demand_bps,
                        held_s,
                        written,
                        target,
                    ),
                    _ => None,
                };
                // At least the capacity whose sync point spans `redo_min_span` of the
                // episode's demand.
                let span_cap = match r.sync_point {
                    Some(sp) if sp > 0 => {
                        episode.demand_bps.max(0.0)
                            * self.cfg.redo_min_span.as_secs_f64()
                            * (cur as f64 / sp as f64)
                    }
                    _ => 0.0,
                };
                let want = need
                    .unwrap_or(0.0)
                    .max(span_cap)
                    .max(cur as f64 * 2.0)
                    .min((u64::MAX >> 2) as f64) as u64;
                // Whole MiB: both servers want the size in whole blocks.
                let v = (want.min(limit) >> 20) << 20;
                // A recovery bound that allows less than a doubling where the episode
                // wants more rests on a device seen for a second or two: the best rate
                // is what the page cleaner was asked, not yet what the device can do,
                // and one grow per episode would keep that size (the forty-fifth
                // real-server run's g, repetition 3: armed 1 s after the page cleaner
                // woke, the bound allowed 128 → 131 MiB against 992 wanted; 29 s at the
                // maximum followed). The grow stays armed while the device shows
                // more, at most `redo_lull_wait`.
                let unmeasured = bound.is_some_and(|b| b < want && b < cur.saturating_mul(2));
                if unmeasured && !timed_out {
                    return Vec::new();
                }
                if let (Some(b), true) = (bound, v > cur) {
                    self.state.armed_at = None;
                    let armed_span_s = self.state.armed_span_s.take();
                    self.state.grown_from = Some(cur);
                    // The next episode is measured afresh; the demand seen stays.
                    self.state.episode = Some(Episode {
                        demand_bps: episode.demand_bps,
                        t_ms: t,
                        ..Episode::default()
                    });
                    let counted = if extra_s > 0.0 {
                        format!(", counted as {held_s:.0} s (the wait it skips)")
                    } else {
                        String::new()
                    };
                    let min_span = humantime::format_duration(self.cfg.redo_min_span);
                    let sized = match need {
                        _ if span_cap > cur as f64 * 2.0 && span_cap >= need.unwrap_or(0.0) => {
                            format!(
                                "{} holds {min_span} of the users' {:.1} MB/s of redo before \
                                 the maximum checkpoint age",
                                mib(span_cap as u64),
                                episode.demand_bps / 1e6
                            )
                        }
                        Some(n) if n > cur as f64 * 2.0 && episode.held_s > 0.0 => format!(
                            "users asked {:.1} MB/s of redo and wrote {:.1} MB/s over {:.0} s at \
                             the maximum{counted}: {} holds that episode under the target {} %",
                            episode.demand_bps / 1e6,
                            episode.written / episode.held_s / 1e6,
                            episode.held_s,
                            mib(n as u64),
                            self.cfg.target_fill_pct
                        ),
                        _ => "double the size (the episode's measured need is no more)".into(),
                    };
                    let when = match send {
                        GrowSend::Held => "users are held at the maximum checkpoint age, where \
                                           the server flushes every older page anyway: the \
                                           larger file comes with the checkpoint that ends \
                                           the stall"
                            .to_string(),
                        GrowSend::Lull => format!("the fill is falling ({}/s): a lull", pct(trend)),
                        GrowSend::Span => "at that span the fill reaches the maximum within \
                                           seconds: sent before users are held, as every \
                                           second of a wait would be one at the old size"
                            .to_string(),
                        GrowSend::TimedOut => format!(
                            "no lull came within {}",
                            humantime::format_duration(self.cfg.redo_lull_wait)
                        ),
                    };
                    let why = match armed_span_s {
                        Some(x) => format!(
                            "redo fill reached {} % with the log holding only {x:.1} s of the \
                             users' {:.1} MB/s of redo (under redo_min_span {min_span}: too \
                             small whatever the wait)",
                            self.cfg.redo_grow_fill_pct,
                            episode.demand_bps / 1e6
                        ),
                        None => format!(
                            "redo fill was at or above {} % for {} of this pressure episode",
                            self.cfg.redo_grow_fill_pct,
                            humantime::format_duration(self.cfg.redo_grow_after)
                        ),
                    };
                    let reason = format!(
                        "{why} with flushing at the most this policy asks (the device's limit, \
                         or past the async point, where io_capacity_max is the batch size and \
                         is never raised), and {when}; redo fill now {}: more redo headroom, \
                         {knob} {} → {}; {sized} (disk budget {}, recovery budget {} allows {})",
                        pct(fill),
                        mib(cur),
                        mib(v),
                        mib(self.cfg.redo_max_bytes),
                        humantime::format_duration(self.cfg.recovery_time_budget),
                        mib(b)
                    );
                    return vec![self.propose(knob, v, Intent::Act, reason)];
                }
            }
        }
        let low_ms = held(self.state.low_since);
        if self.cfg.redo_shrink
            && cur != base
            && low_ms >= self.cfg.redo_shrink_after.as_millis() as u64
        {
            let reason = format!(
                "users have written less than {} % of the baseline log's maximum checkpoint \
                 age a minute for {} ({} now; redo fill {}): quiet time, {knob} back to its \
                 baseline {}",
                self.cfg.redo_shrink_fill_pct,
                humantime::format_duration(Duration::from_millis(low_ms)),
                pct(landing.unwrap_or(0.0)),
                pct(fill),
                mib(base)
            );
            return vec![self.propose(knob, base, Intent::Release, reason)];
        }
        if cur != base {
            let until = if self.cfg.redo_shrink {
                "until quiet"
            } else {
                "until innopilot exits"
            };
            let reason = format!(
                "redo fill {}: {knob} holds at {} (baseline {}, back to it {until})",
                pct(fill),
                mib(cur),
                mib(base)
            );
            return vec![self.propose(knob, cur, Intent::Act, reason)];
        }
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{baseline, decide, held, signals, with, with_lsn, MIB};
    use super::super::FlushConfig;
    use super::*;
    use crate::policy::testkit::{self, find};
    use crate::server::{Capabilities, Knob, KnobValues};
    use proptest::prelude::*;

    #[test]
    fn recovery_model() {
        // 100 MB of redo and 10 000 dirty pages at 1 000 pages/s: 5 s + 20 s.
        assert_eq!(recovery_time_s(100e6, 10_000.0, 1_000.0), 25.0);
        // The bound inverts it while the pool is not all dirty …
        let pi = 10_000.0 / 100e6;
        let a = recovery_age_bound(25.0, pi, 1e9, 1_000.0);
        assert!((a - 100e6).abs() < 1.0, "{a}");
        // … and past a 20 000-page pool (40 s of page I/O) only apply time is added.
        let a = recovery_age_bound(100.0, pi, 20_000.0, 1_000.0);
        assert!((a - 60.0 * REDO_APPLY_BYTES_PER_S).abs() < 1.0, "{a}");
        // Continuous where the pool fills: at 200 MB, 20 000 pages, 10 + 40 s.
        let a = recovery_age_bound(50.0, pi, 20_000.0, 1_000.0);
        assert!((a - 200e6).abs() < 1.0, "{a}");

        let mut f = Flush::new(FlushConfig::default());
        assert_eq!(f.recovery_bound(&signals(1, 0.5, 0.0, 2_000.0)), None);
        decide(
            &mut f,
            &testkit::mariadb(),
            &baseline(),
            &signals(1, 0.5, 0.0, 2_000.0),
        );
        // Age 40 MiB with 20 000 dirty pages of 40 000, 2 000 pages/s, 300 s: the pool
        // fills at 80 MiB (40 s of page I/O), the other 260 s apply 5.2 GB of redo;
        // over 0.8 of the capacity, 6.5 GB.
        assert_eq!(
            f.recovery_bound(&signals(2, 0.5, 0.0, 2_000.0)),
            Some(6_500_000_000)
        );
        // A limit learned under a small batch does not shrink the bound: the best rate
        // shown counts.
        f.state.device.limit = Some(200.0);
        assert_eq!(
            f.recovery_bound(&signals(3, 0.5, 0.0, 2_000.0)),
            Some(6_500_000_000)
        );
        f.state.device.best = Some(100.0);
        assert!(f.recovery_bound(&signals(3, 0.5, 0.0, 2_000.0)).unwrap() < 6_500_000_000);
    }

    fn resize_config() -> FlushConfig {
        FlushConfig {
            redo_resize: true,
            ..FlushConfig::default()
        }
    }

    /// Runs `ticks` through `f` until the first that asks a redo size other than the
    /// one `cur` holds in effect (above its baseline the size in effect is held every
    /// tick): that tick's second and the proposal. Ticks after it are not decided.
    fn first_grow(
        f: &mut Flush,
        caps: &Capabilities,
        cur: &KnobValues,
        ticks: impl IntoIterator<Item = Signals>,
    ) -> Option<(u64, Proposal)> {
        ticks.into_iter().find_map(|s| {
            find(&decide(f, caps, cur, &s), Knob::LogFileSize)
                .filter(|p| Some(&p.value) != cur.get(&Knob::LogFileSize))
                .map(|p| (s.t_ms / 1000, p.clone()))
        })
    }

    /// At the maximum checkpoint age (≥ 95 %) for 20 s with the device the limit, the
    /// grow is armed; with no lull it goes ahead 30 s later.
    #[test]
    fn redo_grows_after_a_short_stay_at_the_maximum() {
        let caps = testkit::mariadb();
        let mut f = Flush::new(resize_config());
        let cur = with(Knob::IoCapacityMax, 4000);
        let ticks = (0..=120).map(|t| signals(t, 0.97, 0.0, 2_000.0));
        let (t, p) = first_grow(&mut f, &caps, &cur, ticks).expect("a redo resize");
        assert_eq!(t, 50, "{}", p.reason);
        assert_eq!(
            (p.value, p.intent),
            (128 << 20, Intent::Act),
            "{}",
            p.reason
        );
        assert!(p.reason.contains("64 MiB → 128 MiB"), "{}", p.reason);
        assert!(p.reason.contains("no lull came within 30s"), "{}", p.reason);
    }

    /// The grow is sized to the episode: users wrote 16 MB/s until the fill reached
    /// the maximum, then 2 MB/s while held there, so the log lacked 14 MB/s of age for
    /// every second at the maximum; doubling would hold about 4 s of that.
    #[test]
    fn redo_grows_to_the_episode_it_measured() {
        let caps = testkit::mariadb();
        // The wait's sizing alone: the log spans 5 s of the demand, which
        // `redo_min_span` would arm at once (`a_log_spanning_seconds_grows_at_the_first_touch`).
        let no_span = || FlushConfig {
            redo_min_span: Duration::ZERO,
            ..resize_config()
        };
        let mut f = Flush::new(no_span());
        let mut cur = with(Knob::IoCapacityMax, 4000);
        cur.insert(Knob::LogFileSize, 100 << 20);
        let at = |t: u64, fill: f64, trend: f64, lsn: f64| {
            with_lsn(signals(t, fill, trend, 2_000.0), lsn)
        };
        // The burst: under the target, then past it, at 16 MB/s.
        for (t, fill) in [(0, 0.30), (1, 0.50), (2, 0.70), (3, 0.85)] {
            decide(&mut f, &caps, &cur, &at(t, fill, 0.2, 16e6));
        }
        let ticks = (4..=60).map(|t| at(t, 0.99, 0.0, 2e6));
        let (t, p) = first_grow(&mut f, &caps, &cur, ticks).expect("a redo resize");
        // Armed at 24 s (20 s at the maximum), no lull: 30 s later.
        assert_eq!(t, 54, "{}", p.reason);
        // 51 s held: (80 MiB + (16 − 2) MB/s × 51 s) / 0.75 × 100 / 80.
        let need =
            redo_capacity_for(80.0 * MIB, 100.0 * MIB, 16e6, 51.0, 2e6 * 51.0, 0.75).unwrap();
        assert!((need / MIB - 1268.2).abs() < 1.0, "{need}");
        assert_eq!(p.value, (need as u64 >> 20) << 20, "{}", p.reason);
        assert!(
            p.reason
                .contains("users asked 16.0 MB/s of redo and wrote 2.0 MB/s over 51 s"),
            "{}",
            p.reason
        );
        // The disk budget caps it.
        let mut f = Flush::new(FlushConfig {
            redo_max_bytes: 512 << 20,
            ..resize_config()
        });
        for (t, fill) in [(0, 0.30), (1, 0.50), (2, 0.70), (3, 0.85)] {
            decide(&mut f, &caps, &cur, &at(t, fill, 0.2, 16e6));
        }
        let ticks = (4..=60).map(|t| at(t, 0.99, 0.0, 2e6));
        let (_, p) = first_grow(&mut f, &caps, &cur, ticks).expect("a redo resize");
        assert_eq!(p.value, 512 << 20);
    }

    /// With users held at the maximum the grow goes ahead as soon as it is armed: the
    /// larger file comes with the checkpoint that ends the stall.
    #[test]
    fn redo_grows_at_once_while_users_are_held() {
        let caps = testkit::mariadb();
        let mut f = Flush::new(resize_config());
        let cur = with(Knob::IoCapacityMax, 4000);
        let ticks = (0..=60).map(|t| held(t, 1.0, 0.0, 2_000.0));
        let (t, p) = first_grow(&mut f, &caps, &cur, ticks).expect("a redo resize");
        assert_eq!(t, 20, "{}", p.reason);
        assert!(p.reason.contains("users are held"), "{}", p.reason);
        // Sized as the 30 s lull wait would have sized it: 21 s held so far (from the
        // tick that reached the maximum), counted as 51 s. Users asked 16 MB/s before the wall and write 2 MB/s at it.
        // (The wait's rule alone: that log spans 5 s of the demand.)
        let mut f = Flush::new(FlushConfig {
            redo_min_span: Duration::ZERO,
            ..resize_config()
        });
        let mut cur = with(Knob::IoCapacityMax, 4000);
        cur.insert(Knob::LogFileSize, 100 << 20);
        let at = |t: u64, fill: f64, lsn: f64| with_lsn(held(t, fill, 0.0, 2_000.0), lsn);
        for (t, fill) in [(0, 0.30), (1, 0.50), (2, 0.70), (3, 0.85)] {
            decide(&mut f, &caps, &cur, &at(t, fill, 16e6));
        }
        let ticks = (4..=60).map(|t| at(t, 1.0, 2e6));
        let (_, p) = first_grow(&mut f, &caps, &cur, ticks).expect("a redo resize");
        let need =
            redo_capacity_for(80.0 * MIB, 100.0 * MIB, 16e6, 51.0, 2e6 * 51.0, 0.75).unwrap();
        assert_eq!(p.value, (need as u64 >> 20) << 20, "{}", p.reason);
        assert!(
            p.reason
                .contains("over 21 s at the maximum, counted as 51 s"),
            "{}",
            p.reason
        );
        // With the span rule (that log spans 5 s of the 16 MB/s): sent at the first tick
        // at the maximum once the episode (from 3 s, 85 %) has lasted 5 s, and counted
        // as the wait would have counted it (the 20 s to arm and the 30 s lull wait),
        // so the same size, 16 s sooner.
        let mut f = Flush::new(resize_config());
        for (t, fill) in [(0, 0.30), (1, 0.50), (2, 0.70), (3, 0.85)] {
            decide(&mut f, &caps, &cur, &at(t, fill, 16e6));
        }
        let ticks = (4..=60).map(|t| at(t, 1.0, 2e6));
        let (t, q) = first_grow(&mut f, &caps, &cur, ticks).expect("a redo resize");
        assert_eq!((t, q.value), (8, p.value), "{}", q.reason);
        assert!(
            q.reason
                .contains("over 5 s at the maximum, counted as 51 s"),
            "{}",
            q.reason
        );
    }

    /// One grow per episode: while the grow sent with users held waits for the
    /// checkpoint that ends the stall, the fill stays at the maximum, and no second
    /// grow is asked on it; once the fill has fallen under the target, the next episode
    /// may grow again. A grow that did not happen (the size in effect is still the old
    /// one) does not count.
    #[test]
    fn one_redo_grow_per_episode() {
        let caps = testkit::mariadb();
        let mut f = Flush::new(resize_config());
        let mut cur = with(Knob::IoCapacityMax, 4000);
        let grows = |f: &mut Flush, cur: &KnobValues, ts: std::ops::RangeInclusive<u64>, fill| {
            ts.filter_map(|t| {
                find(
                    &decide(f, &caps, cur, &held(t, fill, 0.0, 2_000.0)),
                    Knob::LogFileSize,
                )
                .filter(|p| Some(&p.value) != cur.get(&Knob::LogFileSize))
                .map(|p| {
                    assert!(p.value > cur[&Knob::LogFileSize], "{}", p.reason);
                    (t, p.value)
                })
            })
            .collect::<Vec<_>>()
        };
        let at = |g: Vec<(u64, u64)>| g.iter().map(|x| x.0).collect::<Vec<_>>();
        let first = grows(&mut f, &cur, 0..=20, 1.0);
        assert_eq!(at(first.clone()), vec![20]);
        // Under way: the controller shows the size asked for. The stall goes on for
        // two more minutes and nothing more is asked.
        cur.insert(Knob::LogFileSize, first[0].1);
        assert_eq!(grows(&mut f, &cur, 21..=140, 1.0), vec![]);
        // The stall ends; a new episode 20 s at the maximum grows again.
        assert_eq!(grows(&mut f, &cur, 141..=150, 0.3), vec![]);
        assert_eq!(at(grows(&mut f, &cur, 151..=171, 1.0)), vec![171]);
        // A grow that did not take (the old size still in effect) is asked again on
        // the same episode, once re-armed.
        let mut f = Flush::new(resize_config());
        let cur = with(Knob::IoCapacityMax, 4000);
        assert_eq!(at(grows(&mut f, &cur, 0..=20, 1.0)), vec![20]);
        assert_eq!(at(grows(&mut f, &cur, 21..=41, 1.0)), vec![41]);
    }

    /// A redo too small for the steady load: the fill saws between the async point and
    /// the maximum (MariaDB's flush-ahead pulls it back every few seconds), users are
    /// throttled but never collapse, the device is not the limit and io_capacity_max
    /// stays at its baseline (past the async point it is the batch size, never raised).
    /// The seconds at the maximum add up over the episode and arm the grow (the
    /// forty-first real-server run's i grew nothing in 150 s when only an unbroken
    /// 20 s stay counted).
    #[test]
    fn a_fill_sawing_at_the_maximum_grows_the_redo() {
        let caps = testkit::mariadb();
        let mut f = Flush::new(resize_config());
        let cur = baseline();
        // 3 s at 97-100 %, 2 s back at 89 %: 60 % of the time at the maximum.
        let fill = |t: u64| if t % 5 < 3 { 0.98 } else { 0.89 };
        let trend = |t: u64| if t % 5 == 3 { -0.09 } else { 0.03 };
        let ticks = (0..=90).map(|t| signals(t, fill(t), trend(t), 2_000.0));
        let (t, p) = first_grow(&mut f, &caps, &cur, ticks).expect("a redo grow");
        // 20 s at the maximum take about 34 s of the sawtooth; the first lull after
        // that sends it.
        assert!((30..=45).contains(&t), "t={t}: {}", p.reason);
        assert!(p.value >= 128 << 20, "{}", p.reason);
        assert!(
            p.reason.contains("of this pressure episode"),
            "{}",
            p.reason
        );

        // The same sawtooth under the async point (the fill's peaks at 86 %) never
        // reaches the maximum: nothing to grow for.
        let mut f = Flush::new(resize_config());
        for t in 0..=120 {
            let fill = if t % 5 < 3 { 0.86 } else { 0.80 };
            let ps = decide(&mut f, &caps, &cur, &signals(t, fill, 0.0, 2_000.0));
            assert!(find(&ps, Knob::LogFileSize).is_none(), "t={t}");
        }
    }

    /// [`baseline`] with the redo at 100 MiB, as [`signals`]' geometry says (sync point
    /// 80 MiB).
    fn at_100_mib() -> KnobValues {
        let mut cur = baseline();
        cur.insert(Knob::LogFileSize, 100 << 20);
        cur
    }

    /// The span counts the burst's own first seconds, before the fill reached the
    /// target: flushing raised for the burst slows its writers by then (the
    /// forty-eighth real-server run's g: 7.3 MB/s in the first second, 2.6–4.2 MB/s at
    /// the target, so the span rule did not arm on the rates of the episode alone).
    /// It arms at the first tick at the maximum once the episode (the fill at or above
    /// the target) has lasted `SPAN_SUSTAIN_MS`: reached at 3 s, so 8 s.
    #[test]
    fn the_span_counts_the_bursts_first_seconds() {
        let caps = testkit::mariadb();
        let cur = at_100_mib();
        let at = |t: u64, fill: f64, lsn: f64| with_lsn(signals(t, fill, 0.05, 2_000.0), lsn);
        // 6 MB/s against a sync point of 80 MiB: 14 s; then 3 MB/s: 28 s.
        let run = |first: f64| {
            let mut f = Flush::new(resize_config());
            let ticks = (0..=9).map(|t| {
                let fill = [0.2, 0.35, 0.5, 0.8, 0.9, 0.97, 0.98, 0.99, 0.99, 0.99][t as usize];
                at(t, fill, if t == 1 { first } else { 3e6 })
            });
            first_grow(&mut f, &caps, &cur, ticks).map(|(t, p)| (t, p.reason))
        };
        let (t, reason) = run(6e6).expect("a grow armed by the span");
        assert_eq!(t, 8, "5 s after the fill reached the target: {reason}");
        assert!(reason.contains("of the users' 6.0 MB/s"), "{reason}");
        assert_eq!(run(3e6), None, "28 s of the demand waits for its 20 s");
    }

    /// A log that spans a second or two of the users' write rate is too small whatever
    /// the wait: at the first tick at the maximum with flushing at the most (past the
    /// async point), once the episode has lasted `SPAN_SUSTAIN_MS`, the grow is armed
    /// and sent at once, before users are held (the forty-second real-server run's i:
    /// 32 MiB against about 25 MB/s, the fill sawing between 88 and 100 %; the
    /// forty-fifth's g: sent once users were held, adopted 10 s after the stall), sized
    /// as the wait would have sized it. A log spanning more waits for its 20 s as before.
    #[test]
    fn a_log_spanning_seconds_grows_at_the_first_touch() {
        let caps = testkit::mariadb();
        let cur = at_100_mib();
        let at = |t: u64, fill: f64, trend: f64, lsn: f64| {
            with_lsn(signals(t, fill, trend, 2_000.0), lsn)
        };
        // 25 MB/s against a sync point of 80 MiB: 3.4 s. The fill climbs to 97 % (the
        // target at 1 s), then saws between 93 and 98 %.
        let climb = |t: u64, lsn: f64| {
            let fill = match t {
                0..=4 => [0.5, 0.8, 0.9, 0.97, 0.98][t as usize],
                _ if t % 2 == 1 => 0.93,
                _ => 0.98,
            };
            at(t, fill, if fill < 0.95 { -0.05 } else { 0.05 }, lsn)
        };
        let mut f = Flush::new(resize_config());
        let ticks = (0..=30).map(|t| climb(t, 25e6));
        let (t, p) = first_grow(&mut f, &caps, &cur, ticks).expect("a redo grow");
        assert_eq!(t, 6, "the first tick at the maximum 5 s in: {}", p.reason);
        // Three seconds at the maximum measured (75 MB written; two of them count for
        // the arming wait), and the 48 s the wait would have added (the 18 s left of
        // 20 to arm, 30 s for a lull) at the held rate, nothing: a deficit of
        // 25 MB/s × 51 s − 75 MB; (80 MiB + deficit) / 0.75 of sync point, × 100 / 80
        // of capacity; within the recovery bound, in whole MiB.
        let need = (f64::from(80u32 << 20) + 25e6 * 51.0 - 75e6) / 0.75 * 1.25;
        let bound = f.recovery_bound(&at(6, 0.98, 0.05, 25e6)).expect("a bound");
        assert!(need > 596.0 * 1_048_576.0, "more than 20 s of the demand");
        assert_eq!(
            p.value,
            ((need as u64).min(bound) >> 20) << 20,
            "{}",
            p.reason
        );
        assert!(
            p.reason
                .contains("holding only 3.4 s of the users' 25.0 MB/s"),
            "{}",
            p.reason
        );
        assert!(p.reason.contains("counted as 51 s"), "{}", p.reason);
        assert!(
            p.reason.contains("sent before users are held"),
            "{}",
            p.reason
        );

        // 2 MB/s against the same log: 42 s. The same climb and sawtooth waits for
        // 20 s at the maximum.
        let mut f = Flush::new(resize_config());
        let ticks = (0..=12).map(|t| climb(t, 2e6));
        assert_eq!(first_grow(&mut f, &caps, &cur, ticks), None);
        // Off: the 3.4 s log waits too.
        let mut f = Flush::new(FlushConfig {
            redo_min_span: Duration::ZERO,
            ..resize_config()
        });
        let ticks = (0..=12).map(|t| climb(t, 25e6));
        assert_eq!(first_grow(&mut f, &caps, &cur, ticks), None);
    }

    /// Under a log that spans seconds the fill saws: MariaDB's flush-ahead pulls it
    /// back under the maximum every few seconds, so 5 s into the episode the tick is
    /// as likely under 95 % as at it (the sixty-fourth real-server run's i: 97 % as the
    /// episode began, then 88–95 %, the grow 11–20 s in). Once the fill has touched the
    /// maximum in the episode and the users' rate still spans seconds, the grow arms
    /// at the first tick 5 s in, wherever the fill is in its saw.
    #[test]
    fn a_sawing_fill_grows_once_the_episode_has_lasted() {
        let caps = testkit::mariadb();
        let cur = at_100_mib();
        let fills = [
            0.5, 0.97, 0.96, 0.92, 0.90, 0.88, 0.945, 0.92, 0.88, 0.93, 0.91,
        ];
        let ticks = (0..=10).map(|t| {
            let lsn = if t % 3 == 0 { 9e6 } else { 14e6 };
            with_lsn(signals(t, fills[t as usize], 0.0, 2_000.0), lsn)
        });
        let mut f = Flush::new(resize_config());
        let (t, p) = first_grow(&mut f, &caps, &cur, ticks).expect("a redo grow");
        assert_eq!(t, 6, "5 s after the fill reached the target: {}", p.reason);
        assert!(p.reason.contains("of the users' 14.0 MB/s"), "{}", p.reason);
        // The same saw without a touch of the maximum: nothing to grow for yet.
        let ticks = (0..=10).map(|t| {
            let fill = fills[t as usize].min(0.94);
            with_lsn(signals(t, fill, 0.0, 2_000.0), 14e6)
        });
        let mut f = Flush::new(resize_config());
        assert_eq!(first_grow(&mut f, &caps, &cur, ticks), None);
    }

    /// A rate that fills the log in a second or two and is gone the next is a transient:
    /// the fiftieth real-server run's e, whose load began at 44 MB/s of redo for two
    /// seconds against a sync point of 80 MB (a span of 1.8 s), then ran at about
    /// 1 MB/s. Its fill touched the maximum once, a second after the target, and fell
    /// back (or stayed under the maximum, above the target, for a few seconds): no
    /// grow. The same rate sustained grows the log at the first tick at the maximum
    /// 5 s into the episode.
    #[test]
    fn a_transient_that_touches_the_maximum_grows_nothing() {
        let caps = testkit::mariadb();
        let cur = at_100_mib();
        let at = |t: u64, fill: f64, lsn: f64| with_lsn(signals(t, fill, 0.0, 2_000.0), lsn);
        let start = |t: u64| match t {
            0 => (0.30, 15e6),
            1 => (0.83, 44e6),
            2 => (0.999, 33e6),
            _ => (0.0, 1e6),
        };
        // Back under the target at once, or above it and under the maximum for 8 s.
        for after in [0.70, 0.85] {
            let mut f = Flush::new(resize_config());
            let ticks = (0..=60).map(|t| {
                let (fill, lsn) = start(t);
                let fill = if t < 3 {
                    fill
                } else if t < 11 {
                    after
                } else {
                    0.6
                };
                at(t, fill, lsn)
            });
            assert_eq!(first_grow(&mut f, &caps, &cur, ticks), None, "{after}");
        }
        // Sustained: at the maximum from 2 s on at 44 MB/s.
        let mut f = Flush::new(resize_config());
        let ticks = (0..=60).map(|t| {
            let (fill, _) = start(t.min(2));
            at(t, fill, 44e6)
        });
        let (t, p) = first_grow(&mut f, &caps, &cur, ticks).expect("a grow");
        assert_eq!(t, 6, "{}", p.reason);
    }

    /// A recovery bound that allows less than a doubling, on a device seen at 200 pages/s
    /// (the page cleaner's pace in its first second, not yet the device's), holds the
    /// span-armed grow until the device shows more: then it goes, sized by the episode.
    /// A device that never shows more gets what its bound allows once `redo_lull_wait`
    /// has passed.
    #[test]
    fn a_grow_waits_for_the_device_to_show_its_rate() {
        let caps = testkit::mariadb();
        let cur = at_100_mib();
        // The climb of `a_log_spanning_seconds_grows_at_the_first_touch`, held at 97 %:
        // the target at 1 s, the maximum at 3 s, armed at 6 s.
        let at = |t: u64, flushed: f64| Signals {
            lsn_rate: Some(25e6),
            ..signals(t, [0.5, 0.8, 0.9, 0.97][(t as usize).min(3)], 0.05, flushed)
        };
        let mut f = Flush::new(resize_config());
        let slow = |t: u64| if t < 9 { 200.0 } else { 2_000.0 };
        let ticks = (0..=40).map(|t| at(t, slow(t)));
        let (t, p) =
            first_grow(&mut f, &caps, &cur, ticks).expect("a grow once the device shows its rate");
        assert_eq!(t, 9, "{}", p.reason);
        assert!(p.value > 200 << 20, "{}", p.reason);
        // 200 pages/s throughout: that bound allows less than a doubling (about
        // 143 MiB), and nothing goes before the wait's end (armed at 6 s, 30 s); then
        // what the bound allows.
        let mut f = Flush::new(resize_config());
        let ticks = (0..=35).map(|t| at(t, 200.0));
        assert_eq!(first_grow(&mut f, &caps, &cur, ticks), None);
        let bound = f.recovery_bound(&at(36, 200.0)).expect("a bound");
        assert!(bound > 100 << 20 && bound < 200 << 20, "{bound}");
        let (_, p) = first_grow(&mut f, &caps, &cur, [at(36, 200.0)]).expect("the bound's grow");
        assert_eq!(p.value, (bound >> 20) << 20, "{}", p.reason);
    }

    /// Pinned at the maximum the trend is noise around 0: no lull in it.
    #[test]
    fn no_lull_at_a_pinned_fill() {
        let caps = testkit::mariadb();
        let mut f = Flush::new(resize_config());
        let cur = with(Knob::IoCapacityMax, 4000);
        for t in 0..=24 {
            decide(&mut f, &caps, &cur, &signals(t, 1.0, 0.0, 2_000.0));
        }
        let ps = decide(&mut f, &caps, &cur, &signals(25, 1.0, -0.000_01, 2_000.0));
        assert!(find(&ps, Knob::LogFileSize).is_none());
    }

    /// Armed, the grow prefers the first lull (fill falling): a resize at 100 % fill
    /// takes effect only once the checkpoint passes the LSN of the SET.
    #[test]
    fn redo_grow_prefers_a_lull() {
        let caps = testkit::mariadb();
        let mut f = Flush::new(resize_config());
        let cur = with(Knob::IoCapacityMax, 4000);
        for t in 0..=24 {
            let ps = decide(&mut f, &caps, &cur, &signals(t, 0.99, 0.0, 2_000.0));
            assert!(find(&ps, Knob::LogFileSize).is_none(), "t={t}");
        }
        let ps = decide(&mut f, &caps, &cur, &signals(25, 0.96, -0.01, 2_000.0));
        let p = find(&ps, Knob::LogFileSize).expect("a resize in the lull");
        assert!(p.reason.contains("a lull"), "{}", p.reason);
        // Not armed before `redo_grow_after`: a dip after 10 s at the maximum does not grow.
        let mut f = Flush::new(resize_config());
        for t in 0..=10 {
            decide(&mut f, &caps, &cur, &signals(t, 0.99, 0.0, 2_000.0));
        }
        let ps = decide(&mut f, &caps, &cur, &signals(11, 0.96, -0.01, 2_000.0));
        assert!(find(&ps, Knob::LogFileSize).is_none());
    }

    #[test]
    fn redo_within_budgets_kept_until_exit_unless_redo_shrink() {
        let caps = testkit::mariadb();
        // The recovery budget bounds it: 10 s allows ~34 MB of age at ~4 000 pages
        // per 16 MiB, under the 64 MiB in effect.
        let mut f = Flush::new(FlushConfig {
            recovery_time_budget: Duration::from_secs(10),
            ..resize_config()
        });
        let big = with(Knob::IoCapacityMax, 4000);
        for t in 0..=130 {
            let ps = decide(&mut f, &caps, &big, &signals(t, 0.97, 0.0, 2_000.0));
            assert!(
                find(&ps, Knob::LogFileSize).is_none(),
                "grew beyond the recovery budget"
            );
        }
        // By default a grown log is kept however long it is quiet (two hours here):
        // a burst that comes back meets the log the last one needed.
        let mut f = Flush::new(resize_config());
        let cur = with(Knob::LogFileSize, 128 << 20);
        for t in 0..=7200 {
            let ps = decide(&mut f, &caps, &cur, &signals(t, 0.1, 0.0, 100.0));
            let p = find(&ps, Knob::LogFileSize).unwrap();
            assert_eq!((p.intent, p.value), (Intent::Act, 128 << 20), "t = {t} s");
            assert!(p.reason.contains("until innopilot exits"), "{}", p.reason);
        }
        // With redo_shrink on, quiet for 30 min: back to the baseline. Quiet is what
        // users write against the 64 MiB baseline's 51.2 MiB maximum: 0.02 MB/s is 2 %
        // of it a minute, under redo_shrink_fill_pct (5 %).
        let mut f = Flush::new(FlushConfig {
            redo_shrink: true,
            ..resize_config()
        });
        let mut back = None;
        for t in 0..=1800 {
            let quiet = with_lsn(signals(t, 0.1, 0.0, 100.0), 20_000.0);
            let ps = decide(&mut f, &caps, &cur, &quiet);
            let p = find(&ps, Knob::LogFileSize).unwrap();
            if p.intent == Intent::Release {
                back = Some((t, p.value, p.reason.clone()));
                break;
            }
        }
        let (t, v, reason) = back.expect("given back");
        assert_eq!((t, v), (1800, 64 << 20));
        assert!(
            reason.contains(
                "less than 5 % of the baseline log's maximum checkpoint age a minute \
                 for 30m (2.2 % now"
            ),
            "{reason}"
        );
        // The grown log at 10 % says nothing: 0.1 MB/s is 11 % of the baseline's
        // maximum a minute (the hundred-and-fourteenth run's shrink at 16 % was not
        // adopted 130 s later).
        let mut f = Flush::new(FlushConfig {
            redo_shrink: true,
            ..resize_config()
        });
        for t in 0..=3600 {
            let busy = with_lsn(signals(t, 0.1, 0.0, 100.0), 100_000.0);
            let ps = decide(&mut f, &caps, &cur, &busy);
            let p = find(&ps, Knob::LogFileSize).unwrap();
            assert_eq!((p.intent, p.value), (Intent::Act, 128 << 20), "t = {t} s");
        }
        // Nothing without redo_resize, nor where the knob is read-only.
        let mut f = Flush::new(FlushConfig {
            redo_resize: false,
            ..FlushConfig::default()
        });
        let ps = decide(&mut f, &caps, &cur, &signals(1, 0.1, 0.0, 100.0));
        assert!(find(&ps, Knob::LogFileSize).is_none());
        let mut f = Flush::new(resize_config());
        let old = testkit::caps("10.6.16-MariaDB", |n| Some(n == "innodb_log_file_size"));
        let ps = decide(&mut f, &old, &cur, &signals(1, 0.1, 0.0, 100.0));
        assert!(find(&ps, Knob::LogFileSize).is_none());
    }

    proptest! {
        /// The grow's size grows with the deficit and never falls below what holds the
        /// sync point itself at the target.
        #[test]
        fn redo_capacity_for_is_monotone(
            demand in 0.0f64..1e9, held in 0.0f64..600.0, written in 0.0f64..1e11,
            more in 0.0f64..1e8,
        ) {
            let a = redo_capacity_for(80.0 * MIB, 100.0 * MIB, demand, held, written, 0.75).unwrap();
            let b = redo_capacity_for(80.0 * MIB, 100.0 * MIB, demand + more, held, written, 0.75)
                .unwrap();
            prop_assert!(b >= a);
            prop_assert!(a >= 100.0 * MIB / 0.75 - 1.0);
        }
    }
}
