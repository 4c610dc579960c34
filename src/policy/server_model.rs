//! The servers' own formulas, as the server code computes them: the DML delay each
//! flavor applies for a given history and `innodb_max_purge_lag`(`_delay`), its
//! inverse (the lag that yields a wanted delay), the per-row cost of a delay, and
//! whether the page cleaner is evicting. Not a policy: every policy that reasons about
//! the DML brake or the page cleaner, and the simulator, use these same functions.

use crate::server::{Flavor, Knob, KnobValues};
use crate::signals::Signals;

/// MySQL 8.0.14+'s DML delay (trx0purge.cc, `trx_purge_dml_delay`), in µs: only when
/// history exceeds purge_threads × batch_size and max_purge_lag; counts all history,
/// purgeable or not.
pub fn mysql_dml_delay_us(
    history: u64,
    max_purge_lag: u64,
    max_delay: u64,
    purge_threads: u64,
    batch_size: u64,
) -> u64 {
    if max_purge_lag == 0 || history <= purge_threads.saturating_mul(batch_size) {
        return 0;
    }
    let ratio = history as f64 / max_purge_lag as f64;
    if ratio <= 1.0 {
        return 0;
    }
    // innodb_max_purge_lag_delay = 0 caps the delay at 0: no delay at all.
    let d = ((ratio - 0.9995) * 10_000.0).max(0.0);
    (d as u64).min(max_delay)
}

/// MariaDB 10.11's DML delay (trx0purge.cc, `trx_purge`), in µs, for a purge batch
/// that handled pages; a batch that handled none (purge blocked) sets 0.
pub fn mariadb_dml_delay_us(history: u64, max_purge_lag: u64, max_delay: u64) -> u64 {
    if max_purge_lag == 0 || history <= max_purge_lag || max_delay == 0 {
        return 0;
    }
    let d = history.saturating_mul(10_000) / max_purge_lag;
    max_delay.min(d.saturating_sub(5_000))
}

/// The delay this flavor's formula gives (MariaDB: while purge handles pages).
pub fn dml_delay_us(
    flavor: Flavor,
    history: u64,
    max_purge_lag: u64,
    max_delay: u64,
    knobs: &KnobValues,
) -> u64 {
    match flavor {
        Flavor::MariaDb => mariadb_dml_delay_us(history, max_purge_lag, max_delay),
        Flavor::MySql => mysql_dml_delay_us(
            history,
            max_purge_lag,
            max_delay,
            knobs.get(&Knob::PurgeThreads).copied().unwrap_or(4),
            knobs.get(&Knob::PurgeBatchSize).copied().unwrap_or(300),
        ),
    }
}

/// The user threads in a statement, from Threads_running (one reading or an average):
/// less innopilot's own sampling query, which Threads_running counts, and at least one,
/// so a row time is never divided from zero threads.
pub fn user_threads(threads_running: f64) -> f64 {
    (threads_running - 1.0).max(1.0)
}

/// How long one row change takes a user thread, µs: the threads running statements
/// ([`user_threads`]) over the rows changed per second (Little's law). `None` when the
/// DML rate is unknown or under 1 row/s.
pub fn row_time_us(s: &Signals) -> Option<f64> {
    let dml = s.dml_rate.filter(|r| r.is_finite() && *r >= 1.0)?;
    let threads = user_threads(s.sample.threads_running? as f64);
    Some(threads / dml * 1e6)
}

/// The per-row DML delay that slows row changes by `slowdown_pct` % when one takes
/// `row_us`: a thread's rate goes from 1/t to 1/(t + d), a loss of d/(t + d), so
/// d = t·s/(1 − s). At least 1 µs. Both servers sleep once per row changed
/// (MariaDB `row_mysql_delay_if_needed`, MySQL `row_mysql_delay_if_needed`), so a
/// fixed delay that is small for a 5 ms statement is a wall for a 90 µs one: at 1 ms
/// the real-server benchmark's 45 k rows/s fell to 4 k.
pub fn delay_for_slowdown_us(row_us: f64, slowdown_pct: f64) -> u64 {
    let s = (slowdown_pct / 100.0).clamp(0.0, 0.99);
    let d = row_us * s / (1.0 - s);
    if d.is_finite() {
        (d.round() as u64).max(1)
    } else {
        1
    }
}

