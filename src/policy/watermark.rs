//! Watermark policy: MariaDB 10.6.5's adaptive purge, brought back from outside the
//! server and made configurable. It proposes `innodb_purge_threads` (where it is
//! dynamic, MariaDB ≥ 10.7.1) and, above the high watermark only where purge threads
//! are read-only (MySQL), a smaller `innodb_purge_batch_size`. It never touches the
//! DML-delay pair: redo pressure is never handled by delaying DML (MariaDB applies that
//! delay only while purge progresses and history is above the lag, i.e. exactly when a
//! read view ends, on top of the purge surge). The purge-rate policy alone owns it.
//!
//! Purge writes redo. When redo fills up to the sync-flush point, users stall while
//! pages are flushed (seed 003 measured TPS touching 0 with 4 or 8 purge threads), so
//! the foreground gets the redo first and purge is throttled by redo fill:
//!
//! - fill = checkpoint age / sync point, in percent ([`Signals::redo_fill`] × 100);
//! - below `low_pct` (seed: 20 %): N purge threads, N = `max_purge_threads`, or the
//!   `innodb_purge_threads` found at start when that is 0;
//! - `[low_pct, high_pct)` (seed: 20–80 %) is split into N equal buckets; bucket 1
//!   runs N threads, bucket 2 N−1, …, bucket N one. With N = 4 and 20/80 the buckets
//!   are 20–35, 35–50, 50–65 and 65–80 %;
//! - at or above `high_pct`: one thread and "high mode". MariaDB 10.6.5 then paused
//!   purge 10 ms between batches; no variable does that. On MariaDB high mode is one
//!   purge thread and nothing else (10.6.5 never delayed DML either); on MySQL, whose
//!   purge threads are read-only, a smaller `innodb_purge_batch_size` (less redo per
//!   purge batch).
//!
//! A level changes only once the fill has moved `hysteresis_pct` points past the
//! boundary in the direction of the move, and a bucket is held for `level_dwell`
//! before the next bucket move (moves into and out of high mode are never held: after
//! a spike to the cliff purge gets its threads back as soon as the fill falls). In the
//! real-server benchmark's purge-bound scenario the fill swung 2–87 % within seconds,
//! and 2 points of hysteresis alone moved purge threads 17 times a run. Leaving high
//! mode happens below `high_pct − hysteresis_pct`; from then on the batch size is
//! released to its baseline every tick (the guard drops the no-ops).
//!
//! **Purge debt has a limit.** Under sustained redo pressure the buckets pin purge at
//! few threads for as long as the pressure lasts, and history grows without bound:
//! the reason MariaDB reverted the algorithm (MDEV-32050). In the real-server benchmark
//! the buckets took threads away at 40 % fill, far from the sync-flush point, and left
//! 13 % more debt than the defaults. While *purgeable* history ([`estimate`], any read
//! view counting as a blocker, so it errs toward not yielding) exceeds
//! `yield_history_undo_logs` (by default the purge-rate budget's default), the policy
//! yields: it hands purge threads back to their baseline (a `Release`, so the
//! purge-rate policy may ask for more) until purgeable history is under 80 % of the
//! limit. It looks ahead too: while history grows (the window's slope, no read view
//! of any age holding back as much as purge may remove) fast enough that
//! `purgeable + slope × yield_horizon` (5 min) passes the limit, it yields the same
//! way, until that projection is under 80 % of it. In the fifty-fourth real-server
//! run's e_purge_behind history grew 2 400 undo logs/s for the whole run, reached the
//! limit only at 175 s of 180, and the buckets, engaged by a start-up transient, cut
//! purge 4 → 1 → 4 twice a run before that: 522 k at the end against the defaults'
//! 431 k. One thread stays whatever the debt only in high
//! mode with users held at the maximum checkpoint age ([`Signals::users_held`]) within
//! the last `level_dwell`: that is the sync-flush cliff, where purge's redo stalls
//! every user. A fill over the high watermark with users at their rate is not (the
//! real-server f_cold_view after the release). The dwell keeps the thread through the
//! seconds when users come and go at the end of a stall: in the fifty-fifth run's
//! g_checkpoint_stall, the held flag alone moved purge 1 → 2 → 1 → 2 in 15 s as the
//! stall ended, with history growing 1 500–3 400 undo logs/s. 0 = never yield (as
//! published).
//!
//! [`Signals::users_held`]: crate::signals::Signals::users_held
//!
//! **Nothing taken while a read view blocks purge.** Purge threads that have nothing
//! to purge write no redo, so throttling them buys users nothing, and following the
//! fill's swings only moves threads that stand still (the tenth real-server run's
//! f_cold_view: 14–21 moves between 1 and 2 threads during the view). While a view at
//! least 10 s old holds back as much history as purge can still remove
//! ([`PurgeEstimate::is_blocked`]), no thread is taken away: the threads in effect (up
//! to the baseline) are the floor, and a falling fill may give threads back, so purge
//! has them when the view ends. Holding the level instead (until the sixty-fourth
//! run) kept what the fill had said before the view: in that run's i high mode took
//! purge to one thread before the view, the grown log's fill stayed at 3–25 % for the
//! whole view, and the drain began on one thread, stepped back 1 → 4 over 11 s by the
//! guard (drain 29–34 s against the static redo's 24–28); in f the policy engaged
//! during the view and stepped purge 4 → 1 behind it, to be stepped back after it.
//!
//! [`PurgeEstimate::is_blocked`]: crate::signals::purge::PurgeEstimate::is_blocked
//!
//! **Only where the server cannot hold the age by itself.** Throttling purge buys the
//! foreground nothing while the server's own flushing keeps the checkpoint age away
//! from the sync-flush point: MariaDB flushes ahead from the async point (7/8 of the
//! maximum checkpoint age, `buf_flush_ahead()` in `log_checkpoint_margin()`, then
//! batches of io_capacity_max in `buf_flush_page_cleaner()`), and users wait only at
//! the maximum (`buf_flush_wait()`). In the fifth real-server run's e_purge_behind the
//! fill climbed to the async point and collapsed there every 80 s, never past 88 %,
//! with no synchronous flush; the buckets took purge to one thread on each climb and
//! left 1.09 × the defaults' debt for 1.03 × their TPS. So the policy engages only once
//! the fill has reached `engage_fill_pct` (default 95 % of the sync point, past either
//! server's async point) and stays engaged for `engage_hold` (10 min) after it was last
//! there; until then purge keeps its baseline threads (a `Release`). 0 = always engaged
//! (as published). The first climb to the cliff is the server's own; what the
//! published algorithm adds (fewer threads on the next ones) is kept. The engagement
//! belongs to the log it was seen in: once the redo capacity has grown past it (the
//! flush policy's grow), the fill must reach `engage_fill_pct` of the larger log.
//!
//! [`Signals::redo_fill`]: crate::signals::Signals::redo_fill
//! [`estimate`]: crate::signals::purge::estimate

use std::time::Duration;

use serde::Deserialize;

use super::threads_word;
use super::{Intent, Policy, PolicyId, PolicyInput, PolicyKind, Proposal};
use crate::config::check::{hard_range, ConfigError, Section};
use crate::server::{Capabilities, Knob, KnobValues};
use crate::signals::purge::estimate;

/// A read view this old (or older) that holds back at least as much history as purge
/// can still remove blocks purge ([`PurgeEstimate::is_blocked`]); younger ones are the
/// ordinary transactions of the load. The purge-rate policy's default `min_view_age`.
///
/// [`PurgeEstimate::is_blocked`]: crate::signals::purge::PurgeEstimate::is_blocked
const BLOCKED_VIEW_AGE: Duration = Duration::from_secs(10);

/// Where the fill sits, from least to most throttled. The derived order is the
/// throttling order: `Below < Bucket(1) < … < Bucket(N) < High`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Level {
    Below,
    /// 1-based bucket of `[low, high)`.
    Bucket(u64),
    High,
}

/// The level kept between ticks, with the N it was computed for: a level from another
/// N (the baseline changed after a reconnect) means nothing and is not reused.
#[derive(Debug, Clone, Copy, PartialEq)]
struct State {
    n: Option<u64>,
    level: Level,
    /// When the level last changed (ms): bucket moves wait `level_dwell` after it.
    changed_ms: u64,
}

