//! The purge estimate: history split into what purge can remove now (*purgeable*)
//! and what the oldest read view holds back (*blocked*), and the transaction that
//! holds it. Pure: `status`, `diagnose`, metrics and the policies all call [`estimate`]
//! on the same [`Signals`].
//!
//! Purge may only remove the undo logs of transactions that committed before the
//! oldest read view was created. Whatever entered history after that view began is
//! *blocked* until the view ends, whatever purge threads or DML delay do. [`estimate`]
//! splits `Innodb_history_list_length` H into purgeable P and blocked B = H − P from
//! what [`Signals`] carry:
//!
//! - no transaction holds a read view at least `min_view_age` old: P = H;
//! - otherwise, since the view began B only grows and P only shrinks, so P now is at
//!   most the lowest history seen since then (`ViewHistory::min`, from the window's
//!   hour-long memory): P ≤ min(H, H_min);
//! - purge kept draining P after that minimum, at least about as fast as the fastest
//!   drain seen lately ([`Signals::history_drain_rate`]): P ≤ H_min − drain · (now − t_min);
//! - when the view began before innopilot's memory (started, reconnected, or older
//!   than an hour), the unseen part of its life is extrapolated: history grew at least
//!   at today's rate all along, so B ≥ max(0, history_rate) · (unseen seconds).
//!
//! Every step only *lowers* the purgeable estimate, so errors go toward "blocked",
//! which means toward *not* delaying users. The failure modes are in
//! `docs/signals.md`.
//!
//! The loop cannot see read views: `information_schema.INNODB_TRX` has no column for
//! them. The view it splits by is a *hypothesis*: the oldest transaction, when its
//! isolation level and command suggest one ([`Culprit::evidence`] says why). An old
//! idle write-only transaction holds none; taking it for the holder only moves the
//! split toward "blocked" (its start is earlier than the real view's).
//!
//! `diagnose`, off the loop, reads SHOW ENGINE INNODB STATUS once and splits by the
//! server's own transaction numbers instead ([`split_by_trx_numbers`]), which is exact
//! where it matters most: a view opened before any of the history.
//!
//! Part of what the view split calls purgeable may already be *handled*: purge has
//! removed its old versions, and the server has not yet freed its undo logs from
//! history. MariaDB 10.11 frees them only after a batch, from rollback segments no
//! transaction is using (`purge_sys_t::iterator::free_history_rseg()`, MDEV-33213), so
//! under many busy writers `Innodb_history_list_length` can rise by hundreds of
//! thousands while purge keeps up (the hundred-and-twentieth real-server run), and
//! falls to about 0 seconds after the writers stop. Where the purge counters of
//! INNODB_METRICS are enabled, [`crate::signals::SignalWindow`] estimates that share
//! ([`Signals::unfreed_history`]) and [`estimate`] takes it out of the purgeable part
//! (`history = purgeable + blocked + unfreed`); without them it is 0, as before.
//!
//! History is counted in *undo logs*: `Innodb_history_list_length` is the number of
//! committed transactions whose undo purge has not yet freed, one per transaction that
//! updated or deleted, however many rows it changed.

use std::time::Duration;

use serde::Serialize;

use super::Signals;
use crate::server::sample::TrxInfo;

/// The transaction whose read view keeps history from being purged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Culprit {
    pub trx_id: String,
    /// Connection id: `KILL <thread_id>` ends it.
    pub thread_id: Option<u64>,
    pub user: Option<String>,
    pub host: Option<String>,
    /// Seconds since the transaction started.
    pub age_s: u64,
    /// Why it is taken to hold the oldest read view: in the loop a hypothesis, never
    /// a fact (see the module documentation).
    pub evidence: String,
}

impl Culprit {
    pub fn from_trx(t: &TrxInfo) -> Self {
        Culprit {
            trx_id: t.trx_id.clone(),
            thread_id: t.thread_id,
            user: t.user.clone(),
            host: t.host.clone(),
            age_s: t.age_s,
            evidence: format!(
                "suspected, not confirmed: the oldest transaction, {} isolation, {}",
                t.isolation.as_deref().unwrap_or("unknown"),
                match t.command.as_deref() {
                    Some("Sleep") => "idle in its transaction".to_string(),
                    Some(c) => format!("command {c}"),
                    None => "command unknown".to_string(),
                }
            ),
        }
    }