/// Rounds down to two significant digits (123456 → 120000), so the lag does not
/// change with every record of history.
fn two_digits_down(x: u64) -> u64 {
    if x < 100 {
        return x;
    }
    let mut p = 1u64;
    while x / p >= 100 {
        p *= 10;
    }
    x / p * p
}

/// The `innodb_max_purge_lag` that makes this flavor delay DML by `delay_us` at
/// `history` (with `innodb_max_purge_lag_delay` = `delay_us` as the cap): the largest
/// lag whose formula reaches the cap, at most `knee` (the history level where the delay
/// should stop), rounded down to two significant digits. At least 1.
pub fn lag_for_delay(flavor: Flavor, history: u64, delay_us: u64, knee: u64) -> u64 {
    let h = history as f64;
    let d = delay_us as f64;
    let most = match flavor {
        // (h/L − 0.9995)·10000 ≥ d  ⇔  L ≤ h / (0.9995 + d/10000)
        Flavor::MySql => h / (0.9995 + d / 10_000.0),
        // 10000·h/L − 5000 ≥ d and h > L  ⇔  L ≤ 10000·h/(5000 + d), L < h
        Flavor::MariaDb => (10_000.0 * h / (5_000.0 + d)).min(h - 1.0),
    };
    let most = if most.is_finite() && most >= 1.0 {
        most.floor() as u64
    } else {
        1
    };
    two_digits_down(most.min(knee.max(1))).max(1)
}

/// The page cleaner is evicting when fewer than this share of the pages flushed in a
/// second were flush-list pages (the rest the LRU's): the buffer pool is short of free
/// pages, and every page read must first have one freed.
/// MariaDB's `buf_flush_page_cleaner()` (buf0flu.cc) checks `need_LRU_eviction()`
/// (free list under half of innodb_lru_scan_depth, or a user waiting for a free page)
/// before anything else and, unless a flush-ahead is pending, runs
/// `buf_flush_LRU(srv_max_io_capacity)` and goes back to the top: no flush-list batch,
/// so io_capacity_max paces no flush-list flushing before the async point, and a
/// larger one is only a larger LRU batch. The checkpoint moves only as far as the
/// LRU's writes retire the oldest pages (`tests/page_cleaner.rs` measured 124 adaptive
/// pages against 129 729 LRU pages in 10 s). The fifth real-server run's e_purge_behind
/// (128 MiB pool, read-bound updates) is the case: with the page cleaner woken the
/// fill still rose about 1 %/s to the async point and collapsed there, while the
/// flush policy raised io_capacity_max 2 000 → 12 500 to no effect. Below the async
/// point the flush policy holds io_capacity_max then; the purge-rate policy adds no
/// purge thread.
pub const EVICTING_LIST_SHARE: f64 = 0.1;

