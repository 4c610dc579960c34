//! Flush and redo-headroom policy (seed 001): keep checkpoint age away from the point
//! where InnoDB flushes synchronously and users stall, by flushing at the pace the redo
//! needs and the device sustains, and by growing the redo log when the fill sits at the
//! maximum checkpoint age (James Day: redo space exists to be used at peaks).
//!
//! Fill f is checkpoint age over this flavor's sync point ([`Signals::redo_fill`]:
//! MariaDB `Innodb_checkpoint_max_age`, MySQL 8.0.30+ ≈ 0.83 × capacity), its trend
//! τ the least-squares slope over the window, and the projection
//! p = f + τ · `lookahead`.
//!
//! **The page cleaner as it is** (MariaDB 10.11 `storage/innobase/buf/buf0flu.cc`;
//! MySQL 8.0's is the same arithmetic). Once a second `buf_flush_page_cleaner()` asks
//! `page_cleaner_flush_pages_recommendation()` for a batch. Its redo term is
//! `af_get_pct_for_lsn(age)` = ⌊io_capacity_max / io_capacity⌋ · F · √F / 7.5 percent
//! of io_capacity, F = ⌊100 · age / max_modified_age_async⌋, so in pages about
//! **io_capacity_max · F^1.5 / 750: io_capacity cancels out**. The recommendation is
//! (io_capacity · max(pct_for_lsn/100, dirty_pct/max_dirty_pct) + avg_page_rate +
//! pages_for_lsn) / 3, capped at io_capacity_max. Past max_modified_age_async (7/8 of
//! the maximum checkpoint age) `buf_flush_ahead(…, false)` sets `buf_flush_async_lsn`
//! and the cleaner flushes **batches of io_capacity_max pages** (`n= srv_max_io_capacity;
//! goto background_flush`); at the maximum, `buf_flush_sync_for_checkpoint()` flushes
//! `buf_flush_list(srv_max_io_capacity, lsn)` while user threads wait in
//! `buf_flush_wait()`. A large io_capacity_max is therefore a burst, not a pace: a batch
//! of up to 16 000 pages (those older than the target LSN) on a device doing 330
//! pages/s can hold the checkpoint still for up to 48 s (the real-server benchmark's g_checkpoint_stall: io_capacity crept to 18 000 and
//! users saw 92 s at 0 TPS against the defaults' 72). Caveat, measured on MariaDB
//! 10.11.19 (`tests/page_cleaner.rs`): with the default
//! `innodb_max_dirty_pages_pct_lwm = 0` the page cleaner sleeps below the async point
//! (`my_cond_wait` while idle with lwm 0; only `buf_flush_ahead()` or dirty pages over
//! innodb_max_dirty_pages_pct wake it: no computation while the age crossed the whole
//! adaptive range), and when it does run, `total_ratio = 1`
//! (`if (pct_lwm == 0.0 || max_pct == 0.0)`). So on a default MariaDB the fill rises
//! unchecked to the async point and io_capacity_max acts from there, as the batch size
//! (the inverse is N there). With lwm > 0 the published `buffer_flush_pct_for_lsn`
//! followed the formula in every reading. Second caveat: while free pages are short
//! (`need_LRU_eviction()`) and no flush-ahead is pending, the loop runs
//! `buf_flush_LRU(srv_max_io_capacity)` instead of any flush-list batch, so below the
//! async point io_capacity_max paces no flush-list flushing; the policy recognises
//! that from the LRU's share of the pages flushed
//! ([`EVICTING_LIST_SHARE`](super::server_model::EVICTING_LIST_SHARE)) and holds.
//! [`page_cleaner_pages`] is that model; the simulator and the tests' plant use it.
//!
//! - **io_capacity_max is the lever.** When f reaches `target_fill_pct`, or p has
//!   reached it for `projection_persist` (a warm-up ramp is not a peak), or the fill
//!   reaches the maximum within that time at the faster of its last second's rise and
//!   τ (a burst is not a ramp), the policy
//!   holds innodb_io_capacity_max at the *inverted need*: the value at which the
//!   page cleaner's request at the current fill equals the page rate N that keeps the
//!   fill from rising, N = (lsn_rate + (p − target) · sync / lookahead) / ρ, ρ the redo
//!   bytes one flushed page retires (measured). In the adaptive range that is
//!   N · max(1, 750 / F^1.5) (the request is capped at io_capacity_max; rounded up to
//!   a whole multiple of io_capacity, the server's integer ratio); past the async
//!   point it is N. It follows the need both ways instead of creeping step after step,
//!   but never below the rate flushing now (never below the value in effect while the
//!   fill still rises: the estimate is short then), and a value up to 15 % above
//!   holds (not chasing noise).
//! - **Never a burst larger than the device sustains.** Once the device has shown its
//!   limit (5 s past the async point with users held at the maximum checkpoint age,
//!   the server asking at least 1.5 × what was flushed, or batches written back to
//!   back, more than 1.2 a second: the page cleaner's furious flushing), io_capacity_max
//!   is never above that limit, even below its baseline; before that, never above
//!   `device_headroom` × the best rate seen (nor below the baseline). Probing upward
//!   ×`raise_factor` (need unknown, or past `probe_fill_pct` and still rising) happens
//!   only while the device delivers what is asked, and only below the async point.
//!   **Past the async point io_capacity_max is never raised**: it is the batch size
//!   there, and on a device that cannot write a batch at once a bigger one holds the
//!   checkpoint still longer (the real-server g_checkpoint_stall, run of 2026-11-24,
//!   second set: the probe and a need estimate of 120 000 pages/s raised it to 16 000
//!   while the device wrote about 330 pages/s; 85 s at 0 TPS against the defaults'
//!   69). While users are held there (the DML rate collapsed at the maximum age,
//!   [`Signals::users_held`]) it is also lowered, to a batch of about `held_batch`
//!   (250 ms) of the device (never below io_capacity; until the limit is known, of the
//!   best rate seen, which is never below it): they are let through by the checkpoint
//!   MariaDB writes after each batch (`buf_flush_sync_for_checkpoint()`), so a smaller
//!   batch moves it more often, and on a device that is the pace a larger one writes
//!   no more pages a second (the seventy-ninth real-server run's g and h). With users
//!   at their rate it holds: a smaller batch there only slows every writer (the
//!   real-server f_cold_view). Unless the fill races to the maximum
//!   (`batch::RACE_S`) with the device, not the request, the pace: from a second or
//!   two before the async point (`batch::CROSS_S`) the batch is one second of the
//!   device, since users will reach the maximum inside whichever batch is under way.
//!   The private module `batch` owns these rules.
//! - **innodb_io_capacity stays at its baseline.** It only scales the dirty-page and
//!   idle terms; io_capacity_max is kept ≥ it (the server's rule).
//! - **Not while users wait for free pages.** When user threads wait for a free
//!   buffer-pool page (`Innodb_buffer_pool_wait_free` rising), a projection alone never
//!   raises flushing (it would take the device from the LRU flushing they wait for);
//!   only the fill itself at the target does.
//! - **Back when idle.** Under `idle_fill_pct` (now and projected), a minute after the
//!   last pressure, io_capacity_max is released to its baseline.
//! - **Not below the baseline in a lull.** Below the target, a value under the baseline
//!   (a batch lowered while users were held) goes back to the baseline at once, unless
//!   users wait for free pages: there it is the page cleaner's pace, not a batch, and
//!   kept it slows the flushing that makes room before the next peak (the fifth
//!   real-server run's g: 200 after the burst, about 70 pages/s flushed on a device of
//!   510, the fill climbing under the base load alone). At the target it comes back
//!   under the device's ceiling before the async point. While a redo grow waits for
//!   its checkpoint it goes to one second of the device instead: the page cleaner
//!   flushes toward the grow's LSN a batch of io_capacity_max a second, and a batch
//!   the device needs seconds for delays the adoption (measured: 2–4 s sooner).
//! - **Oldest pages only.** While flushing is managed (the page cleaner's wake-up
//!   window), a server whose `innodb_flush_neighbors` is not 0 gets 0
//!   (`neighbors_off`): on a device it takes for rotational, `buf_do_flush_list_batch()`
//!   writes each page from the old end of the flush list with the dirty pages of its
//!   area (`buf_flush_try_neighbors()`), which do not move the checkpoint
//!   (`tests/flush_neighbors.rs`). The server's value comes back with io_capacity_max.
//! - **No DML delay.** Redo pressure is never handled by delaying DML: MariaDB applies
//!   the purge-lag delay only while purge progresses and history is above the lag,
//!   exactly when a read view ends (trx0purge.cc). The purge-rate policy alone owns
//!   the DML-delay pair.
//! - **Redo headroom** (`redo_resize`): when the fill sits at the maximum checkpoint
//!   age, grow the redo log within a disk budget and a measured recovery-time bound;
//!   the private module `redo` owns it.
//!
//!
//! [`Signals::redo_fill`]: crate::signals::Signals::redo_fill
//! [`Signals::users_held`]: crate::signals::Signals::users_held