/// Purge debt as the yield rule sees it in one tick.
#[derive(Debug, Clone, Copy)]
struct Debt {
    /// Purgeable history (any read view counting as a blocker).
    purgeable: u64,
    /// History growth, undo logs/s: the window's slope, 0 while shrinking or while a
    /// read view blocks purge.
    rate: f64,
    /// `purgeable + rate × yield_horizon`.
    projected: f64,
}

/// The watermarks and bucket count of one decision.
#[derive(Debug, Clone, Copy)]
struct Bands {
    low: f64,
    high: f64,
    n: u64,
}

impl Bands {
    fn level_of(&self, pct: f64) -> Level {
        // High first: with a (mis)configured high ≤ low, "at or above high" is the safe
        // reading.
        if pct >= self.high {
            Level::High
        } else if pct < self.low {
            Level::Below
        } else {
            // low ≤ pct < high here, so the range is positive. Clamped because float
            // rounding may land a hair outside 0..n.
            let k = ((pct - self.low) / (self.high - self.low) * self.n as f64).floor();
            Level::Bucket((k.max(0.0) as u64 + 1).min(self.n))
        }
    }

    /// Boundary `i` of `0..=n`: 0 is the low watermark, n the high one.
    fn edge(&self, i: u64) -> f64 {
        if i >= self.n {
            self.high
        } else {
            self.low + (self.high - self.low) * i as f64 / self.n as f64
        }
    }

    /// The boundary a fill must leave behind to move up out of `level`.
    fn upper_edge(&self, level: Level) -> f64 {
        match level {
            Level::Below => self.low,
            Level::Bucket(k) => self.edge(k),
            Level::High => f64::INFINITY,
        }
    }

    /// The boundary a fill must leave behind to move down out of `level`.
    fn lower_edge(&self, level: Level) -> f64 {
        match level {
            Level::Below => f64::NEG_INFINITY,
            Level::Bucket(k) => self.edge(k - 1),
            Level::High => self.high,
        }
    }

    fn threads(&self, level: Level) -> u64 {
        match level {
            Level::Below => self.n,
            Level::Bucket(k) => self.n + 1 - k,
            Level::High => 1,
        }
    }

    /// The next level from `current`, moving only when the fill is `h` points past the
    /// boundary: shifting the fill back by `h` against the direction of the move and
    /// reading its level gives exactly the levels whose boundary is cleared by `h`.
    fn next_level(&self, current: Option<Level>, pct: f64, h: f64) -> Level {
        let raw = self.level_of(pct);
        match current {
            None => raw,
            Some(c) if raw > c => self.level_of(pct - h).max(c),
            Some(c) if raw < c => self.level_of(pct + h).min(c),
            Some(c) => c,
        }
    }

    fn describe(&self, level: Level) -> String {
        match level {
            Level::Below => format!("below the low watermark {} %", num(self.low)),
            Level::Bucket(k) => format!(
                "in bucket {k} of {} ({}–{} %, watermarks {}–{} %)",
                self.n,
                num(self.edge(k - 1)),
                num(self.edge(k)),
                num(self.low),
                num(self.high)
            ),
            Level::High => format!("at or above the high watermark {} %", num(self.high)),
        }
    }
}

/// A percentage for humans: at most one decimal, none when whole ("20", "27.5").
fn num(x: f64) -> String {
    let r = (x * 10.0).round() / 10.0;
    if r.fract() == 0.0 {
        format!("{r:.0}")
    } else {
        format!("{r:.1}")
    }
}

/// The MariaDB 10.6.5 watermark buckets over redo fill. See the module documentation.
pub struct Watermark {
    /// Name and rank, as the registry gave them ([`PolicyId::unranked`] until then).
    id: PolicyId,
    cfg: WatermarkConfig,
    state: Option<State>,
    /// Purgeable history is over `yield_history_undo_logs` (and not yet under 80 % of
    /// it): purge threads are handed back.
    yielding: bool,
    /// When the fill was last at or above `engage_fill_pct` (ms): the policy is engaged
    /// for `engage_hold` after it.
    engaged_at_ms: Option<u64>,
    /// The redo capacity (bytes) the fill was at `engage_fill_pct` of, when known: a
    /// larger log since voids the engagement.
    engaged_capacity: Option<u64>,
    /// When users were last held at the maximum checkpoint age (ms): one thread
    /// stays in high mode for `level_dwell` after it, whatever the debt.
    held_at_ms: Option<u64>,
}

impl Watermark {
    pub fn new(cfg: WatermarkConfig) -> Self {
        Watermark {
            id: PolicyId::unranked(<Self as PolicyKind>::NAME),
            cfg,
            state: None,
            yielding: false,
            engaged_at_ms: None,
            engaged_capacity: None,
            held_at_ms: None,
        }
    }

    /// Whether the fill has reached `engage_fill_pct` within the last `engage_hold`
    /// (always, when `engage_fill_pct` is 0), of a redo log no smaller than the one in
    /// use (`capacity`, when known).
    fn engaged(&mut self, t_ms: u64, pct: f64, capacity: Option<u64>) -> bool {
        let at = self.cfg.engage_fill_pct;
        if at <= 0.0 {
            return true;
        }
        if pct >= at {
            self.engaged_at_ms = Some(t_ms);
            self.engaged_capacity = capacity;
        } else if let (Some(was), Some(now)) = (self.engaged_capacity, capacity) {
            // The log has grown since (the flush policy's grow, or a DBA's): that the
            // server could not hold the age in the smaller one says nothing of the
            // larger, whose fill must reach the cliff again. The sixty-fourth and
            // sixty-fifth runs' i: engaged by the 32 MiB log at the start, the buckets
            // took a purge thread at 38 % of the 1 056 MiB it grew to, for 30 s of
            // the drain.
            if now > was {
                self.engaged_at_ms = None;
                self.engaged_capacity = None;
            }
        }
        let hold = self.cfg.engage_hold.as_millis() as u64;
        self.engaged_at_ms
            .is_some_and(|s| t_ms.saturating_sub(s) <= hold)
    }

    /// Whether users were held at the maximum checkpoint age within the last
    /// `level_dwell` (this tick, when it is 0).
    fn held_recently(&mut self, t_ms: u64, held: Option<bool>) -> bool {
        if held == Some(true) {
            self.held_at_ms = Some(t_ms);
            return true;
        }
        let dwell = self.cfg.level_dwell.as_millis() as u64;
        dwell > 0
            && self
                .held_at_ms
                .is_some_and(|h| t_ms.saturating_sub(h) <= dwell)
    }

    /// Whether purge debt is over its limit this tick, or heading there within
    /// `yield_horizon` (with hysteresis), and the debt behind the verdict. Growth
    /// does not count while a read view of any age holds back as much history as
    /// purge may remove: history that grows behind a view is not purge falling
    /// behind, and threads cannot remove it (erring toward not yielding, like the
    /// purgeable estimate itself).
    fn debt_over_limit(&mut self, input: &PolicyInput<'_>) -> Option<Debt> {
        let limit = self.cfg.yield_history_undo_logs;
        // Unknown history: no verdict, and `yielding` keeps last tick's state, so the
        // hysteresis resumes where it was; nothing yields this tick (it needs the debt).
        let e = estimate(input.signals, Duration::ZERO)?;
        let purgeable = e.purgeable;
        let growing = !e.is_blocked();
        // The growth of history purge has not handled: the unfreed share is no debt.
        let rate = input
            .signals
            .debt_rate()
            .filter(|r| growing && r.is_finite() && *r > 0.0)
            .unwrap_or(0.0);
        let projected = purgeable as f64 + rate * self.cfg.yield_horizon.as_secs_f64();
        let bar = if self.yielding {
            (limit / 5 * 4) as f64
        } else {
            limit as f64
        };
        self.yielding = limit > 0 && projected > bar;
        Some(Debt {
            purgeable,
            rate,
            projected,
        })
    }

    /// N: configured, else the value found at start; at least 1 and at most what any
    /// server accepts, so `N + 1` and the bucket arithmetic cannot overflow.
    fn bucket_count(&self, baseline: &KnobValues) -> Option<u64> {
        let n = match self.cfg.max_purge_threads {
            0 => *baseline.get(&Knob::PurgeThreads)?,
            n => n,
        };
        let (min, max) = hard_range(Knob::PurgeThreads);
        Some(n.clamp(min.max(1), max))
    }