/// The page cleaner is evicting ([`EVICTING_LIST_SHARE`]): the LRU's and all pages
/// flushed per second this tick, when fewer than that share were flush-list pages.
/// `None` without the LRU counter (MySQL, MariaDB < 10.5) or without flushing.
pub fn page_cleaner_evicting(s: &Signals) -> Option<(f64, f64)> {
    let flushed = s
        .pages_flushed_rate
        .filter(|r| r.is_finite() && *r >= 1.0)?;
    let lru = s.lru_flushed_rate.filter(|r| r.is_finite() && *r >= 0.0)?;
    let list = (flushed - lru).max(0.0);
    (list < EVICTING_LIST_SHARE * flushed).then_some((lru, flushed))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Threads_running counts innopilot's own sampling query: one less, and never
    /// fewer than one user thread, for a reading and for an average alike.
    #[test]
    fn user_threads_leave_out_the_sampling_query() {
        assert_eq!(user_threads(17.0), 16.0);
        assert_eq!(user_threads(2.5), 1.5);
        assert_eq!(user_threads(1.0), 1.0);
        assert_eq!(user_threads(0.0), 1.0);
        let s = Signals {
            dml_rate: Some(8_000.0),
            sample: crate::server::Sample {
                threads_running: Some(17),
                ..Default::default()
            },
            ..Signals::default()
        };
        assert_eq!(row_time_us(&s), Some(2_000.0));
    }

    /// Evicting is fewer than 10 % of the pages flushed in a second from the flush
    /// list; nothing is known without the LRU counter or without flushing.
    #[test]
    fn the_page_cleaner_evicts_when_the_lru_flushes_nine_pages_in_ten() {
        let at = |flushed: Option<f64>, lru: Option<f64>| {
            page_cleaner_evicting(&Signals {
                pages_flushed_rate: flushed,
                lru_flushed_rate: lru,
                ..Signals::default()
            })
        };
        assert_eq!(at(Some(5_000.0), Some(5_000.0)), Some((5_000.0, 5_000.0)));
        assert_eq!(at(Some(1_000.0), Some(901.0)), Some((901.0, 1_000.0)));
        assert_eq!(
            at(Some(1_000.0), Some(900.0)),
            None,
            "10 % flush-list pages"
        );
        assert_eq!(at(Some(1_000.0), Some(0.0)), None);
        assert_eq!(at(Some(1_000.0), None), None, "MySQL: no LRU counter");
        assert_eq!(at(Some(0.5), Some(0.5)), None, "nothing flushed");
        assert_eq!(at(None, Some(100.0)), None);
        assert_eq!(at(Some(f64::NAN), Some(100.0)), None);
    }

    /// The real-server benchmark's load: 4 sysbench threads (Threads_running 5 with
    /// innopilot's own query) changing 45 000 rows/s, 89 µs a row.
    #[test]
    fn small_delays_follow_the_row_time() {
        let mut s = Signals {
            dml_rate: Some(45_000.0),
            ..Signals::default()
        };
        s.sample.threads_running = Some(5);
        let t = row_time_us(&s).unwrap();
        assert!((t - 88.9).abs() < 0.1, "{t}");
        // 20 %: d = t·0.2/0.8 ≈ 22 µs.
        assert_eq!(delay_for_slowdown_us(t, 20.0), 22);
        // Unknown or idle: no row time.
        s.dml_rate = None;
        assert!(row_time_us(&s).is_none());
        s.dml_rate = Some(0.5);
        assert!(row_time_us(&s).is_none());
    }

    #[test]
    fn delay_formulas_per_flavor() {
        assert_eq!(mysql_dml_delay_us(100_000, 100_000, 10_000, 4, 300), 0);
        // (2 − 0.9995)·10000 = 10005, capped.
        assert_eq!(mysql_dml_delay_us(200_000, 100_000, 10_000, 4, 300), 10_000);
        assert_eq!(mysql_dml_delay_us(110_000, 100_000, 10_000, 4, 300), 1_005);
        // Not above purge_threads × batch_size: nothing.
        assert_eq!(mysql_dml_delay_us(1_000, 10, 10_000, 4, 300), 0);
        assert_eq!(mariadb_dml_delay_us(100_001, 100_000, 10_000), 5_000);
        assert_eq!(mariadb_dml_delay_us(120_000, 100_000, 10_000), 7_000);
        assert_eq!(mariadb_dml_delay_us(714_000, 100_000, 0), 0);
    }

    #[test]
    fn lag_for_delay_reaches_the_wanted_delay() {
        let knobs = KnobValues::from([(Knob::PurgeThreads, 4), (Knob::PurgeBatchSize, 300)]);
        for flavor in [Flavor::MySql, Flavor::MariaDb] {
            for (h, d, knee) in [
                (812_000, 1_200, 500_000),
                (812_000, 9_000, 500_000),
                (600_000, 50, 500_000),
                (520_000, 3_000, 500_000),
                (2_000, 10, 1_500),
            ] {
                let lag = lag_for_delay(flavor, h, d, knee);
                assert!(lag <= knee && lag >= 1, "{flavor} {h} {d}: {lag}");
                let got = dml_delay_us(flavor, h, lag, d, &knobs);
                assert_eq!(got, d, "{flavor} h {h} d {d}: lag {lag} gives {got}");
            }
        }
        assert_eq!(two_digits_down(123_456), 120_000);
        assert_eq!(two_digits_down(99), 99);
        assert_eq!(lag_for_delay(Flavor::MariaDb, 0, 100, 10), 1);
    }

    proptest! {
        /// The delay never costs more than the slowdown asked for (beyond rounding to
        /// whole µs), and grows with the slowdown.
        #[test]
        fn small_delay_bounds(
            row_us in 1.0..100_000.0f64,
            pct in 1.0..90.0f64,
        ) {
            let d = delay_for_slowdown_us(row_us, pct);
            let loss = d as f64 / (row_us + d as f64);
            prop_assert!(d == 1 || loss <= pct / 100.0 + 0.5 / (row_us + d as f64), "{d} {loss}");
            prop_assert!(delay_for_slowdown_us(row_us, (pct + 5.0).min(90.0)) >= d);
        }
    }
}