use std::collections::VecDeque;
use std::time::Duration;

use serde::Deserialize;

use super::server_model::page_cleaner_evicting;
use super::{Intent, Policy, PolicyId, PolicyInput, PolicyKind, Proposal, FREE_PAGE_WAITS_PER_S};
use crate::config::check::{ConfigError, Section};
use crate::server::Knob;
use crate::signals::Signals;

mod batch;
mod redo;

use batch::{CROSS_S, PAST_ASYNC};
use redo::{grow_pending, Episode};
pub use redo::{
    recovery_age_bound, recovery_time_s, redo_capacity_for, shrink_landing_fill,
    REDO_APPLY_BYTES_PER_S, SHRINK_LANDING_S,
};

/// io_capacity_max is released only this long after the last pressure: a fill that
/// falls because a peak was met is not idleness.
const LOWER_AFTER_MS: u64 = 60_000;

/// The device's limit is learned over this many milliseconds of consecutive ticks with
/// users held: the mean flushed against the mean asked. One second is not evidence:
/// with batches of 2 000 on a device of 500 pages/s the counter reads 2 000, 0, 0, 0;
/// and the first second past the async point reads the slow flushing before it (both
/// the seventh run's f and the sixth run's g learned "200 pages/s" there).
const LIMIT_WINDOW_MS: u64 = 5_000;

/// Past the async point with users held, more than this many batches of
/// io_capacity_max written a second (on average over [`LIMIT_WINDOW_MS`]) means the
/// page cleaner runs them back to back (furious flushing), so the rate is the device's.
const BACK_TO_BACK: f64 = 1.2;

/// The page cleaner asked at least this multiple of what was flushed: the device, not
/// the request, is the pace (the limit's test over a window, and the racing rule's
/// over one second).
const DEVICE_PACE: f64 = 1.5;

/// Half-life of the best flush rate seen.
const BEST_HALF_LIFE_S: f64 = 3600.0;

/// io_capacity_max up to this share above the need holds (not chasing noise).
const NEED_BAND: f64 = 0.15;

/// innodb_adaptive_flushing_lwm's default, % of the redo capacity: below it the page
/// cleaner does no redo-driven flushing.
const ADAPTIVE_LWM: f64 = 0.10;

/// Pages the page cleaner asks for in one pass (about a second) at checkpoint age
/// `age`, by MariaDB 10.11's `buf0flu.cc` (see the module documentation):
/// io_capacity below innodb_adaptive_flushing_lwm; the redo term
/// ⌊max/cap⌋ · cap · F^1.5 / 750 (F = ⌊100 · age / async⌋) capped at io_capacity_max
/// in the adaptive range; batches of io_capacity_max from the async point on.
pub fn page_cleaner_pages(
    age: f64,
    async_point: f64,
    lwm_age: f64,
    io_capacity: f64,
    io_capacity_max: f64,
) -> f64 {
    let cap = io_capacity.max(1.0);
    let max = io_capacity_max.max(cap);
    if age >= async_point {
        return max;
    }
    if age < lwm_age {
        return cap;
    }
    let f = (100.0 * age / async_point.max(1.0)).floor();
    ((max / cap).floor() * cap * f * f.sqrt() / 750.0).min(max)
}

/// The io_capacity_max at which [`page_cleaner_pages`] asks for `pages` at `age` (the
/// inverse, before rounding to the server's integer ratio). The request is capped at
/// io_capacity_max itself, so from F^1.5 ≥ 750 (F ≥ 83, about 72 % of the maximum
/// checkpoint age) on, and past the async point, that is `pages`.
pub fn io_capacity_max_for(pages: f64, age: f64, async_point: f64) -> f64 {
    if age >= async_point {
        return pages;
    }
    let f = (100.0 * age / async_point.max(1.0)).floor().max(1.0);
    pages * (750.0 / (f * f.sqrt())).max(1.0)
}

/// This tick's verdict on flushing pressure.
#[derive(Debug, Clone, Copy, Default)]
struct Pressure {
    /// Flushing must meet the need now.
    raise: bool,
    /// Raised for a burst below the target: the last second's rise (fraction/s) and
    /// the seconds to the maximum checkpoint age at it.
    burst: Option<(f64, f64)>,
    /// Only the projection reaches the target, and this holds the raise back.
    held_back: Option<HeldBack>,
}

#[derive(Debug, Clone, Copy)]
enum HeldBack {
    /// Users wait for free pages (waits/s).
    FreePageWaits(f64),
    /// The projection has reached the target for this long (ms), not yet
    /// `projection_persist`.
    Persist(u64),
}

/// What the device has shown.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Device {
    /// Best flush rate seen lately, pages/s (decaying peak).
    pub best: Option<f64>,
    /// Average flush rate while flushing was demanded and the page cleaner asked for
    /// at least 1.5 × that: the device's limit, pages/s.
    pub limit: Option<f64>,
    /// Redo bytes one flushed page retires (average).
    pub bytes_per_page: Option<f64>,
}

/// The page cleaner's geometry this tick, bytes of checkpoint age.
#[derive(Debug, Clone, Copy)]
struct Points {
    age: f64,
    async_point: f64,
    lwm: f64,
}

impl Points {
    fn of(s: &Signals, fill: f64) -> Option<Points> {
        let r = &s.sample.redo;
        let sync = r.sync_point? as f64;
        let async_point = r.async_point_or_share()? as f64;
        let capacity = r.capacity.map_or(sync / 0.8, |c| c as f64);
        Some(Points {
            age: r.checkpoint_age.map_or(fill * sync, |a| a as f64),
            async_point,
            lwm: capacity * ADAPTIVE_LWM,
        })
    }