    /// `dwell_held_ms`: the level's age when `level_dwell` kept it where the fill and
    /// the hysteresis would have moved it.
    fn purge_threads(
        &self,
        bands: &Bands,
        level: Level,
        pct: f64,
        baseline: Option<u64>,
        dwell_held_ms: Option<u64>,
    ) -> Proposal {
        let t = bands.threads(level);
        let raw = bands.level_of(pct);
        let mut reason = if raw == level {
            format!("redo fill {pct:.1} % is {}", bands.describe(level))
        } else if let Some(age_ms) = dwell_held_ms {
            format!(
                "redo fill {pct:.1} % is {}, but a bucket is held for {} after a move \
                 (level_dwell; the last was {:.0} s ago), so the level stays {}",
                bands.describe(raw),
                humantime::format_duration(self.cfg.level_dwell),
                age_ms as f64 / 1000.0,
                bands.describe(level)
            )
        } else {
            let (edge, dir) = if raw > level {
                (bands.upper_edge(level), "above")
            } else {
                (bands.lower_edge(level), "below")
            };
            format!(
                "redo fill {pct:.1} % is not yet {} points {dir} the {} % boundary, so the level stays {}",
                num(self.cfg.hysteresis_pct),
                num(edge),
                bands.describe(level)
            )
        };
        reason.push_str(&format!(": {t} {}", threads_word(t)));
        if level == Level::High {
            reason.push_str(" (high mode)");
        }
        // Release means "back to what the server had": only the baseline value is a
        // release; anything else (fewer threads, or more when max_purge_threads is
        // configured above the baseline) is an act the arbiter must weigh.
        let intent = if Some(t) == baseline {
            Intent::Release
        } else {
            Intent::Act
        };
        self.propose(Knob::PurgeThreads, t, intent, reason)
    }

    /// High mode's extra brake where purge threads are read-only, or handing it back
    /// outside high mode. Where they are dynamic, one thread is all high mode does.
    fn high_mode(
        &mut self,
        input: &PolicyInput<'_>,
        bands: &Bands,
        high: bool,
        pct: f64,
    ) -> Vec<Proposal> {
        let caps: &Capabilities = input.caps;
        let baseline = input.baseline;
        let mut out = Vec::new();
        let out_of_high = || {
            format!(
                "redo fill {pct:.1} % is out of high mode (high watermark {} % ± {} points)",
                num(bands.high),
                num(self.cfg.hysteresis_pct)
            )
        };
        // Where purge threads are dynamic (MariaDB ≥ 10.7.1) the thread proposal is the
        // whole of high mode.
        if !caps.settable(Knob::PurgeThreads) && caps.settable(Knob::PurgeBatchSize) {
            // Purge threads are read-only here (MySQL, MariaDB < 10.7.1): smaller batches
            // write less redo per batch. Never above the baseline: this is a brake. Without
            // a baseline there is nothing to bound it by or to release it to.
            if let Some(&base) = baseline.get(&Knob::PurgeBatchSize) {
                if high {
                    let v = self.cfg.high_batch_size.min(base).max(1);
                    let reason = format!(
                        "redo fill {pct:.1} % is at or above the high watermark {} % and purge \
                         threads are read-only here: innodb_purge_batch_size {v} undo pages \
                         (baseline {base}) so each purge batch writes less redo",
                        num(bands.high)
                    );
                    out.push(self.propose(Knob::PurgeBatchSize, v, Intent::Act, reason));
                } else {
                    let reason = format!(
                        "{}: innodb_purge_batch_size back to its baseline {base}",
                        out_of_high()
                    );
                    out.push(self.propose(Knob::PurgeBatchSize, base, Intent::Release, reason));
                }
            }
        }
        out
    }
}

impl Policy for Watermark {
    fn id(&self) -> PolicyId {
        self.id
    }

    fn decide(&mut self, input: &PolicyInput<'_>) -> Vec<Proposal> {
        if !self.cfg.enabled {
            return Vec::new();
        }
        // Unknown fill: hold everything, state included, rather than guess.
        let Some(fill) = input.signals.redo_fill.filter(|f| f.is_finite()) else {
            return Vec::new();
        };
        let pct = fill * 100.0;
        let n = self.bucket_count(input.baseline);
        // Without N there are no thread proposals, but high mode still needs tracking:
        // one bucket gives it the same boundaries (low and high).
        let bands = Bands {
            low: self.cfg.low_pct,
            high: self.cfg.high_pct,
            n: n.unwrap_or(1),
        };
        let t = input.signals.t_ms;
        let prev = self.state.filter(|s| s.n == n);
        let current = prev.map(|s| s.level);
        // A read view that blocks purge leaves its threads nothing to purge and no redo
        // to write: the level the fill points to buys users nothing, and following the
        // fill's swings only moves threads that stand still. The tenth real-server
        // run's f: 14–21 moves 1 ↔ 2 a run during the view. The level holds until
        // purge has work again.
        let blocked = estimate(input.signals, BLOCKED_VIEW_AGE).filter(|e| e.is_blocked());
        let mut level = bands.next_level(current, pct, self.cfg.hysteresis_pct);
        // A fill that swings tens of points within seconds (the real-server benchmark's
        // purge-bound scenario: 2–87 %) moved threads 17 times a run with hysteresis
        // alone. A bucket is therefore held for `level_dwell`. High mode, the
        // sync-flush cliff, is entered and left on the fill alone: held there for a
        // dwell after each spike, purge would lose 30 s of threads to a second at 85 %.
        let mut changed_ms = prev.map_or(t, |s| s.changed_ms);
        // How long ago the level last moved, when the dwell (not the hysteresis) holds
        // it: the reason must say which.
        let mut dwell_held_ms = None;
        if let Some(c) = current {
            let age_ms = t.saturating_sub(changed_ms);
            let young = age_ms < self.cfg.level_dwell.as_millis() as u64;
            if level != c && level != Level::High && c != Level::High && young {
                level = c;
                dwell_held_ms = Some(age_ms);
            }
            if level != c {
                changed_ms = t;
            }
        }
        self.state = Some(State {
            n,
            level,
            changed_ms,
        });

        let engaged = self.engaged(t, pct, input.signals.sample.redo.capacity);
        let debt = self.debt_over_limit(input);
        let held = self.held_recently(t, input.signals.users_held);
        let mut out = Vec::new();
        if n.is_some() && input.caps.settable(Knob::PurgeThreads) {
            let base = input.baseline.get(&Knob::PurgeThreads).copied();
            let mut p = self.purge_threads(&bands, level, pct, base, dwell_held_ms);
            // Blocked, none is taken: the threads in effect (up to the baseline) are
            // the floor, and the fill may only give threads back, so purge has them
            // when the view ends.
            let in_effect = input.current.get(&Knob::PurgeThreads).copied();
            if let (Some(e), Some(floor)) = (&blocked, in_effect.zip(base).map(|(c, b)| c.min(b))) {
                if p.value < floor {
                    p.reason = format!(
                        "a read view blocks purge ({} undo logs blocked, about {} purgeable): \
                         its threads write no redo, so none is taken from it: {floor} {} (in \
                         effect) whatever the fill; unblocked, the buckets would say: {}",
                        e.blocked,
                        e.purgeable,
                        threads_word(floor),
                        p.reason
                    );
                    p.value = floor;
                    p.intent = if Some(floor) == base {
                        Intent::Release
                    } else {
                        Intent::Act
                    };
                }
            }
            if let (false, Some(b)) = (engaged, base) {
                p.reason = format!(
                    "redo fill {pct:.1} % has not reached {} % of the sync-flush point in the \
                     last {} (engage_fill_pct, engage_hold): the server's own flushing holds \
                     the checkpoint age, so purge's redo stalls no user and purge keeps its \
                     {b} {} (the baseline); engaged, the buckets would say: {}",
                    num(self.cfg.engage_fill_pct),
                    humantime::format_duration(self.cfg.engage_hold),
                    threads_word(b),
                    p.reason
                );
                p.value = b;
                p.intent = Intent::Release;
            }
            // Debt wins unless users are held at the sync-flush cliff: there one thread
            // stays. High mode alone (the fill over the high watermark) is not that: in
            // the real-server f_cold_view the fill sat at 80–100 % for a minute after
            // the release with users at their rate, and one thread against the
            // purge-rate policy's five moved purge 1 → 2 → 1 every 5–10 s (ninth run).
            // "Held" lasts `level_dwell` after users were last held: at a stall's end
            // they come and go for seconds (fifty-fifth run's g: 1 → 2 → 1 → 2).
            else if let (true, Some(b), Some(d), false) =
                (self.yielding, base, debt, level == Level::High && held)
            {
                let limit = self.cfg.yield_history_undo_logs;
                let h = d.purgeable;
                let why = if h > limit {
                    format!("purgeable history {h} is over the limit {limit}")
                } else if d.rate > 0.0 {
                    format!(
                        "purgeable history {h} grows {:.0} undo logs/s: {:.0} within {} \
                         (yield_horizon), against the limit {limit}",
                        d.rate,
                        d.projected,
                        humantime::format_duration(self.cfg.yield_horizon)
                    )
                } else {
                    format!("purgeable history {h} came near the limit {limit}")
                };
                p.reason = format!(
                    "{why} (yield_history_undo_logs): foreground protection yields, {b} {} \
                     (the baseline) until {} is under {}; without the limit: {}",
                    threads_word(b),
                    if d.rate > 0.0 { "the projection" } else { "it" },
                    limit / 5 * 4,
                    p.reason
                );
                p.value = b;
                p.intent = Intent::Release;
            }
            out.push(p);
        }
        out.extend(self.high_mode(input, &bands, engaged && level == Level::High, pct));
        out
    }