    /// `user@host`, with `?` for what is unknown.
    pub fn account(&self) -> String {
        format!(
            "{}@{}",
            self.user.as_deref().unwrap_or("?"),
            self.host.as_deref().unwrap_or("?")
        )
    }

    /// "trx 1234 (thread 56, app@10.0.0.5) open 312 s".
    pub fn describe(&self) -> String {
        let thread = self
            .thread_id
            .map_or_else(|| "thread ?".to_string(), |t| format!("thread {t}"));
        format!(
            "trx {} ({thread}, {}) open {} s",
            self.trx_id,
            self.account(),
            self.age_s
        )
    }
}

/// How the purgeable/blocked split was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Basis {
    /// No transaction holds a read view at least `min_view_age` old: all history is
    /// purgeable.
    NoBlockingView,
    /// The view began while innopilot was watching: history at its start is known.
    ViewStartSeen,
    /// The view began before innopilot's memory: the unseen part is extrapolated from
    /// the current history rate.
    Extrapolated,
    /// Split by the server's transaction numbers, with the holder confirmed from SHOW
    /// ENGINE INNODB STATUS (`diagnose`): [`split_by_trx_numbers`].
    TrxNumbers,
}

/// History split into what purge can remove now and what a read view blocks.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PurgeEstimate {
    /// `Innodb_history_list_length`: undo logs (committed transactions) not yet purged.
    pub history: u64,
    /// Estimated part purge can remove now (an upper estimate).
    pub purgeable: u64,
    /// Newer than the oldest read view: purge may not touch it until the view ends.
    pub blocked: u64,
    /// Handled by purge but not yet freed from history ([`Signals::unfreed_history`]):
    /// not debt. 0 where the purge counters are off. `history = purgeable + blocked +
    /// unfreed`.
    #[serde(default)]
    pub unfreed: u64,
    /// The transaction holding the oldest read view, when it is old enough to matter.
    pub culprit: Option<Culprit>,
    pub basis: Basis,
}

impl PurgeEstimate {
    /// Purge is blocked: a read view holds back at least as much history as purge can
    /// still remove. DML delay cannot help then.
    pub fn is_blocked(&self) -> bool {
        // Against the view's own split: the unfreed share is on the purgeable side of
        // the view.
        self.culprit.is_some()
            && self.blocked > 0
            && self.blocked >= self.purgeable.saturating_add(self.unfreed)
    }
}

/// Splits history into purgeable and blocked (see the module documentation). `None`
/// when history length is unknown. Pure: `status`, metrics and the policy all call it
/// on the same [`Signals`].
pub fn estimate(signals: &Signals, min_view_age: Duration) -> Option<PurgeEstimate> {
    let mut e = split_view(signals, min_view_age)?;
    // Handled-but-unfreed undo is part of what the view split calls purgeable (the
    // server frees it without purging it again).
    e.unfreed = signals.unfreed_history.unwrap_or(0).min(e.purgeable);
    e.purgeable -= e.unfreed;
    Some(e)
}

/// History split by the oldest read view alone: purgeable and blocked.
fn split_view(signals: &Signals, min_view_age: Duration) -> Option<PurgeEstimate> {
    let h = signals.history_len?;
    let view = signals
        .sample
        .oldest_trx
        .as_ref()
        .filter(|t| t.holds_read_view && t.age_s >= min_view_age.as_secs());
    let Some(trx) = view else {
        return Some(PurgeEstimate {
            history: h,
            purgeable: h,
            blocked: 0,
            unfreed: 0,
            culprit: None,
            basis: Basis::NoBlockingView,
        });
    };
    let age_s = trx.age_s as f64;
    // Growth before memory began, at least today's rate (0 when shrinking).
    let inflow = signals
        .history_rate
        .filter(|r| r.is_finite())
        .unwrap_or(0.0)
        .max(0.0);
    let (purgeable, basis) = match signals.view_history {
        Some(v) => {
            let (unseen_blocked, basis) = if v.at_start.is_some() {
                (0.0, Basis::ViewStartSeen)
            } else {
                (inflow * (age_s - v.covered_s).max(0.0), Basis::Extrapolated)
            };
            let mut p = v.min as f64 - unseen_blocked;
            if let Some(d) = signals.history_drain_rate.filter(|d| d.is_finite()) {
                let since = signals.t_ms.saturating_sub(v.min_t_ms) as f64 / 1000.0;
                p -= d.max(0.0) * since;
            }
            (p, basis)
        }
        None => (h as f64 - inflow * age_s, Basis::Extrapolated),
    };
    let purgeable = (purgeable.max(0.0) as u64).min(h);
    Some(PurgeEstimate {
        history: h,
        purgeable,
        blocked: h - purgeable,
        unfreed: 0,
        culprit: Some(Culprit::from_trx(trx)),
        basis,
    })
}