    /// The age is at or past the async point, where io_capacity_max is the batch size.
    fn past_async(&self) -> bool {
        self.age >= self.async_point
    }

    /// F, the age as % of the async point (the server's lsn_age_factor).
    fn factor(&self) -> f64 {
        (100.0 * self.age / self.async_point.max(1.0)).floor()
    }
}

#[derive(Debug, Clone, Default)]
struct State {
    device: Device,
    t_prev: Option<u64>,
    /// Since when the redo grow has been armed, waiting for a lull (ms).
    armed_at: Option<u64>,
    /// The log's span (s of the episode's demand) when the grow was armed by it, not
    /// by the seconds at the maximum: for the reason.
    armed_span_s: Option<f64>,
    /// Since when a shrink would have landed below `redo_shrink_fill_pct` of the
    /// baseline log's maximum ([`shrink_landing_fill`]) (ms).
    low_since: Option<u64>,
    /// The pressure episode the redo grow is sized from.
    episode: Option<Episode>,
    /// The size in effect when a grow was sent in the pressure episode still running:
    /// one grow per episode (see [`Flush::redo_size`]).
    grown_from: Option<u64>,
    /// The redo write rates (t_ms, bytes/s) of the last `redo_min_span`: an episode's
    /// demand starts from the highest of them, the burst's own first seconds included.
    lsn_recent: VecDeque<(u64, f64)>,
    /// Since when the projection alone has been at or above the target (ms).
    proj_since: Option<u64>,
    /// The fill at the previous tick (t_ms, fill): its last second's rise.
    prev_fill: Option<(u64, f64)>,
    /// The fill's last second's rise (fraction/s), 0 without a previous tick.
    rise: f64,
    /// Last time flushing was under pressure (fill or projection at the target), ms.
    pressure_at_ms: Option<u64>,
    /// The device was the limit this tick.
    limited: bool,
    /// The page cleaner is kept awake (innodb_max_dirty_pages_pct_lwm): from the first
    /// pressure until the fill is idle a minute after the last one.
    woken: bool,
    /// Last time the checkpoint age was at or past the async point (ms).
    past_async_at_ms: Option<u64>,
    /// Last time users were held at the maximum checkpoint age
    /// ([`Signals::users_held`]), ms.
    held_at_ms: Option<u64>,
    /// Consecutive ticks past the async point with users held within the last minute:
    /// (ms, pages flushed/s, pages asked).
    held_window: std::collections::VecDeque<(u64, f64, f64)>,
}

fn pct(x: f64) -> String {
    format!("{:.1} %", x * 100.0)
}

/// The flush and redo-headroom policy. See the module documentation.
pub struct Flush {
    /// Name and rank, as the registry gave them ([`PolicyId::unranked`] until then).
    id: PolicyId,
    cfg: FlushConfig,
    state: State,
}

impl Flush {
    pub fn new(cfg: FlushConfig) -> Self {
        Flush {
            id: PolicyId::unranked(<Self as PolicyKind>::NAME),
            cfg,
            state: State::default(),
        }
    }

    /// What the device has shown so far.
    pub fn device(&self) -> Device {
        self.state.device
    }

    /// Users were held at the maximum checkpoint age within the last minute (the batch
    /// regime's own memory: the age dips under the async point after each checkpoint).
    fn held_recently(&self, t_ms: u64) -> bool {
        self.state
            .held_at_ms
            .is_some_and(|t| t_ms.saturating_sub(t) < LOWER_AFTER_MS)
    }

    /// Learns from this tick's flush rate. Returns whether the device is the limit
    /// now: for [`LIMIT_WINDOW_MS`] the age past the async point with users held at the
    /// maximum checkpoint age ([`Signals::users_held`]) within the last minute, and the
    /// page cleaner asked ([`page_cleaner_pages`] with the knobs in effect, known only
    /// past the async point) at least 1.5 × what was flushed over that window, or
    /// [`BACK_TO_BACK`] batches a second were written. Past the async point the request
    /// is a batch ceiling:
    /// the page cleaner flushes only the pages older than its target LSN, so flushing
    /// less than asked says nothing about the device while the checkpoint can still
    /// advance (the real-server f_cold_view asked 2 000 a second and flushed about 620
    /// on a device with no write limit). With users held it cannot: every page flushed
    /// is needed, and what the device writes is its limit.
    fn learn(&mut self, s: &Signals, asked: Option<f64>, trend: f64) -> bool {
        let dt = self
            .state
            .t_prev
            .map_or(1.0, |t| s.t_ms.saturating_sub(t) as f64 / 1000.0);
        self.state.t_prev = Some(s.t_ms);
        if s.users_held == Some(true) {
            self.state.held_at_ms = Some(s.t_ms);
        }
        let recent = self.held_recently(s.t_ms);
        let Some(flushed) = s.pages_flushed_rate.filter(|r| r.is_finite() && *r >= 0.0) else {
            self.state.held_window.clear();
            return false;
        };
        let dev = &mut self.state.device;
        let decayed = dev.best.map(|b| b * 0.5f64.powf(dt / BEST_HALF_LIFE_S));
        dev.best = Some(decayed.map_or(flushed, |b| b.max(flushed))).filter(|b| *b > 0.0);
        let w = &mut self.state.held_window;
        match (recent, asked) {
            (true, Some(a)) => {
                w.push_back((s.t_ms, flushed, a));
                while w
                    .front()
                    .is_some_and(|(t, _, _)| s.t_ms.saturating_sub(*t) >= LIMIT_WINDOW_MS)
                {
                    w.pop_front();
                }
            }
            _ => w.clear(),
        }
        let spans = w
            .front()
            .is_some_and(|(t, _, _)| s.t_ms.saturating_sub(*t) + 1_000 >= LIMIT_WINDOW_MS);
        let n = w.len().max(1) as f64;
        let mean_flushed = w.iter().map(|x| x.1).sum::<f64>() / n;
        let mean_asked = w.iter().map(|x| x.2).sum::<f64>() / n;
        // Two ways the device shows it is the pace: the page cleaner asked at least
        // 1.5 × what was written, or more than one batch a second was written. The
        // second is `buf_flush_page_cleaner()`'s furious flushing: while users wait
        // (`buf_flush_sync_lsn` set) it runs `buf_flush_sync_for_checkpoint()` and
        // `continue`s without its one-second wait, batch after batch, so pages/s is what
        // the device writes whatever the batch. Without it, a batch already smaller than
        // the device's second (the provisional one of `batch_ceiling`) would never let
        // the limit be learned.
        let back_to_back = mean_flushed >= BACK_TO_BACK * mean_asked;
        let limited = spans
            && mean_flushed > 0.0
            && (mean_asked >= DEVICE_PACE * mean_flushed || back_to_back);
        if limited {
            dev.limit = Some(
                dev.limit
                    .map_or(mean_flushed, |l| l + 0.2 * (mean_flushed - l)),
            );
        }
        // Redo one flushed page retires: what was written minus what the age grew, over
        // the flush-list pages. Pages the LRU wrote to free buffer-pool pages are the
        // least recently used, not the oldest modified: counted, they make ρ small and
        // the need large (the likely cause in the real-server e_purge_behind, a 128 MiB
        // pool under a 480 MiB update load: "about 147 231 pages/s keep the fill from
        // rising", io_capacity_max 2 000 → 25 500).
        let list = match s.lru_flushed_rate.filter(|r| r.is_finite() && *r >= 0.0) {
            Some(lru) => (flushed - lru).max(0.0),
            None => flushed,
        };
        if let (Some(lsn), Some(sync)) = (s.lsn_rate, s.sample.redo.sync_point) {
            let advance = lsn - trend * sync as f64;
            if list >= 1.0 && advance > 0.0 && advance.is_finite() {
                let rho = advance / list;
                dev.bytes_per_page = Some(dev.bytes_per_page.map_or(rho, |r| r + 0.1 * (rho - r)));
            }
        }
        limited
    }