    fn reset(&mut self) {
        self.state = None;
        self.yielding = false;
        // A restarted or reconnected server has shown nothing yet.
        self.engaged_at_ms = None;
        self.engaged_capacity = None;
        self.held_at_ms = None;
    }
}

// ---- configuration: `[policy.watermark]` -------------------------------------------

/// The MariaDB 10.6.5 adaptive-purge algorithm, configurable.
#[derive(Debug, Clone, PartialEq)]
pub struct WatermarkConfig {
    pub enabled: bool,
    /// Redo fill (percent of the sync-flush point) where throttling starts.
    pub low_pct: f64,
    /// Redo fill where purge runs with one thread (high mode).
    pub high_pct: f64,
    /// Number of buckets = purge threads at low fill; 0 = the value found at start.
    pub max_purge_threads: u64,
    /// Fill must move this many percentage points past a boundary to change bucket.
    pub hysteresis_pct: f64,
    /// Above the high watermark where purge threads are read-only (MySQL): the smaller
    /// innodb_purge_batch_size to propose.
    pub high_batch_size: u64,
    /// Purgeable history (undo logs) above which foreground protection yields below
    /// high mode: purge threads go back to their baseline (and the purge-rate policy
    /// may add more) until it is under 80 % of this. 0 = never (MariaDB 10.6.5 as
    /// published, which MDEV-32050 reverted for the unbounded history it left behind).
    /// The default is the purge-rate budget's default, so debt over budget is never
    /// locked out by the buckets; in high mode one thread stays whatever the debt.
    pub yield_history_undo_logs: u64,
    /// The yield looks this far ahead: purge threads also go back to their baseline
    /// while history grows fast enough to pass `yield_history_undo_logs` within it at
    /// the window's slope. 0 = only once it is over.
    pub yield_horizon: Duration,
    /// A bucket is held at least this long before the next bucket move (the move into
    /// high mode is never held). 0 = every tick may move (as published).
    pub level_dwell: Duration,
    /// Redo fill (percent of the sync-flush point) that engages the policy: until the
    /// fill reaches it, the server's own flushing holds the checkpoint age and purge
    /// keeps its baseline threads. 0 = always engaged (as published).
    pub engage_fill_pct: f64,
    /// How long the policy stays engaged after the fill was last at `engage_fill_pct`.
    pub engage_hold: Duration,
}

impl Default for WatermarkConfig {
    fn default() -> Self {
        WatermarkConfig {
            enabled: true,
            low_pct: 20.0,
            high_pct: 80.0,
            max_purge_threads: 0,
            hysteresis_pct: 2.0,
            high_batch_size: 100,
            yield_history_undo_logs: 500_000,
            yield_horizon: Duration::from_secs(300),
            level_dwell: Duration::from_secs(30),
            engage_fill_pct: 95.0,
            engage_hold: Duration::from_secs(600),
        }
    }
}

/// `[policy.watermark]` as the file says it.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawWatermark {
    enabled: Option<bool>,
    low_pct: Option<f64>,
    high_pct: Option<f64>,
    max_purge_threads: Option<i64>,
    hysteresis_pct: Option<f64>,
    high_batch_size: Option<i64>,
    yield_history_undo_logs: Option<i64>,
    #[serde(default, with = "humantime_serde")]
    yield_horizon: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    level_dwell: Option<Duration>,
    engage_fill_pct: Option<f64>,
    #[serde(default, with = "humantime_serde")]
    engage_hold: Option<Duration>,
}

impl PolicyKind for Watermark {
    const NAME: &'static str = "watermark";
    type Config = WatermarkConfig;
    type Raw = RawWatermark;

    fn validate(r: RawWatermark, s: &Section<'_>) -> Result<WatermarkConfig, ConfigError> {
        let (w, dw) = (r, &WatermarkConfig::default());
        let watermark = WatermarkConfig {
            enabled: w.enabled.unwrap_or(dw.enabled),
            low_pct: s.float("low_pct", w.low_pct, dw.low_pct, 0.0, 100.0)?,
            high_pct: s.float("high_pct", w.high_pct, dw.high_pct, 0.0, 150.0)?,
            max_purge_threads: s.int(
                "max_purge_threads",
                w.max_purge_threads,
                dw.max_purge_threads,
                0,
                32,
            )?,
            hysteresis_pct: s.float(
                "hysteresis_pct",
                w.hysteresis_pct,
                dw.hysteresis_pct,
                0.0,
                20.0,
            )?,
            high_batch_size: s.int(
                "high_batch_size",
                w.high_batch_size,
                dw.high_batch_size,
                1,
                5000,
            )?,
            yield_history_undo_logs: s.int(
                "yield_history_undo_logs",
                w.yield_history_undo_logs,
                dw.yield_history_undo_logs,
                0,
                10_000_000_000,
            )?,
            yield_horizon: s.duration(
                "yield_horizon",
                w.yield_horizon,
                dw.yield_horizon,
                Duration::ZERO,
                Duration::from_secs(24 * 3600),
            )?,
            level_dwell: s.duration(
                "level_dwell",
                w.level_dwell,
                dw.level_dwell,
                Duration::ZERO,
                Duration::from_secs(3600),
            )?,
            engage_fill_pct: s.float(
                "engage_fill_pct",
                w.engage_fill_pct,
                dw.engage_fill_pct,
                0.0,
                150.0,
            )?,
            engage_hold: s.duration(
                "engage_hold",
                w.engage_hold,
                dw.engage_hold,
                Duration::from_secs(1),
                Duration::from_secs(24 * 3600),
            )?,
        };
        if watermark.high_pct <= watermark.low_pct + watermark.hysteresis_pct {
            return Err(s.invalid(
                "high_pct",
                watermark.high_pct,
                format!(
                    "must exceed low_pct + hysteresis_pct ({})",
                    watermark.low_pct + watermark.hysteresis_pct
                ),
            ));
        }
        Ok(watermark)
    }