/// The server's own transaction numbers, from the TRANSACTIONS section of SHOW ENGINE
/// INNODB STATUS (read once, by `diagnose`: the statement can hang).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TrxNumbers {
    /// `Trx id counter C`: the next number the server hands out. Transaction ids and
    /// commit numbers come from this one counter (`trx_sys.get_new_trx_id()` in both
    /// servers).
    pub counter: u64,
    /// `Purge done for trx's n:o < P`: purge has handled every commit numbered below P.
    pub purged_below: u64,
}

impl TrxNumbers {
    /// Reads `Trx id counter` and `Purge done for trx's n:o <` (decimal, as MariaDB
    /// ≥ 10.2 and MySQL ≥ 5.6 print them) from SHOW ENGINE INNODB STATUS text.
    pub fn parse(text: &str) -> Option<Self> {
        fn first_u64(s: &str) -> Option<u64> {
            let d: String = s
                .trim_start()
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            d.parse().ok()
        }
        let mut counter = None;
        let mut purged_below = None;
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("Trx id counter ") {
                // Old servers printed two words or hex: then the line is not taken.
                counter =
                    first_u64(rest).filter(|_| rest.trim().bytes().all(|b| b.is_ascii_digit()));
            } else if let Some(rest) = line.strip_prefix("Purge done for trx's n:o < ") {
                purged_below = first_u64(rest).filter(|_| {
                    rest.split_whitespace()
                        .next()
                        .is_some_and(|w| w.bytes().all(|b| b.is_ascii_digit()))
                });
            }
        }
        Some(TrxNumbers {
            counter: counter?,
            purged_below: purged_below?,
        })
    }
}

/// Splits history H into (purgeable, blocked) by transaction numbers, given the limit
/// L of the oldest read view (`will not see trx with id >= L`). Purge may only remove
/// the undo of commits numbered below the view's limit (`purge_sys.view`, a copy of the
/// oldest view: trx0purge.cc), and of the numbers handed out since purge's position P
/// those from L on went to transactions the view cannot see:
///
/// ```text
/// blocked ≈ H · (C − max(L, P)) / (C − P),   purgeable = H − blocked
/// ```
///
/// Exact at both ends, which are the cases a DBA acts on: L ≤ P (purge has reached the
/// view; all of H is blocked) and L ≥ C (nothing began since the view; nothing is
/// blocked). In between it assumes the transactions that leave history are spread
/// evenly over the numbers; numbers also go to transactions that leave none (insert
/// only, rolled back), so the error is their uneven share on either side of L. With
/// no read view open there is nothing to split: everything is purgeable.
pub fn split_by_trx_numbers(history: u64, n: TrxNumbers, view_limit: u64) -> (u64, u64) {
    let (c, p) = (n.counter, n.purged_below);
    if view_limit >= c {
        return (history, 0);
    }
    if view_limit <= p {
        return (0, history);
    }
    let share = (c - view_limit) as f64 / (c - p) as f64;
    let blocked = ((history as f64 * share).round() as u64).min(history);
    (history - blocked, blocked)
}

/// Fixtures shared with the policies' tests.
#[cfg(test)]
pub(crate) mod testkit {
    use super::*;
    use crate::server::sample::Sample;

    pub fn trx(age_s: u64, holds: bool) -> TrxInfo {
        TrxInfo {
            trx_id: "1234".into(),
            thread_id: Some(56),
            age_s,
            user: Some("app".into()),
            host: Some("10.0.0.5".into()),
            state: Some("RUNNING".into()),
            isolation: Some("REPEATABLE READ".into()),
            command: Some("Sleep".into()),
            holds_read_view: holds,
            active_count: Some(5),
        }
    }