    /// Whether flushing must meet the need now: the fill at the target, or the
    /// projection there for `projection_persist` while no user waits for a free page,
    /// or at once when the trend reaches the maximum checkpoint age sooner than that.
    fn pressure(
        &mut self,
        s: &Signals,
        fill: f64,
        trend: f64,
        proj: f64,
        grow_pending: bool,
    ) -> Pressure {
        let target = self.cfg.target_fill_pct / 100.0;
        // The last second's rise: the windowed trend lags a burst by seconds (a
        // least-squares slope over 10 s of which one is the burst's).
        let rise = match self.state.prev_fill.replace((s.t_ms, fill)) {
            Some((t0, f0)) if s.t_ms > t0 && s.t_ms - t0 <= 5_000 => {
                (fill - f0) / ((s.t_ms - t0) as f64 / 1000.0)
            }
            _ => 0.0,
        };
        self.state.rise = rise;
        if fill >= target {
            self.state.proj_since = None;
            return Pressure {
                raise: true,
                burst: None,
                held_back: None,
            };
        }
        // A rise that reaches the maximum checkpoint age before it could have lasted
        // `projection_persist` is no warm-up ramp, and every second of the wait is one
        // the page cleaner sleeps (a default MariaDB flushes nothing below the async
        // point). The real-server g and h: the burst's first second took the fill from
        // 16 to 28 % at 8–13 MB/s of redo, the maximum came 5–7 s later, and the
        // checkpoint stayed at the LSN the base load started from until about 26 k
        // pages were written at the device's 500 a second; flushing began only at the
        // async point, 5–6 s into the burst. Those seconds of flushing are seconds off
        // the stall. Judged on the faster of the last second's rise and the trend: the
        // trend reached it only a second before the target there.
        // Not while users wait for free pages (below): that rule holds here too. Nor
        // while a redo grow waits for its checkpoint: the page cleaner is already
        // flushing toward its LSN at one second of the device, and a raise there
        // would take the batch regime's smaller batch (the forty-eighth run's g: the
        // users back after the stall rose 3.6 %/s and took it from 513 to 200).
        let speed = rise.max(trend);
        let to_max_s = (1.0 - fill) / speed;
        let waits = s
            .free_page_wait_rate
            .filter(|w| w.is_finite() && *w >= FREE_PAGE_WAITS_PER_S);
        if speed > 0.0
            && to_max_s <= self.cfg.projection_persist.as_secs_f64()
            && waits.is_none()
            && !grow_pending
        {
            self.state.proj_since = None;
            return Pressure {
                raise: true,
                burst: Some((speed, to_max_s)),
                held_back: None,
            };
        }
        if proj < target {
            self.state.proj_since = None;
            return Pressure::default();
        }
        let since = *self.state.proj_since.get_or_insert(s.t_ms);
        let held_ms = s.t_ms.saturating_sub(since);
        if let Some(w) = waits {
            return Pressure {
                raise: false,
                burst: None,
                held_back: Some(HeldBack::FreePageWaits(w)),
            };
        }
        if held_ms < self.cfg.projection_persist.as_millis() as u64 {
            return Pressure {
                raise: false,
                burst: None,
                held_back: Some(HeldBack::Persist(held_ms)),
            };
        }
        Pressure {
            raise: true,
            burst: None,
            held_back: None,
        }
    }

    /// The highest io_capacity_max the device justifies: its limit once shown (never a
    /// batch larger than it flushes in a second), else `device_headroom` × the best
    /// rate seen and at least the baseline. Never below io_capacity nor the server's
    /// minimum of 100.
    fn ceiling(&self, base_cap: u64, base_max: u64) -> u64 {
        let dev = &self.state.device;
        let c = match dev.limit {
            Some(l) => l,
            None => dev.best.map_or(base_max as f64, |b| {
                (b * self.cfg.device_headroom).max(base_max as f64)
            }),
        };
        (c as u64).max(base_cap).max(100)
    }

    fn device_text(&self) -> String {
        let dev = &self.state.device;
        match (dev.best, dev.limit) {
            (Some(b), Some(l)) => format!(
                "the device has shown {b:.0} pages/s at best and about {l:.0} pages/s when it was the limit"
            ),
            (Some(b), None) => format!("the device has shown {b:.0} pages/s at best"),
            _ => "no flushing seen yet".to_string(),
        }
    }