    fn build(cfg: &WatermarkConfig, id: PolicyId) -> Option<Box<dyn Policy>> {
        super::boxed_if(
            cfg.enabled,
            Watermark {
                id,
                ..Watermark::new(cfg.clone())
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::testkit::find;
    use crate::server::flavor::ReplicaSource;
    use crate::server::sample::{Sample, TrxInfo};
    use crate::signals::Signals;
    use proptest::prelude::*;

    /// Capabilities as probed: `read_only` is what MariaDB's SYSTEM_VARIABLES says;
    /// MySQL says nothing (None) and innopilot's version table decides.
    fn caps(version: &str, read_only: impl Fn(&str) -> Option<bool>) -> Capabilities {
        crate::server::flavor::fixture_caps(version, read_only, ReplicaSource::NotReplica)
    }

    /// The defaults, engaged from the first tick (as published): the bucket tests are
    /// about the buckets, not the engagement.
    fn published_engage() -> WatermarkConfig {
        WatermarkConfig {
            engage_fill_pct: 0.0,
            ..WatermarkConfig::default()
        }
    }

    /// Until the fill reaches engage_fill_pct the server holds the age by itself: purge
    /// keeps its baseline threads (a Release) however high the fill below it. Reaching
    /// it engages the buckets, which stay engaged for engage_hold after the fill was
    /// last there; a reset forgets it.
    #[test]
    fn engages_only_once_the_fill_reaches_the_cliff() {
        let mut w = Watermark::new(WatermarkConfig {
            level_dwell: Duration::ZERO,
            ..WatermarkConfig::default()
        });
        // The fifth run's e: a climb to the async point (87.5 %) and back, never past 88 %.
        for (t, pct) in [(0, 30.0), (40, 70.0), (70, 87.9), (71, 2.0), (100, 60.0)] {
            let p = proposal_at(&mut w, pct, 100_000, t);
            assert_eq!((p.value, p.intent), (4, Intent::Release), "{}", p.reason);
        }
        let p = proposal_at(&mut w, 87.9, 100_000, 110);
        assert!(
            p.reason.starts_with(
                "redo fill 87.9 % has not reached 95 % of the sync-flush point in the last 10m"
            ),
            "{}",
            p.reason
        );
        assert!(
            p.reason.ends_with("the buckets would say: redo fill 87.9 % is at or above the high watermark 80 %: 1 purge thread (high mode)"),
            "{}",
            p.reason
        );
        // g and f: the fill reaches the sync-flush point.
        let p = proposal_at(&mut w, 96.0, 100_000, 120);
        assert_eq!((p.value, p.intent), (1, Intent::Act), "{}", p.reason);
        // Engaged for 10 minutes after the fill was last at 95 %: the buckets rule.
        assert_eq!(proposal_at(&mut w, 60.0, 100_000, 300).value, 2);
        assert_eq!(proposal_at(&mut w, 85.0, 100_000, 720).value, 1);
        // Past the hold, the baseline again.
        let p = proposal_at(&mut w, 85.0, 100_000, 721);
        assert_eq!((p.value, p.intent), (4, Intent::Release), "{}", p.reason);
        // A reset (reconnect, restart) forgets the engagement.
        proposal_at(&mut w, 99.0, 100_000, 800);
        assert_eq!(proposal_at(&mut w, 85.0, 100_000, 801).value, 1);
        w.reset();
        assert_eq!(proposal_at(&mut w, 85.0, 100_000, 802).value, 4);
    }

    /// The engagement belongs to the log it was seen in (the sixty-fifth run's i:
    /// engaged by a 32 MiB log, the buckets took a purge thread at 38 % of the
    /// 1 056 MiB it grew to): a larger log must reach the cliff again; a smaller one
    /// (a shrink) keeps it.
    #[test]
    fn a_grown_log_must_reach_the_cliff_again() {
        let mut w = Watermark::new(WatermarkConfig {
            level_dwell: Duration::ZERO,
            ..WatermarkConfig::default()
        });
        let at = |w: &mut Watermark, t: u64, pct: f64, mib: u64| {
            let mut s = signals_with_view(pct, 100_000, 0.0, None);
            s.t_ms = t * 1000;
            s.sample.redo.capacity = Some(mib << 20);
            threads_for(w, &s)
        };
        assert_eq!(at(&mut w, 0, 99.0, 32).value, 1);
        assert_eq!(at(&mut w, 1, 60.0, 32).value, 2);
        let p = at(&mut w, 2, 38.0, 1056);
        assert_eq!((p.value, p.intent), (4, Intent::Release), "{}", p.reason);
        // Shrunk back: the grown log's cliff engages, and the smaller one keeps it.
        assert_eq!(at(&mut w, 3, 96.0, 1056).value, 1);
        assert_eq!(at(&mut w, 4, 60.0, 32).value, 2);
    }

    /// Where purge threads are read-only (MySQL), high mode's smaller batch waits for
    /// the engagement too.
    #[test]
    fn the_batch_brake_waits_for_the_engagement() {
        let mut w = Watermark::new(WatermarkConfig::default());
        let base = baseline(4, 300);
        let out = decide(&mut w, &mysql(), &base, Some(90.0));
        let b = find(&out, Knob::PurgeBatchSize).unwrap();
        assert_eq!((b.value, b.intent), (300, Intent::Release), "{}", b.reason);
        let out = decide(&mut w, &mysql(), &base, Some(97.0));
        let b = find(&out, Knob::PurgeBatchSize).unwrap();
        assert_eq!((b.value, b.intent), (100, Intent::Act), "{}", b.reason);
    }

    fn mariadb() -> Capabilities {
        caps("10.11.19-MariaDB", |_| Some(false))
    }

    fn mariadb_10_6() -> Capabilities {
        caps("10.6.16-MariaDB", |n| Some(n == "innodb_purge_threads"))
    }

    fn mysql() -> Capabilities {
        caps("8.0.40", |_| None)
    }

    fn baseline(threads: u64, batch: u64) -> KnobValues {
        KnobValues::from([
            (Knob::PurgeThreads, threads),
            (Knob::PurgeBatchSize, batch),
            (Knob::MaxPurgeLag, 0),
            (Knob::MaxPurgeLagDelay, 0),
        ])
    }

    fn signals(pct: Option<f64>) -> Signals {
        Signals {
            redo_fill: pct.map(|p| p / 100.0),
            history_len: Some(250_000),
            ..Signals::default()
        }
    }

    fn decide(
        w: &mut Watermark,
        caps: &Capabilities,
        base: &KnobValues,
        pct: Option<f64>,
    ) -> Vec<Proposal> {
        let s = signals(pct);
        let input = PolicyInput {
            signals: &s,
            caps,
            current: base,
            baseline: base,
        };
        w.decide(&input)
    }

    /// Purge threads proposed at `pct` fill with `history` undo logs, all purgeable.
    fn threads_at(w: &mut Watermark, pct: f64, history: u64) -> Proposal {
        proposal_at(w, pct, history, 0)
    }

    /// The purge threads proposal at `pct` fill, `history` undo logs, time `t_s`.
    fn proposal_at(w: &mut Watermark, pct: f64, history: u64, t_s: u64) -> Proposal {
        proposal_held(w, pct, history, t_s, None)
    }

    /// [`proposal_at`] with users held at the maximum checkpoint age or not.
    fn proposal_held(
        w: &mut Watermark,
        pct: f64,
        history: u64,
        t_s: u64,
        held: Option<bool>,
    ) -> Proposal {
        let s = Signals {
            t_ms: t_s * 1000,
            redo_fill: Some(pct / 100.0),
            history_len: Some(history),
            users_held: held,
            ..Signals::default()
        };
        threads_for(w, &s)
    }

    /// The purge threads proposal for these signals on a MariaDB with 4 threads.
    fn threads_for(w: &mut Watermark, s: &Signals) -> Proposal {
        threads_with(w, s, 4)
    }

    /// [`threads_for`] with `in_effect` purge threads in effect.
    fn threads_with(w: &mut Watermark, s: &Signals, in_effect: u64) -> Proposal {
        let base = baseline(4, 127);
        let mut current = base.clone();
        current.insert(Knob::PurgeThreads, in_effect);
        let input = PolicyInput {
            signals: s,
            caps: &mariadb(),
            current: &current,
            baseline: &base,
        };
        find(&w.decide(&input), Knob::PurgeThreads).unwrap().clone()
    }

    /// Signals at `pct` % redo fill with `history` undo logs growing `rate` per second
    /// and, when `view_age_s` is given, a read view that old as the oldest
    /// transaction.
    fn signals_with_view(pct: f64, history: u64, rate: f64, view_age_s: Option<u64>) -> Signals {
        Signals {
            redo_fill: Some(pct / 100.0),
            history_len: Some(history),
            history_rate: Some(rate),
            sample: Sample {
                oldest_trx: view_age_s.map(|age_s| TrxInfo {
                    trx_id: "42".into(),
                    age_s,
                    holds_read_view: true,
                    ..TrxInfo::default()
                }),
                ..Sample::default()
            },
            ..Signals::default()
        }
    }

    /// A read view blocks purge (f_cold_view; i): its threads write no redo, so none
    /// is taken whatever the fill; a falling fill gives threads back, so purge has them
    /// when the view ends (the sixty-fourth run's i began its drain on the one thread
    /// high mode had left before the view). Once the view ends the fill rules again.
    #[test]
    fn a_blocked_purge_loses_no_thread() {
        let mut w = Watermark::new(WatermarkConfig {
            level_dwell: Duration::ZERO,
            ..published_engage()
        });
        let mut in_effect = 4;
        let mut at = |w: &mut Watermark, t: u64, pct: f64, view: Option<u64>| {
            // 1 000 undo logs/s since the old view began: all of it blocked. Without
            // it history stands still (no growth toward the yield limit).
            let rate = if view.is_some_and(|a| a >= 300) {
                1_000.0
            } else {
                0.0
            };
            let s = Signals {
                t_ms: t * 1000,
                ..signals_with_view(pct, 250_000, rate, view)
            };
            let p = threads_with(w, &s, in_effect);
            in_effect = p.value;
            p
        };
        assert_eq!(at(&mut w, 0, 90.0, None).value, 1);
        // Blocked: the fill falls to bucket 2 and gives two threads back.
        assert_eq!(at(&mut w, 1, 43.0, Some(301)).value, 3);
        let p = at(&mut w, 2, 87.0, Some(302));
        assert_eq!((p.value, p.intent), (3, Intent::Act));
        assert_eq!(
            p.reason,
            "a read view blocks purge (250000 undo logs blocked, about 0 purgeable): its \
             threads write no redo, so none is taken from it: 3 purge threads (in effect) \
             whatever the fill; unblocked, the buckets would say: redo fill 87.0 % is at \
             or above the high watermark 80 %: 1 purge thread (high mode)"
        );
        for (t, pct, want) in [(3, 55.0, 3), (4, 94.7, 3), (5, 25.0, 4), (6, 99.0, 4)] {
            let p = at(&mut w, t, pct, Some(300 + t));
            assert_eq!(p.value, want, "t={t}: {}", p.reason);
        }
        // A young view is the load's own transaction, not a blocker.
        assert_eq!(at(&mut w, 7, 43.0, Some(3)).value, 3);
        // The view ends: the fill rules again.
        assert_eq!(at(&mut w, 8, 90.0, None).value, 1);
        assert_eq!(at(&mut w, 9, 43.0, None).value, 3);
    }

    /// Sustained redo pressure must not pin purge at few threads forever (MDEV-32050):
    /// over `yield_history_undo_logs` of purgeable history the threads go back to the
    /// baseline, as a Release so the purge-rate policy may ask for more, until history
    /// is under 80 % of the limit; in high mode with users held one thread stays; 0
    /// keeps the published behaviour.
    #[test]
    fn purge_debt_over_its_limit_hands_threads_back() {
        let mut w = Watermark::new(WatermarkConfig {
            yield_history_undo_logs: 2_000_000,
            level_dwell: Duration::ZERO,
            ..published_engage()
        });
        assert_eq!(threads_at(&mut w, 60.0, 1_900_000).value, 2);
        let p = threads_at(&mut w, 60.0, 2_100_000);
        assert_eq!((p.value, p.intent), (4, Intent::Release), "{}", p.reason);
        assert!(
            p.reason
                .starts_with("purgeable history 2100000 is over the limit 2000000"),
            "{}",
            p.reason
        );
        assert!(
            p.reason.contains("without the limit: redo fill 60.0 %"),
            "{}",
            p.reason
        );
        // Hysteresis: still yielding at 1.7 M, back to the buckets under 1.6 M.
        assert_eq!(threads_at(&mut w, 60.0, 1_700_000).value, 4);
        assert_eq!(threads_at(&mut w, 60.0, 1_590_000).value, 2);
        // High mode with users held keeps one thread whatever the debt: the
        // sync-flush cliff.
        let p = proposal_held(&mut w, 99.0, 5_000_000, 0, Some(true));
        assert_eq!((p.value, p.intent), (1, Intent::Act), "{}", p.reason);
        // High mode with users at their rate (f_cold_view after the release), or not
        // known to be held: the debt wins.
        for held in [Some(false), None] {
            let p = proposal_held(&mut w, 99.0, 5_000_000, 0, held);
            assert_eq!((p.value, p.intent), (4, Intent::Release), "{}", p.reason);
        }
        let mut w = Watermark::new(WatermarkConfig {
            yield_history_undo_logs: 0,
            ..published_engage()
        });
        assert_eq!(threads_at(&mut w, 60.0, 50_000_000).value, 2);
    }

    /// History that grows fast enough to pass the limit within `yield_horizon` hands
    /// the threads back before it gets there (the fifty-fourth run's e: 2 400 undo
    /// logs/s all run, over the limit only at 175 s of 180), until the projection is
    /// under 80 % of the limit; growth behind a read view that blocks purge does not
    /// count; a 0 horizon waits until history is over.
    #[test]
    fn purge_debt_heading_for_its_limit_hands_threads_back() {
        let mut w = Watermark::new(no_dwell());
        // Two threads in effect, what the buckets say at 60 %: a read view that blocks
        // purge keeps no more than that.
        let growing = |w: &mut Watermark, history: u64, rate: f64, view: Option<u64>| {
            threads_with(w, &signals_with_view(60.0, history, rate, view), 2)
        };
        // 100 k + 1 000/s × 300 s = 400 k: the buckets rule (60 % fill: 2 threads).
        assert_eq!(growing(&mut w, 100_000, 1_000.0, None).value, 2);
        // 100 k + 2 400/s × 300 s = 820 k, over 500 k: the baseline, as a Release.
        let p = growing(&mut w, 100_000, 2_400.0, None);
        assert_eq!((p.value, p.intent), (4, Intent::Release), "{}", p.reason);
        assert!(
            p.reason.starts_with(
                "purgeable history 100000 grows 2400 undo logs/s: 820000 within 5m \
                 (yield_horizon), against the limit 500000 (yield_history_undo_logs): \
                 foreground protection yields, 4 purge threads (the baseline) until the \
                 projection is under 400000; without the limit: redo fill 60.0 %"
            ),
            "{}",
            p.reason
        );
        // Hysteresis: 150 k + 900/s × 300 s = 420 k still yields; 390 k does not.
        assert_eq!(growing(&mut w, 150_000, 900.0, None).value, 4);
        assert_eq!(growing(&mut w, 150_000, 800.0, None).value, 2);
        // Shrinking history projects nothing.
        assert_eq!(growing(&mut w, 450_000, -5_000.0, None).value, 2);
        // A read view that blocks purge: its history's growth is not purge's debt.
        let mut w = Watermark::new(no_dwell());
        let p = growing(&mut w, 250_000, 5_000.0, Some(300));
        assert_eq!((p.value, p.intent), (2, Intent::Act), "{}", p.reason);
        // A young view counts too once it holds back as much as purge may remove
        // (5 s × 5 000/s = 25 k of 20 k): no yield; without it, 1.52 M projected.
        let mut w = Watermark::new(no_dwell());
        assert_eq!(growing(&mut w, 20_000, 5_000.0, Some(5)).value, 2);
        assert_eq!(growing(&mut w, 20_000, 5_000.0, None).value, 4);
        // A zero horizon waits until history is over the limit.
        let mut w = Watermark::new(WatermarkConfig {
            yield_horizon: Duration::ZERO,
            ..no_dwell()
        });
        assert_eq!(growing(&mut w, 100_000, 50_000.0, None).value, 2);
        assert_eq!(growing(&mut w, 600_000, 0.0, None).value, 4);
    }

    /// At the cliff one thread stays for `level_dwell` after users were last held,
    /// whatever the debt: users come and go for seconds as a stall ends, and the held
    /// flag alone moved purge 1 → 2 → 1 → 2 (fifty-fifth run's g).
    #[test]
    fn the_cliff_keeps_its_thread_for_a_dwell_after_users_were_held() {
        let mut w = Watermark::new(WatermarkConfig {
            yield_history_undo_logs: 100_000,
            ..published_engage()
        });
        let p = proposal_held(&mut w, 100.0, 200_000, 100, Some(true));
        assert_eq!((p.value, p.intent), (1, Intent::Act), "{}", p.reason);
        for t in [105, 115, 130] {
            let p = proposal_held(&mut w, 98.0, 200_000, t, Some(false));
            assert_eq!((p.value, p.intent), (1, Intent::Act), "t={t}: {}", p.reason);
        }
        let p = proposal_held(&mut w, 98.0, 200_000, 131, Some(false));
        assert_eq!((p.value, p.intent), (4, Intent::Release), "{}", p.reason);
        // A reset forgets it.
        proposal_held(&mut w, 100.0, 200_000, 140, Some(true));
        w.reset();
        let p = proposal_held(&mut w, 98.0, 200_000, 141, Some(false));
        assert_eq!((p.value, p.intent), (4, Intent::Release), "{}", p.reason);
    }

    /// The defaults without the bucket dwell: tests that step the fill at one instant.
    fn no_dwell() -> WatermarkConfig {
        WatermarkConfig {
            level_dwell: Duration::ZERO,
            ..published_engage()
        }
    }

    /// Threads at `pct` fill at time `t_s`.
    fn threads_at_time(w: &mut Watermark, pct: f64, t_s: u64) -> u64 {
        proposal_at(w, pct, 1_000, t_s).value
    }

    /// A fill that swings between buckets every few seconds moves threads at most
    /// once per `level_dwell`; moves into and out of high mode are never held.
    #[test]
    fn a_bucket_is_held_for_its_dwell_but_high_mode_is_not() {
        let mut w = Watermark::new(published_engage());
        assert_eq!(threads_at_time(&mut w, 10.0, 0), 4);
        let mut changes = 0;
        let mut last = 4;
        for t in 1..=120u64 {
            let pct = if t % 6 < 3 { 10.0 } else { 60.0 };
            let now = threads_at_time(&mut w, pct, t);
            if now != last {
                changes += 1;
                last = now;
            }
        }
        // 120 s with a 30 s dwell: at most 4 moves, where the bare hysteresis made 40.
        assert!((1..=4).contains(&changes), "{changes} moves");
        let mut w = Watermark::new(published_engage());
        assert_eq!(threads_at_time(&mut w, 60.0, 0), 2);
        assert_eq!(threads_at_time(&mut w, 95.0, 1), 1);
        // ... nor is leaving it.
        assert_eq!(threads_at_time(&mut w, 10.0, 2), 4);
        // Bucket to bucket waits again.
        assert_eq!(threads_at_time(&mut w, 60.0, 3), 4);
        assert_eq!(threads_at_time(&mut w, 60.0, 33), 2);
    }

    fn threads(w: &mut Watermark, pct: f64) -> u64 {
        let ps = decide(w, &mariadb(), &baseline(4, 127), Some(pct));
        find(&ps, Knob::PurgeThreads)
            .expect("a purge threads proposal")
            .value
    }

    #[test]
    fn four_threads_map_to_buckets() {
        for (pct, want, intent) in [
            (10.0, 4, Intent::Release),
            (25.0, 4, Intent::Release),
            (40.0, 3, Intent::Act),
            (55.0, 2, Intent::Act),
            (70.0, 1, Intent::Act),
            (85.0, 1, Intent::Act),
        ] {
            let mut w = Watermark::new(published_engage());
            let ps = decide(&mut w, &mariadb(), &baseline(4, 127), Some(pct));
            let p = find(&ps, Knob::PurgeThreads).unwrap();
            assert_eq!((p.value, p.intent), (want, intent), "{pct} %: {}", p.reason);
            assert_eq!(p.policy, PolicyId::unranked(Watermark::NAME));
        }
    }

    #[test]
    fn reasons_carry_the_numbers() {
        let mut w = Watermark::new(published_engage());
        let ps = decide(&mut w, &mariadb(), &baseline(4, 127), Some(63.2));
        assert_eq!(
            find(&ps, Knob::PurgeThreads).unwrap().reason,
            "redo fill 63.2 % is in bucket 3 of 4 (50–65 %, watermarks 20–80 %): 2 purge threads"
        );
        let mut w = Watermark::new(published_engage());
        let ps = decide(&mut w, &mariadb(), &baseline(4, 127), Some(12.0));
        assert_eq!(
            find(&ps, Knob::PurgeThreads).unwrap().reason,
            "redo fill 12.0 % is below the low watermark 20 %: 4 purge threads"
        );
        let ps = decide(&mut w, &mariadb(), &baseline(4, 127), Some(21.0));
        let r = &find(&ps, Knob::PurgeThreads).unwrap().reason;
        assert!(
            r.contains("not yet 2 points above the 20 % boundary"),
            "{r}"
        );
    }

    /// A bucket held by `level_dwell` says so, not that the fill is within the
    /// hysteresis (the sixty-fourth real-server run's i: "redo fill 14.8 % is not yet 2
    /// points below the 50 % boundary").
    #[test]
    fn a_bucket_held_by_the_dwell_says_so() {
        let mut w = Watermark::new(published_engage());
        assert_eq!(threads_at_time(&mut w, 60.0, 0), 2);
        let r = proposal_at(&mut w, 14.8, 1_000, 6).reason;
        assert_eq!(
            r,
            "redo fill 14.8 % is below the low watermark 20 %, but a bucket is held for 30s \
             after a move (level_dwell; the last was 6 s ago), so the level stays in bucket 3 \
             of 4 (50–65 %, watermarks 20–80 %): 2 purge threads"
        );
        // Within the hysteresis, the hysteresis is named.
        let r = proposal_at(&mut w, 49.0, 1_000, 7).reason;
        assert!(
            r.contains("not yet 2 points below the 50 % boundary"),
            "{r}"
        );
    }

    #[test]
    fn boundaries_belong_to_the_upper_level() {
        // Watermarks whose edges (25, 37.5, 50, 62.5, 75 %) are exact binary fractions,
        // so fill × 100 lands exactly on them.
        let at = |pct: f64| {
            let mut w = Watermark::new(WatermarkConfig {
                low_pct: 25.0,
                high_pct: 75.0,
                ..published_engage()
            });
            let t = threads(&mut w, pct);
            (t, w.state.unwrap().level)
        };
        assert_eq!(at(25.0), (4, Level::Bucket(1)));
        assert_eq!(at(37.5), (3, Level::Bucket(2)));
        assert_eq!(at(62.5), (1, Level::Bucket(4)));
        assert_eq!(at(75.0), (1, Level::High));
    }

    #[test]
    fn hysteresis_does_not_flap_around_a_boundary() {
        // Boundary between bucket 1 (4 threads) and bucket 2 (3 threads) at 35 %.
        let mut w = Watermark::new(no_dwell());
        let seen: Vec<u64> = [34.9, 35.1, 34.9, 35.1, 34.9, 36.9]
            .iter()
            .map(|p| threads(&mut w, *p))
            .collect();
        assert_eq!(seen, [4; 6]);
        // Starting on the other side holds the other level just as well.
        let mut w = Watermark::new(no_dwell());
        let seen: Vec<u64> = [35.1, 34.9, 35.1, 34.9, 33.1]
            .iter()
            .map(|p| threads(&mut w, *p))
            .collect();
        assert_eq!(seen, [3; 5]);
        // Two points past the boundary, it moves.
        assert_eq!(threads(&mut w, 32.9), 4);
        assert_eq!(threads(&mut w, 36.9), 4);
        assert_eq!(threads(&mut w, 37.1), 3);
    }

    #[test]
    fn big_moves_skip_buckets() {
        let mut w = Watermark::new(no_dwell());
        assert_eq!(threads(&mut w, 10.0), 4);
        assert_eq!(threads(&mut w, 70.0), 1);
        assert_eq!(threads(&mut w, 40.0), 3);
    }

    /// Redo pressure is never handled by delaying DML: on MariaDB high mode is one
    /// purge thread, and the DML-delay pair is never proposed, in or out of it.
    #[test]
    fn high_mode_on_mariadb_is_one_thread_and_no_dml_delay() {
        let mut w = Watermark::new(no_dwell());
        for pct in [85.0, 95.0, 79.0, 50.0, 10.0] {
            let ps = decide(&mut w, &mariadb(), &baseline(4, 127), Some(pct));
            assert!(find(&ps, Knob::MaxPurgeLag).is_none(), "{ps:?}");
            assert!(find(&ps, Knob::MaxPurgeLagDelay).is_none(), "{ps:?}");
            assert!(find(&ps, Knob::PurgeBatchSize).is_none(), "{ps:?}");
        }
        let mut w = Watermark::new(no_dwell());
        let ps = decide(&mut w, &mariadb(), &baseline(4, 127), Some(85.0));
        let t = find(&ps, Knob::PurgeThreads).unwrap();
        assert_eq!((t.value, ps.len()), (1, 1));
        assert!(t.reason.contains("(high mode)"), "{}", t.reason);
    }

    #[test]
    fn high_mode_without_purge_threads_shrinks_the_batch() {
        for caps in [mysql(), mariadb_10_6()] {
            let mut w = Watermark::new(published_engage());
            let ps = decide(&mut w, &caps, &baseline(4, 300), Some(85.0));
            assert_eq!(ps.len(), 1, "{ps:?}");
            let b = find(&ps, Knob::PurgeBatchSize).unwrap();
            assert_eq!((b.value, b.intent), (100, Intent::Act), "{}", b.reason);
            assert!(b.reason.contains("baseline 300"), "{}", b.reason);
            // Never above the baseline.
            let mut w = Watermark::new(published_engage());
            let ps = decide(&mut w, &caps, &baseline(4, 50), Some(85.0));
            assert_eq!(find(&ps, Knob::PurgeBatchSize).unwrap().value, 50);
        }
    }

    #[test]
    fn leaving_high_mode_releases_what_it_set() {
        let mut w = Watermark::new(no_dwell());
        let base = baseline(4, 127);
        decide(&mut w, &mariadb(), &base, Some(85.0));
        // 79 % is within the hysteresis: still high mode.
        let ps = decide(&mut w, &mariadb(), &base, Some(79.0));
        assert!(find(&ps, Knob::PurgeThreads)
            .unwrap()
            .reason
            .contains("(high mode)"));
        // Below 80 − 2: bucket 4, one thread still, out of high mode.
        let ps = decide(&mut w, &mariadb(), &base, Some(77.9));
        let t = find(&ps, Knob::PurgeThreads).unwrap();
        assert_eq!(t.value, 1);
        assert!(!t.reason.contains("(high mode)"), "{}", t.reason);
        let ps = decide(&mut w, &mariadb(), &base, Some(10.0));
        assert_eq!(
            find(&ps, Knob::PurgeThreads).unwrap().intent,
            Intent::Release
        );

        let mut w = Watermark::new(no_dwell());
        let base = baseline(4, 300);
        decide(&mut w, &mysql(), &base, Some(90.0));
        let ps = decide(&mut w, &mysql(), &base, Some(60.0));
        let b = find(&ps, Knob::PurgeBatchSize).unwrap();
        assert_eq!((b.value, b.intent), (300, Intent::Release));
        // A release needs a baseline to hand back.
        let ps = decide(&mut w, &mysql(), &KnobValues::new(), Some(60.0));
        assert!(ps.is_empty(), "{ps:?}");
    }

    #[test]
    fn unknown_fill_holds_everything() {
        let mut w = Watermark::new(published_engage());
        assert_eq!(threads(&mut w, 40.0), 3);
        assert!(decide(&mut w, &mariadb(), &baseline(4, 127), None).is_empty());
        let mut s = signals(None);
        s.redo_fill = Some(f64::NAN);
        let base = baseline(4, 127);
        let input = PolicyInput {
            signals: &s,
            caps: &mariadb(),
            current: &base,
            baseline: &base,
        };
        assert!(w.decide(&input).is_empty());
        // The level survived the gap: 36 % is within the hysteresis of 35 %.
        assert_eq!(threads(&mut w, 36.0), 3);
    }

    #[test]
    fn reset_forgets_the_level() {
        let mut w = Watermark::new(published_engage());
        assert_eq!(threads(&mut w, 40.0), 3);
        assert_eq!(threads(&mut w, 34.0), 3);
        w.reset();
        assert_eq!(threads(&mut w, 34.0), 4);
    }

    #[test]
    fn disabled_proposes_nothing() {
        let mut w = Watermark::new(WatermarkConfig {
            enabled: false,
            ..published_engage()
        });
        assert!(decide(&mut w, &mariadb(), &baseline(4, 127), Some(90.0)).is_empty());
    }

    #[test]
    fn bucket_count_from_config_or_baseline() {
        let mut w = Watermark::new(WatermarkConfig {
            max_purge_threads: 8,
            ..no_dwell()
        });
        // 8 buckets of 7.5 points: 40 % is bucket 3 → 6 threads.
        assert_eq!(threads(&mut w, 40.0), 6);
        assert_eq!(threads(&mut w, 10.0), 8);
        // Neither known: no thread proposals, and nothing else on MariaDB.
        let mut w = Watermark::new(no_dwell());
        let base = KnobValues::from([(Knob::MaxPurgeLag, 0), (Knob::MaxPurgeLagDelay, 0)]);
        let ps = decide(&mut w, &mariadb(), &base, Some(40.0));
        assert!(ps.is_empty(), "{ps:?}");
        let ps = decide(&mut w, &mariadb(), &base, Some(90.0));
        assert!(ps.is_empty(), "{ps:?}");
    }

    /// Valid configurations as `Config::parse` accepts them: high > low + hysteresis.
    fn any_cfg(max_hyst: f64) -> impl Strategy<Value = WatermarkConfig> {
        (0.0..100.0f64, 0.0..=max_hyst, 0.01..30.0f64, 1u64..=5000).prop_map(
            move |(low, h, extra, batch)| WatermarkConfig {
                low_pct: low,
                hysteresis_pct: h,
                high_pct: low + h + extra,
                high_batch_size: batch,
                ..published_engage()
            },
        )
    }

    proptest! {
        #[test]
        fn proposals_stay_in_bounds(
            cfg in any_cfg(20.0),
            n in 1u64..=32,
            n_from_config in any::<bool>(),
            batch_base in 1u64..=5000,
            on_mariadb in any::<bool>(),
            fills in prop::collection::vec(0.0..150.0f64, 1..80),
        ) {
            let caps = if on_mariadb { mariadb() } else { mysql() };
            let cfg = WatermarkConfig {
                max_purge_threads: if n_from_config { n } else { 0 },
                ..cfg
            };
            let base = baseline(if n_from_config { 4 } else { n }, batch_base);
            let mut w = Watermark::new(cfg);
            for pct in fills {
                let ps = decide(&mut w, &caps, &base, Some(pct));
                for p in &ps {
                    prop_assert_eq!(ps.iter().filter(|q| q.knob == p.knob).count(), 1);
                    match p.knob {
                        Knob::PurgeThreads => {
                            prop_assert!((1..=n).contains(&p.value), "{pct}: {p:?}");
                            prop_assert_eq!(p.intent == Intent::Release, Some(&p.value) == base.get(&Knob::PurgeThreads));
                        }
                        Knob::PurgeBatchSize => {
                            prop_assert!((1..=batch_base).contains(&p.value), "{pct}: {p:?}");
                        }
                        other => prop_assert!(false, "unexpected knob {other}"),
                    }
                }
            }
        }

        #[test]
        fn more_fill_never_means_more_threads(
            cfg in any_cfg(0.0),
            n in 1u64..=32,
            a in 0.0..150.0f64,
            b in 0.0..150.0f64,
        ) {
            let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
            let mut w = Watermark::new(WatermarkConfig { max_purge_threads: n, ..cfg.clone() });
            let t_lo = threads(&mut w, lo);
            let mut w = Watermark::new(WatermarkConfig { max_purge_threads: n, ..cfg });
            let t_hi = threads(&mut w, hi);
            prop_assert!(t_lo >= t_hi, "{lo} % → {t_lo}, {hi} % → {t_hi}");
        }

        /// Turning back takes a swing of more than twice the hysteresis: an up move needs
        /// boundary + h, the following down move boundary − h (and vice versa).
        #[test]
        fn reversals_need_twice_the_hysteresis(
            cfg in any_cfg(20.0),
            n in 1u64..=32,
            fills in prop::collection::vec(0.0..150.0f64, 1..80),
        ) {
            let h = cfg.hysteresis_pct;
            let mut w = Watermark::new(WatermarkConfig { max_purge_threads: n, ..cfg });
            let mut last_move: Option<(f64, bool)> = None;
            let mut level = None;
            for pct in fills {
                threads(&mut w, pct);
                let now = w.state.unwrap().level;
                if let Some(prev) = level.filter(|l| *l != now) {
                    let up = now > prev;
                    if let Some((at, was_up)) = last_move {
                        if was_up != up {
                            prop_assert!((pct - at).abs() > 2.0 * h - 1e-9, "{at} → {pct} with h {h}");
                        }
                    }
                    last_move = Some((pct, up));
                }
                level = Some(now);
            }
        }
    }
}