    pub fn signals_with(history: u64, rate: f64, trx: Option<TrxInfo>) -> Signals {
        Signals {
            t_ms: 100_000,
            history_len: Some(history),
            history_rate: Some(rate),
            dml_rate: Some(10_000.0),
            redo_fill: Some(0.1),
            window_s: 10.0,
            sample: Sample {
                t_ms: 100_000,
                history_len: Some(history),
                oldest_trx: trx,
                ..Sample::default()
            },
            ..Signals::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testkit::{signals_with, trx};
    use super::*;
    use crate::server::sample::Sample;
    use crate::signals::{SignalWindow, ViewHistory};
    use proptest::prelude::*;

    #[test]
    fn without_a_read_view_everything_is_purgeable() {
        let s = signals_with(700_000, 5_000.0, None);
        let e = estimate(&s, Duration::from_secs(10)).unwrap();
        assert_eq!(
            (e.purgeable, e.blocked, e.basis),
            (700_000, 0, Basis::NoBlockingView)
        );
        assert!(!e.is_blocked());
        // A young view, or one that holds no read view, does not count.
        for t in [trx(5, true), trx(600, false)] {
            let s = signals_with(700_000, 5_000.0, Some(t));
            let e = estimate(&s, Duration::from_secs(10)).unwrap();
            assert_eq!(e.blocked, 0);
            assert!(e.culprit.is_none());
        }
        assert!(estimate(&Signals::default(), Duration::ZERO).is_none());
    }

    #[test]
    fn history_since_the_view_began_is_blocked() {
        let mut s = signals_with(305_000, 30_000.0, Some(trx(10, true)));
        s.view_history = Some(ViewHistory {
            at_start: Some(5_000),
            min: 5_000,
            min_t_ms: 90_000,
            covered_s: 10.0,
        });
        let e = estimate(&s, Duration::from_secs(10)).unwrap();
        assert_eq!(e.basis, Basis::ViewStartSeen);
        assert_eq!((e.purgeable, e.blocked), (5_000, 300_000));
        assert!(e.is_blocked());
        assert_eq!(
            e.culprit.as_ref().unwrap().describe(),
            "trx 1234 (thread 56, app@10.0.0.5) open 10 s"
        );
        // Purge drained at 80 000/s lately: the 5 000 from before are long gone.
        s.history_drain_rate = Some(80_000.0);
        let e = estimate(&s, Duration::from_secs(10)).unwrap();
        assert_eq!((e.purgeable, e.blocked), (0, 305_000));
    }

    #[test]
    fn a_view_older_than_memory_is_extrapolated() {
        // innopilot started 5 s ago; the view is 300 s old and history grows 2 000/s.
        let mut s = signals_with(800_000, 2_000.0, Some(trx(300, true)));
        s.view_history = Some(ViewHistory {
            at_start: None,
            min: 790_000,
            min_t_ms: 95_000,
            covered_s: 5.0,
        });
        let e = estimate(&s, Duration::from_secs(10)).unwrap();
        assert_eq!(e.basis, Basis::Extrapolated);
        // 295 unseen seconds × 2 000/s = 590 000 blocked before memory began.
        assert_eq!(e.purgeable, 200_000);
        assert_eq!(e.blocked, 600_000);
        // `status` has two samples and no memory: the rate over the view's whole life.
        s.view_history = None;
        let e = estimate(&s, Duration::from_secs(10)).unwrap();
        assert_eq!((e.purgeable, e.blocked), (200_000, 600_000));
        // A shrinking history extrapolates nothing.
        let s = signals_with(800_000, -100.0, Some(trx(300, true)));
        assert_eq!(estimate(&s, Duration::ZERO).unwrap().blocked, 0);
    }

    #[test]
    fn the_window_feeds_the_estimate() {
        // Steady state at 5 000, a view opens at t = 20 s, history grows 30 000/s.
        let mut w = SignalWindow::new(Duration::from_secs(10));
        let mut last = None;
        for t in 0..40u64 {
            let (h, view) = if t < 20 {
                (5_000, None)
            } else {
                (5_000 + (t - 20) * 30_000, Some(trx(t - 20, true)))
            };
            last = Some(w.push(Sample {
                t_ms: t * 1000,
                uptime_s: Some(100 + t),
                history_len: Some(h),
                oldest_trx: view,
                ..Sample::default()
            }));
        }
        let s = last.unwrap();
        let v = s.view_history.unwrap();
        assert_eq!(v.at_start, Some(5_000));
        assert_eq!(v.min, 5_000);
        let e = estimate(&s, Duration::from_secs(10)).unwrap();
        assert_eq!(e.basis, Basis::ViewStartSeen);
        assert_eq!(e.purgeable, 5_000);
        assert_eq!(e.blocked, 19 * 30_000);
        assert!(e.is_blocked());
    }

    #[test]
    fn trx_numbers_are_read_from_engine_status() {
        let text = "------------\nTRANSACTIONS\n------------\nTrx id counter 2041494\n\
                    Purge done for trx's n:o < 2041362 undo n:o < 0 state: running but idle\n\
                    History list length 2\n";
        assert_eq!(
            TrxNumbers::parse(text),
            Some(TrxNumbers {
                counter: 2041494,
                purged_below: 2041362
            })
        );
        // Pre-5.6 text (two words, hex) is not taken.
        assert_eq!(TrxNumbers::parse("Trx id counter 0 117472192\nPurge done for trx's n:o < 0 117472190 undo n:o < 0 0\n"), None);
        assert_eq!(
            TrxNumbers::parse(
                "Trx id counter 2100\nPurge done for trx's n:o < 1F15 undo n:o < 0\n"
            ),
            None
        );
        assert_eq!(TrxNumbers::parse("History list length 5\n"), None);
    }

    #[test]
    fn split_by_numbers_is_exact_at_the_ends() {
        let n = TrxNumbers {
            counter: 1_000,
            purged_below: 400,
        };
        // A view opened before all of the history: purge has reached it.
        assert_eq!(split_by_trx_numbers(5_000, n, 400), (0, 5_000));
        assert_eq!(split_by_trx_numbers(5_000, n, 100), (0, 5_000));
        // Nothing began since the view: it blocks nothing.
        assert_eq!(split_by_trx_numbers(5_000, n, 1_000), (5_000, 0));
        // Half of the numbers since purge's position came after the view.
        assert_eq!(split_by_trx_numbers(5_000, n, 700), (2_500, 2_500));
        assert_eq!(split_by_trx_numbers(0, n, 700), (0, 0));
    }

    proptest! {
        #[test]
        fn split_by_numbers_adds_up_and_an_older_view_blocks_more(
            h in 0u64..10_000_000,
            p in 0u64..1_000_000,
            span in 0u64..1_000_000,
            l in 0u64..2_000_000,
        ) {
            let n = TrxNumbers { counter: p + span, purged_below: p };
            let (pg, b) = split_by_trx_numbers(h, n, l);
            prop_assert_eq!(pg + b, h);
            let (pg_older, _) = split_by_trx_numbers(h, n, l.saturating_sub(1_000));
            prop_assert!(pg_older <= pg);
        }

        /// The split adds up, and more evidence of blocking never makes more purgeable:
        /// an older view, a faster inflow, a faster drain.
        #[test]
        fn estimate_is_consistent_and_monotone(
            h in 0u64..50_000_000,
            age in 0u64..100_000,
            rate in -100_000.0..100_000.0f64,
            min in 0u64..50_000_000,
            covered in 0.0..4_000.0f64,
            seen_start in any::<bool>(),
            drain in prop::option::of(0.0..200_000.0f64),
        ) {
            let view = |age: u64, rate: f64, drain: Option<f64>| {
                let mut s = signals_with(h, rate, Some(trx(age, true)));
                s.view_history = Some(ViewHistory {
                    at_start: seen_start.then_some(min),
                    min: min.min(h),
                    min_t_ms: 90_000,
                    covered_s: covered.min(age as f64),
                });
                s.history_drain_rate = drain;
                estimate(&s, Duration::ZERO).unwrap()
            };
            let e = view(age, rate, drain);
            prop_assert_eq!(e.purgeable + e.blocked, h);
            prop_assert!(e.purgeable <= h);
            prop_assert!(view(age + 100, rate, drain).purgeable <= e.purgeable);
            prop_assert!(view(age, rate + 1_000.0, drain).purgeable <= e.purgeable);
            prop_assert!(view(age, rate, Some(drain.unwrap_or(0.0) + 1_000.0)).purgeable <= e.purgeable);
        }
    }
}