    /// innodb_io_capacity_max (the lever) and innodb_io_capacity (its baseline), with
    /// `points` the page cleaner's geometry this tick ([`Points::of`], read once by
    /// `decide`). Returns the proposals and whether flushing is at its ceiling.
    fn flushing(
        &self,
        input: &PolicyInput<'_>,
        fill: f64,
        trend: f64,
        proj: f64,
        pressure: Pressure,
        points: Option<Points>,
    ) -> (Vec<Proposal>, bool) {
        let mut out = Vec::new();
        let (Some(&cur), Some(&base_max), Some(&base_cap)) = (
            input.current.get(&Knob::IoCapacityMax),
            input.baseline.get(&Knob::IoCapacityMax),
            input.baseline.get(&Knob::IoCapacity),
        ) else {
            return (out, false);
        };
        let s = input.signals;
        let target = self.cfg.target_fill_pct / 100.0;
        let idle = self.cfg.idle_fill_pct / 100.0;
        let ceiling = self.ceiling(base_cap, base_max);
        let floor = base_cap.max(100);
        let held = self.held_recently(s.t_ms);
        let cur_cap = input
            .current
            .get(&Knob::IoCapacity)
            .copied()
            .unwrap_or(base_cap);
        let racing = self.racing(s, points, cur_cap, cur, fill);
        let situation = format!(
            "redo fill {} (trend {}/s, projected {} in {})",
            pct(fill),
            pct(trend),
            pct(proj),
            humantime::format_duration(self.cfg.lookahead)
        );
        let goal = match pressure.burst {
            Some((speed, to_max)) => format!(
                "rises {}/s (the last second): at that rate it reaches the maximum \
                 checkpoint age in {to_max:.0} s, sooner than a projection must last \
                 ({}), so a burst and not a ramp, and it is met now",
                pct(speed),
                humantime::format_duration(self.cfg.projection_persist)
            ),
            None => format!("reaches the target {} %", self.cfg.target_fill_pct),
        };
        // Racing, the age crosses the async point within [`CROSS_S`]: the page
        // cleaner's first batch starts there, at whatever io_capacity_max then is.
        let crossing = racing
            && points.is_some_and(|p| {
                fill > 0.0 && p.age * (fill + CROSS_S * self.state.rise) / fill >= p.async_point
            });
        let evicting = page_cleaner_evicting(s)
            .filter(|_| points.is_some_and(|p| !p.past_async() && !crossing));
        let (want, why) = if let (true, Some((lru, flushed))) = (pressure.raise, evicting) {
            let v = if cur == base_max {
                cur
            } else {
                cur.min(ceiling).max(floor)
            };
            (
                v,
                format!(
                    "{situation} {goal} but the page cleaner is evicting: \
                     {lru:.0} of the {flushed:.0} pages/s flushed were the LRU's; below the \
                     async point, while free pages are short, MariaDB's page cleaner runs \
                     buf_flush_LRU(innodb_io_capacity_max) instead of a flush-list batch, \
                     whatever io_capacity_max is, until the flush-ahead from the async \
                     point: innodb_io_capacity_max holds at {v}",
                ),
            )
        } else if pressure.raise {
            // N: absorb the redo being written and remove the projected excess over
            // the lookahead, at the redo one flushed page retires.
            let need = match (s.lsn_rate, self.state.device.bytes_per_page, points) {
                (Some(lsn), Some(rho), Some(_)) if rho > 0.0 => {
                    let sync = s.sample.redo.sync_point.unwrap_or(0) as f64;
                    let excess = (proj - target).max(0.0) * sync;
                    let horizon = self.cfg.lookahead.as_secs_f64().max(1.0);
                    ((lsn + excess / horizon) / rho).max(0.0)
                }
                _ => 0.0,
            };
            let estimate_failed = fill >= self.cfg.probe_fill_pct / 100.0 && trend > 0.0;
            if let (true, false, Some(p)) = (need > 0.0, estimate_failed, points) {
                // Invert the page cleaner's request at this fill; round up to a whole
                // multiple of io_capacity (the server's ratio is an integer).
                let m = io_capacity_max_for(need, p.age, p.async_point);
                let m = if !p.past_async() {
                    (m / base_cap.max(1) as f64).ceil() * base_cap.max(1) as f64
                } else {
                    m.ceil()
                };
                let m = (m.min(u64::MAX as f64 / 2.0) as u64).clamp(floor, ceiling);
                // Not below what flushes now while the fill still rises (the estimate is
                // short then), nor below what flushes now at all (ρ is noisy in
                // transients: coming down costs nothing the device cap does not already
                // give); hold a value at or a little above that (not chasing noise).
                let now = s
                    .pages_flushed_rate
                    .filter(|r| r.is_finite())
                    .unwrap_or(0.0);
                let lowest = if trend > 0.0 {
                    cur
                } else {
                    now.min(u64::MAX as f64 / 2.0) as u64
                };
                let m = m.max(lowest.min(ceiling));
                let v = if cur <= ceiling && cur >= m && cur as f64 <= (1.0 + NEED_BAND) * m as f64
                {
                    cur
                } else {
                    m
                };
                // Past the async point io_capacity_max is the batch size
                // (past_async_value). Nor raised for a minute after: the age dips under
                // the point after each batch's checkpoint, and a value raised there is
                // the next batch (the sixth run's g: 219 → 876 in such a dip, held 5 s by
                // the dwell).
                let batch_regime = p.past_async()
                    || crossing
                    || self
                        .state
                        .past_async_at_ms
                        .is_some_and(|t| s.t_ms.saturating_sub(t) < LOWER_AFTER_MS);
                let v = if batch_regime {
                    self.past_async_value(cur, base_cap, base_max, held, racing)
                } else {
                    v
                };
                let region = if batch_regime {
                    let when = if p.past_async() {
                        "past the async point"
                    } else if crossing {
                        "at the async point within a second"
                    } else {
                        "within a minute of the async point"
                    };
                    format!(
                        "{when} the page cleaner flushes batches of io_capacity_max, \
                         {PAST_ASYNC}; {}",
                        self.past_async_text(held, racing)
                    )
                } else {
                    format!(
                        "at F = {:.0} % of the async point the page cleaner asks \
                         io_capacity_max · F^1.5 / 750",
                        p.factor()
                    )
                };
                let capped =
                    if m == ceiling && m < io_capacity_max_for(need, p.age, p.async_point) as u64 {
                        format!(", capped at {ceiling}: {}", self.device_text())
                    } else {
                        format!(" (at most {ceiling}: {})", self.device_text())
                    };
                (
                    v,
                    format!(
                        "{situation} {goal}: about {need:.0} pages/s keep the \
                         fill from rising; {region}, so innodb_io_capacity_max {cur} → {v}{capped}",
                    ),
                )
            } else if self.state.limited || crossing || points.is_some_and(|p| p.past_async()) {
                // Past the async point (the device's limit is learned only there) a probe
                // would only make the batch bigger.
                let v = self.past_async_value(cur, base_cap, base_max, held, racing);
                let device = if self.state.limited {
                    format!(
                        " and the device flushes less than the page cleaner asks ({})",
                        self.device_text()
                    )
                } else {
                    String::new()
                };
                (
                    v,
                    format!(
                        "{situation} {goal}{device}; past the async point the \
                         page cleaner flushes batches of io_capacity_max, {PAST_ASYNC}; {}: \
                         innodb_io_capacity_max {cur} → {v}",
                        self.past_async_text(held, racing)
                    ),
                )
            } else {
                let stepped = ((cur as f64 * self.cfg.raise_factor) as u64).max(cur + 100);
                let v = stepped.min(ceiling).max(floor);
                let because = if estimate_failed {
                    format!(
                        "the fill is past {} % and still rising",
                        self.cfg.probe_fill_pct
                    )
                } else {
                    "the redo one flushed page retires is not measured yet".to_string()
                };
                (
                    v,
                    format!(
                        "{situation} {goal} and {because}: innodb_io_capacity_max \
                         {cur} → {v} (×{} while the device delivers; at most {ceiling}: {})",
                        self.cfg.raise_factor,
                        self.device_text()
                    ),
                )
            }
        } else if fill < idle
            && proj < idle
            && self
                .state
                .pressure_at_ms
                .is_none_or(|p| s.t_ms.saturating_sub(p) >= LOWER_AFTER_MS)
        {
            (
                base_max,
                format!(
                    "{situation} stays below {} %: innodb_io_capacity_max back to its baseline \
                     {base_max}",
                    self.cfg.idle_fill_pct
                ),
            )
        } else if grow_pending(input)
            && cur < base_max
            && !matches!(pressure.held_back, Some(HeldBack::FreePageWaits(_)))
        {
            // A grow asked for and not adopted yet: `log_t::resize_start()` ended with
            // `buf_flush_ahead(start_lsn, false)`, so the page cleaner flushes every page
            // older than the SET's LSN, a batch of io_capacity_max a second (200 pages/s
            // at 200 after the stall in the thirty-fifth real-server run's g). Released to
            // the baseline's 2 000 on a device of about 500 pages/s, a batch took the
            // device seconds. One second of the device flushes as fast, in batches it
            // writes within their second: in the thirty-eighth run the grow was adopted
            // 2–4 s sooner. Users still ran 20–25 k TPS while the page cleaner flushed
            // toward the LSN (the defaults, with nothing left to flush, 35–37 k): that
            // cost is the flushing, not the batch size.
            let v = self.device_second(base_cap, base_max);
            (
                v,
                format!(
                    "{situation} is below the target {} % and a redo grow waits for the \
                     checkpoint to pass the LSN of its SET: until then the page cleaner \
                     flushes every page older than that LSN, a batch of \
                     innodb_io_capacity_max a second, and a batch larger than the device \
                     writes in a second delays the grow: innodb_io_capacity_max {cur} → {v}, \
                     one second of the device ({})",
                    self.cfg.target_fill_pct,
                    self.device_text()
                ),
            )
        } else if cur < base_max && !matches!(pressure.held_back, Some(HeldBack::FreePageWaits(_)))
        {
            // Below the target a value under the baseline is a batch left over from a
            // peak (past the async point it is the batch size; lowered while users were
            // held). Here it is the page cleaner's pace instead, io_capacity_max ·
            // F^1.5 / 750, and held it starves the lull that makes room for the next
            // peak: in the fifth real-server run's g, 200 after the burst flushed about
            // 70 pages/s on a device of 510 and the fill climbed from 30 % under the
            // base load alone. The defaults' page cleaner would run at the baseline.
            (
                base_max,
                format!(
                    "{situation} is below the target {} % and users are not held: \
                     innodb_io_capacity_max {cur} was the batch for the maximum checkpoint \
                     age, and here the page cleaner asks io_capacity_max · F^1.5 / 750, so \
                     held it would slow the flushing that makes room before the next peak: \
                     back to its baseline {base_max}",
                    self.cfg.target_fill_pct
                ),
            )
        } else {
            // Hold; a value of ours above what the device sustains comes down to it.
            let v = if cur == base_max {
                cur
            } else {
                cur.min(ceiling).max(floor)
            };
            let why = match pressure.held_back {
                Some(HeldBack::FreePageWaits(w)) => format!(
                    "{situation}: only the projection reaches the target {} % and users wait \
                     for free pages ({w:.0}/s): more background flushing would take the device \
                     from the LRU flushing they wait for, innodb_io_capacity_max holds at {v}",
                    self.cfg.target_fill_pct
                ),
                Some(HeldBack::Persist(ms)) => format!(
                    "{situation}: only the projection reaches the target {} %, for {} of the {} \
                     it must last (a ramp is not a peak), innodb_io_capacity_max holds at {v}",
                    self.cfg.target_fill_pct,
                    humantime::format_duration(Duration::from_millis(ms)),
                    humantime::format_duration(self.cfg.projection_persist)
                ),
                None => format!(
                    "{situation} is between {} % and the target {} %: innodb_io_capacity_max \
                     holds at {v}",
                    self.cfg.idle_fill_pct, self.cfg.target_fill_pct
                ),
            };
            (v, why)
        };
        // Flushing can do no more: the device's limit, io_capacity_max near its ceiling,
        // or past the async point, where io_capacity_max is the batch size and this
        // policy never raises it (above). Only more redo headroom is left then.
        let at_ceiling = self.state.limited
            || want >= ceiling / 20 * 19
            || points.is_some_and(|p| p.past_async());
        if input.caps.settable(Knob::IoCapacityMax) {
            let intent = if want == base_max {
                Intent::Release
            } else {
                Intent::Act
            };
            out.push(self.propose(Knob::IoCapacityMax, want, intent, why));
        }
        let managed = self.state.woken || want != base_max;
        out.extend(self.wake(input, managed));
        out.extend(self.neighbors(input, managed));
        if input.caps.settable(Knob::IoCapacity) {
            // io_capacity cancels out of the redo term: it stays at its baseline,
            // which `floor` keeps at or under io_capacity_max.
            let reason = format!(
                "innodb_io_capacity stays at its baseline {base_cap}: the page cleaner's redo \
                 term is io_capacity_max · F^1.5 / 750, io_capacity cancels out"
            );
            out.push(self.propose(Knob::IoCapacity, base_cap, Intent::Release, reason));
        }
        (out, at_ceiling)
    }

    /// innodb_max_dirty_pages_pct_lwm: on (`wake_lwm_pct`) while flushing is managed
    /// (from the first pressure until the fill is idle a minute after the last one, or
    /// while a value of ours is in effect for io_capacity_max), when the server's own
    /// value is 0, so that the page cleaner runs the adaptive range the io_capacity_max
    /// decision relies on. A baseline above 0 already runs it, and is left alone.
    fn wake(&self, input: &PolicyInput<'_>, managed: bool) -> Option<Proposal> {
        let knob = Knob::MaxDirtyPagesPctLwm;
        let on = self.cfg.wake_lwm_pct;
        if on == 0 || !input.caps.settable(knob) || input.baseline.get(&knob) != Some(&0) {
            return None;
        }
        let cur = input.current.get(&knob).copied()?;
        Some(if managed {
            let v = if cur > 0 { cur } else { on };
            self.propose(
                knob,
                v,
                Intent::Act,
                format!(
                    "flushing is managed and the server's innodb_max_dirty_pages_pct_lwm is 0, \
                     which keeps the page cleaner asleep below the async point (measured in \
                     tests/page_cleaner.rs): {v} runs its adaptive range, where \
                     io_capacity_max · F^1.5 / 750 paces flushing"
                ),
            )
        } else {
            self.propose(
                knob,
                0,
                Intent::Release,
                "flushing is no longer managed: innodb_max_dirty_pages_pct_lwm back to its \
                 baseline 0"
                    .to_string(),
            )
        })
    }
}

impl Flush {
    /// innodb_flush_neighbors: 0 while flushing is managed (the window of
    /// [`Flush::wake`]), when the server's own value is not 0. Flushing is managed to
    /// move the checkpoint, and only the pages at the old end of the flush list move
    /// it: MariaDB's `buf_do_flush_list_batch()` (buf0flu.cc) writes each of them with
    /// `buf_flush_try_neighbors()`, every dirty page of its 64-page area, when the
    /// variable is on and the device is rotational as the server sees it. Under
    /// uniform updates almost all of a batch is then neighbours and the checkpoint
    /// stands still (tests/flush_neighbors.rs: 32 % of the dirty pages written
    /// retired 0.4 % of the checkpoint age with neighbours, 21 % without; the
    /// benchmark's g, fifty-third run: 2 s at 0 TPS against the defaults' 46). The
    /// cost is on a real spinning disk, where neighbours make writes sequential:
    /// `neighbors_off = false` keeps them.
    fn neighbors(&self, input: &PolicyInput<'_>, managed: bool) -> Option<Proposal> {
        let knob = Knob::FlushNeighbors;
        if !self.cfg.neighbors_off || !input.caps.settable(knob) {
            return None;
        }
        let base = input.baseline.get(&knob).copied().filter(|&b| b > 0)?;
        input.current.get(&knob)?;
        Some(if managed {
            self.propose(
                knob,
                0,
                Intent::Act,
                format!(
                    "flushing is managed to move the checkpoint and innodb_flush_neighbors \
                     is {base}: on a device the server takes for rotational each page from \
                     the old end of the flush list brings the dirty pages of its area, \
                     which do not move it (buf_flush_try_neighbors(), measured in \
                     tests/flush_neighbors.rs); 0 writes the oldest pages only"
                ),
            )
        } else {
            self.propose(
                knob,
                base,
                Intent::Release,
                format!(
                    "flushing is no longer managed: innodb_flush_neighbors back to its \
                     baseline {base}"
                ),
            )
        })
    }
}

impl Policy for Flush {
    fn id(&self) -> PolicyId {
        self.id
    }

    fn decide(&mut self, input: &PolicyInput<'_>) -> Vec<Proposal> {
        if !self.cfg.enabled {
            return Vec::new();
        }
        let s = input.signals;
        // Unknown fill: hold everything rather than guess.
        let Some(fill) = s.redo_fill.filter(|f| f.is_finite()) else {
            return Vec::new();
        };
        let trend = s.redo_fill_trend.filter(|t| t.is_finite()).unwrap_or(0.0);
        let proj = fill + trend * self.cfg.lookahead.as_secs_f64();
        // What the page cleaner asks, where that is certain: past the async point it
        // flushes batches of io_capacity_max whatever innodb_max_dirty_pages_pct_lwm
        // says. Below it, a default MariaDB (lwm 0) does no adaptive flushing at all
        // (tests/page_cleaner.rs), so a low rate there says nothing about the device.
        let points = Points::of(s, fill);
        if points.is_some_and(|p| p.past_async()) {
            self.state.past_async_at_ms = Some(s.t_ms);
        }
        let asked = match (
            points,
            input.current.get(&Knob::IoCapacity),
            input.current.get(&Knob::IoCapacityMax),
        ) {
            (Some(p), Some(&c), Some(&m)) if p.past_async() => Some(page_cleaner_pages(
                p.age,
                p.async_point,
                p.lwm,
                c as f64,
                m as f64,
            )),
            _ => None,
        };
        self.state.limited = self.learn(s, asked, trend);
        let pressure = self.pressure(s, fill, trend, proj, grow_pending(input));
        if pressure.raise {
            self.state.pressure_at_ms = Some(s.t_ms);
            self.state.woken = true;
        } else if fill < self.cfg.idle_fill_pct / 100.0
            && proj < self.cfg.idle_fill_pct / 100.0
            && self
                .state
                .pressure_at_ms
                .is_none_or(|p| s.t_ms.saturating_sub(p) >= LOWER_AFTER_MS)
        {
            // The same idleness that releases io_capacity_max. Not sooner: with the
            // cleaner asleep the fill climbs back to the async point and drops at each
            // batch (the real-server e_purge_behind, fourth run: woken only while the
            // fill was over the target, 5–30 s of each 75 s sawtooth).
            self.state.woken = false;
        }
        let (mut out, at_ceiling) = self.flushing(input, fill, trend, proj, pressure, points);
        out.extend(self.redo_size(input, fill, trend, at_ceiling));
        out
    }

    fn reset(&mut self) {
        // What the device has shown stays true across a reconnect or a hand-back.
        let device = self.state.device;
        self.state = State {
            device,
            ..State::default()
        };
    }

    fn learned(&self, into: &mut crate::policy::Learned) {
        if let Some(l) = self.state.device.limit {
            into.device_limit_pages_s = Some(l);
        }
    }

    /// The limit only: the best rate decays (an hour's half-life) and the redo a page
    /// retires is learned from any second of flushing, while the limit takes
    /// `LIMIT_WINDOW_MS` of users held at the maximum checkpoint age. A limit
    /// recalled too low is corrected at the next stall: the page cleaner's furious
    /// flushing then writes batches back to back, and that rate is learned
    /// (`Flush::learn`).
    fn recall(&mut self, from: &crate::policy::Learned) {
        if let Some(l) = from
            .device_limit_pages_s
            .filter(|l| l.is_finite() && *l > 0.0)
        {
            self.state.device.limit = Some(l);
        }
    }
}

// ---- configuration: `[policy.flush]` -------------------------------------------

/// Flushing and redo headroom (seed 001, `crate::policy::flush`): keeps checkpoint age
/// under a target share of the sync-flush point by holding innodb_io_capacity_max at
/// what the redo needs, within what the device has shown it sustains.
#[derive(Debug, Clone, PartialEq)]
pub struct FlushConfig {
    pub enabled: bool,
    /// Keep redo fill (and its projection `lookahead` ahead) under this, % of the sync point.
    pub target_fill_pct: f64,
    /// Below this fill, now and projected, io_capacity_max goes back to its baseline.
    pub idle_fill_pct: f64,
    /// How far ahead the fill trend is projected.
    pub lookahead: Duration,
    /// A projection alone (fill itself under the target) must reach the target for
    /// this long before flushing is raised: a warm-up ramp is not a peak.
    pub projection_persist: Duration,
    /// io_capacity_max is multiplied by this per step when the need is unknown or its
    /// estimate has failed, while the device delivers what is asked.
    pub raise_factor: f64,
    /// Until the device has shown its limit, io_capacity_max stays under this × the
    /// best flush rate it has shown (at least the baseline).
    pub device_headroom: f64,
    /// Above this fill and still rising, the flushing need estimate has failed:
    /// io_capacity_max probes upward ×`raise_factor` instead.
    pub probe_fill_pct: f64,
    /// While users are held at the maximum checkpoint age, the batch past the async
    /// point (io_capacity_max) is at most this much of the device's rate
    /// (`Flush::batch_ceiling`). Users waiting there are let through only by a
    /// checkpoint, and `buf_flush_sync_for_checkpoint()` (MariaDB buf0flu.cc) writes
    /// one after each `buf_flush_list(srv_max_io_capacity, lsn)` batch: a batch of B
    /// pages on a device of D pages/s holds them about B / D seconds. Measured in the
    /// real-server g_checkpoint_stall (fifth run, device about 800 pages/s): a batch
    /// of 200 gave 0 and 6 s at 0 TPS, one of 832 gave 22 s, the defaults' 2 000 gave
    /// 35–51 s. A larger batch lets no more users through on a device that is the
    /// pace: in the seventy-ninth run's g (writes limited to about 512 doublewritten
    /// pages/s) the device wrote 522–532 pages/s while users were held with batches
    /// of 200 (250 ms) and 502–526 with batches of 317–597 (750 ms), which had 1–4 s
    /// under 50 TPS a repetition against 0–1 and a higher p99.9.
    pub held_batch: Duration,
    /// Grow the redo log at sustained peaks (on by default); the grown log is kept
    /// until innopilot exits unless `redo_shrink`.
    pub redo_resize: bool,
    /// The fill that counts as "at the maximum checkpoint age" …
    pub redo_grow_fill_pct: f64,
    /// … for this long of one pressure episode (added up, not one stay) arms the
    /// grow …
    pub redo_grow_after: Duration,
    /// At the maximum, a log whose sync point holds less than this of the episode's
    /// demand sends the grow at once, and the grow is at least to this span (0 = off).
    pub redo_min_span: Duration,
    /// Otherwise the armed grow waits at most this long for a lull (fill falling) or
    /// users held before it goes ahead; and any grow waits at most this long for a
    /// recovery bound that allows a doubling.
    pub redo_lull_wait: Duration,
    /// Give a grown redo log back when quiet (off: a burst that comes back meets the
    /// log the last one needed) …
    pub redo_shrink: bool,
    /// … once users have written less than this share (%) of the *baseline* log's
    /// maximum checkpoint age a minute ([`redo::shrink_landing_fill`]; also the exit
    /// restore's test before it shrinks a grown log) …
    pub redo_shrink_fill_pct: f64,
    /// … for this long.
    pub redo_shrink_after: Duration,
    /// Disk budget: the redo log never grows beyond this.
    pub redo_max_bytes: u64,
    /// Crash recovery should take at most about this long (bounds the redo size).
    pub recovery_time_budget: Duration,
    /// innodb_max_dirty_pages_pct_lwm while flushing is managed, when the server's is 0
    /// (MariaDB's default, which keeps the page cleaner asleep below the async point).
    /// 0 leaves the variable alone.
    pub wake_lwm_pct: u64,
    /// innodb_flush_neighbors = 0 while flushing is managed, when the server's is not
    /// 0 (see `Flush::neighbors`). false leaves the variable alone.
    pub neighbors_off: bool,
}

impl Default for FlushConfig {
    fn default() -> Self {
        FlushConfig {
            enabled: true,
            target_fill_pct: 75.0,
            idle_fill_pct: 30.0,
            lookahead: Duration::from_secs(30),
            projection_persist: Duration::from_secs(10),
            raise_factor: 1.5,
            device_headroom: 2.0,
            probe_fill_pct: 95.0,
            held_batch: Duration::from_millis(250),
            redo_resize: true,
            redo_grow_fill_pct: 95.0,
            redo_grow_after: Duration::from_secs(20),
            redo_min_span: Duration::from_secs(20),
            redo_lull_wait: Duration::from_secs(30),
            redo_shrink: false,
            // Between two measured points (the hundred-and-fourteenth run): idle, a
            // shrink was adopted in 14 s; at 16 % a minute, not in 130 s, and the
            // burst that came meanwhile ran at half its rate.
            redo_shrink_fill_pct: 5.0,
            redo_shrink_after: Duration::from_secs(1800),
            redo_max_bytes: 4 << 30,
            recovery_time_budget: Duration::from_secs(300),
            wake_lwm_pct: 1,
            neighbors_off: true,
        }
    }
}

/// `[policy.flush]` as the file says it.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFlush {
    enabled: Option<bool>,
    target_fill_pct: Option<f64>,
    idle_fill_pct: Option<f64>,
    #[serde(default, with = "humantime_serde")]
    lookahead: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    projection_persist: Option<Duration>,
    raise_factor: Option<f64>,
    device_headroom: Option<f64>,
    probe_fill_pct: Option<f64>,
    #[serde(default, with = "humantime_serde")]
    held_batch: Option<Duration>,
    redo_resize: Option<bool>,
    redo_grow_fill_pct: Option<f64>,
    #[serde(default, with = "humantime_serde")]
    redo_grow_after: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    redo_min_span: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    redo_lull_wait: Option<Duration>,
    redo_shrink: Option<bool>,
    redo_shrink_fill_pct: Option<f64>,
    #[serde(default, with = "humantime_serde")]
    redo_shrink_after: Option<Duration>,
    redo_max_size: Option<String>,
    #[serde(default, with = "humantime_serde")]
    recovery_time_budget: Option<Duration>,
    wake_lwm_pct: Option<i64>,
    neighbors_off: Option<bool>,
}

impl PolicyKind for Flush {
    const NAME: &'static str = "flush";
    type Config = FlushConfig;
    type Raw = RawFlush;

    fn validate(r: RawFlush, s: &Section<'_>) -> Result<FlushConfig, ConfigError> {
        let d = &FlushConfig::default();
        let secs = Duration::from_secs;
        let f = FlushConfig {
            enabled: r.enabled.unwrap_or(d.enabled),
            target_fill_pct: s.float(
                "target_fill_pct",
                r.target_fill_pct,
                d.target_fill_pct,
                5.0,
                100.0,
            )?,
            idle_fill_pct: s.float(
                "idle_fill_pct",
                r.idle_fill_pct,
                d.idle_fill_pct,
                0.0,
                100.0,
            )?,
            lookahead: s.duration(
                "lookahead",
                r.lookahead,
                d.lookahead,
                Duration::ZERO,
                secs(600),
            )?,
            projection_persist: s.duration(
                "projection_persist",
                r.projection_persist,
                d.projection_persist,
                Duration::ZERO,
                secs(600),
            )?,
            raise_factor: s.float("raise_factor", r.raise_factor, d.raise_factor, 1.05, 4.0)?,
            device_headroom: s.float(
                "device_headroom",
                r.device_headroom,
                d.device_headroom,
                1.0,
                10.0,
            )?,
            probe_fill_pct: s.float(
                "probe_fill_pct",
                r.probe_fill_pct,
                d.probe_fill_pct,
                0.0,
                150.0,
            )?,
            held_batch: s.duration(
                "held_batch",
                r.held_batch,
                d.held_batch,
                Duration::from_millis(50),
                secs(2),
            )?,
            redo_resize: r.redo_resize.unwrap_or(d.redo_resize),
            redo_grow_fill_pct: s.float(
                "redo_grow_fill_pct",
                r.redo_grow_fill_pct,
                d.redo_grow_fill_pct,
                0.0,
                150.0,
            )?,
            redo_grow_after: s.duration(
                "redo_grow_after",
                r.redo_grow_after,
                d.redo_grow_after,
                Duration::ZERO,
                secs(86_400),
            )?,
            redo_min_span: s.duration(
                "redo_min_span",
                r.redo_min_span,
                d.redo_min_span,
                Duration::ZERO,
                secs(3600),
            )?,
            redo_lull_wait: s.duration(
                "redo_lull_wait",
                r.redo_lull_wait,
                d.redo_lull_wait,
                Duration::ZERO,
                secs(3600),
            )?,
            redo_shrink: r.redo_shrink.unwrap_or(d.redo_shrink),
            redo_shrink_fill_pct: s.float(
                "redo_shrink_fill_pct",
                r.redo_shrink_fill_pct,
                d.redo_shrink_fill_pct,
                0.0,
                100.0,
            )?,
            redo_shrink_after: s.duration(
                "redo_shrink_after",
                r.redo_shrink_after,
                d.redo_shrink_after,
                Duration::ZERO,
                secs(7 * 86_400),
            )?,
            redo_max_bytes: s.size(
                "redo_max_size",
                r.redo_max_size,
                d.redo_max_bytes,
                8 << 20,
                512 << 30,
            )?,
            recovery_time_budget: s.duration(
                "recovery_time_budget",
                r.recovery_time_budget,
                d.recovery_time_budget,
                secs(1),
                secs(86_400),
            )?,
            wake_lwm_pct: s.int("wake_lwm_pct", r.wake_lwm_pct, d.wake_lwm_pct, 0, 99)?,
            neighbors_off: r.neighbors_off.unwrap_or(d.neighbors_off),
        };
        let order = [
            (
                "target_fill_pct",
                f.target_fill_pct,
                "idle_fill_pct",
                f.idle_fill_pct,
            ),
            (
                "probe_fill_pct",
                f.probe_fill_pct,
                "target_fill_pct",
                f.target_fill_pct,
            ),
            (
                "redo_grow_fill_pct",
                f.redo_grow_fill_pct,
                "redo_shrink_fill_pct",
                f.redo_shrink_fill_pct,
            ),
            // The seconds at the maximum are counted within a pressure episode (fill at
            // or above the target): a grow threshold at or under the target would
            // count seconds no episode holds.
            (
                "redo_grow_fill_pct",
                f.redo_grow_fill_pct,
                "target_fill_pct",
                f.target_fill_pct,
            ),
        ];
        for (key, v, below, w) in order {
            if v <= w {
                return Err(s.invalid(key, v, format!("must exceed {s}.{below} ({w})")));
            }
        }
        Ok(f)
    }

    fn build(cfg: &FlushConfig, id: PolicyId) -> Option<Box<dyn Policy>> {
        super::boxed_if(
            cfg.enabled,
            Flush {
                id,
                ..Flush::new(cfg.clone())
            },
        )
    }
}

#[cfg(test)]
mod tests;
