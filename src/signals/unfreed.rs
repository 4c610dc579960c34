//! The unfreed share of history: undo logs purge has already handled that the server
//! has not yet freed ([`Signals::unfreed_history`]), integrated per sample from purge's
//! pace ([`Signals::purge_pace`]: INNODB_METRICS records handled per row users updated
//! or deleted). MariaDB frees handled undo only from rollback segments no transaction
//! is using (MDEV-33213), so under a burst history can grow by hundreds of thousands
//! while purge keeps pace; counting that as debt made the policies add purge threads
//! and delay users for nothing (the hundred-and-twenty-fifth real-server run). Every
//! rule here errs toward debt; `docs/signals.md` ("History purge has handled") gives
//! the error bounds.

use super::{slope, trim_older, SignalWindow, Signals};
use crate::server::sample::Sample;

/// Purge keeps pace when it handles at least this share of the records users'
/// updates and deletes write ([`Signals::purge_pace`]); only then is history growth
/// beyond the unhandled share `(1 − pace) · inflow` counted as unfreed. Over the
/// hundred-and-twentieth real-server run's second burst purge handled 0.97–1.00 of them
/// in every repetition while history rose by up to 840 k (undo logs the server frees
/// only from rollback segments no transaction is using, MDEV-33213); where purge fell
/// behind for good (e) far less. Below it growth counts as debt, as without counters.
pub const KEEP_PACE: f64 = 0.9;

/// [`Signals::purge_pace`] needs at least this many rows updated or deleted over the
/// window: fewer say nothing about purge's pace.
pub const PACE_MIN_ROWS: u64 = 100;

impl SignalWindow {
    /// Purge's handled rate and pace over the window ([`Signals::purge_pace`]).
    fn purge_pace(&self) -> (Option<f64>, Option<f64>) {
        // From the oldest sample of the window the counters were on in.
        let first = self.samples.iter().find(|s| s.purge_records.is_some());
        let (Some(a), Some(b)) = (first, self.samples.back()) else {
            return (None, None);
        };
        let changed = |s: &Sample| Some(s.rows_updated?.saturating_add(s.rows_deleted?));
        let dt = b.t_ms.saturating_sub(a.t_ms) as f64 / 1000.0;
        let handled = match (a.purge_records, b.purge_records) {
            // A counter reset (innodb_monitor_reset) runs it backwards: unknown.
            (Some(x), Some(y)) if y >= x && dt > 0.0 => y - x,
            _ => return (None, None),
        };
        let pace = match (changed(a), changed(b)) {
            (Some(x), Some(y)) if y >= x.saturating_add(PACE_MIN_ROWS) => {
                Some(handled as f64 / (y - x) as f64)
            }
            _ => None,
        };
        (Some(handled as f64 / dt), pace)
    }

    /// Integrates [`Signals::unfreed_history`] U. Each interval history H changes by
    /// ΔH: a fall frees handled logs, and U, which only ever holds handled logs, falls
    /// with it first (toward counting debt); a rise while purge keeps pace
    /// ([`KEEP_PACE`]) adds what purge's unhandled share of the inflow,
    /// (1 − pace) · inflow · Δt, does not explain; a rise while the pace is under it or
    /// unknown, or the inflow unknown, adds nothing (growth is debt). Counters off or
    /// reset, or history unknown, forget U: all history counts as debt again.
    /// 0 ≤ U ≤ H.
    pub(super) fn update_unfreed(&mut self, sig: &mut Signals) {
        let (handled_rate, pace) = self.purge_pace();
        sig.purge_handled_rate = handled_rate;
        sig.purge_pace = pace;
        let cur = &sig.sample;
        let (Some(h), Some(_)) = (cur.history_len, cur.purge_records) else {
            self.unfreed.clear();
            return;
        };
        let prev = (self.samples.len() >= 2).then(|| &self.samples[self.samples.len() - 2]);
        let last = self.unfreed.back().map(|p| p.1);
        let u = match (prev, last) {
            (Some(p), Some(u))
                if p.purge_records
                    .is_some_and(|x| cur.purge_records >= Some(x)) =>
            {
                let dh = match p.history_len {
                    Some(h0) => h as f64 - h0 as f64,
                    None => 0.0,
                };
                let dt = cur.t_ms.saturating_sub(p.t_ms) as f64 / 1000.0;
                if dh < 0.0 {
                    u + dh
                } else {
                    match (pace.filter(|f| *f >= KEEP_PACE), sig.undo_inflow()) {
                        (Some(f), Some(inflow)) => {
                            let unhandled = (1.0 - f).max(0.0) * inflow * dt;
                            u + (dh - unhandled).max(0.0)
                        }
                        _ => u,
                    }
                }
            }
            _ => 0.0,
        }
        .clamp(0.0, h as f64);
        let t = sig.t_ms;
        self.unfreed.push_back((t, u));
        trim_older(&mut self.unfreed, t, self.span, 2, |p| p.0);
        let first = self.unfreed.front().map(|p| p.0).unwrap_or(t);
        let pts = self
            .unfreed
            .iter()
            .map(|(ti, v)| ((ti - first) as f64 / 1000.0, *v));
        sig.unfreed_history = Some(u as u64);
        sig.unfreed_rate = slope(pts);
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::sample_at;
    use super::*;
    use crate::signals::purge;
    use std::ops::RangeInclusive;
    use std::time::Duration;

    /// A burst of 10 000 single-row updates a second: history rises 5 000/s while
    /// purge handles every record (the unfreed share of run 120's h), then falls.
    fn burst(t: u64, history: u64, handled: Option<u64>) -> Sample {
        Sample {
            max_trx_id: Some(2 * 10_000 * t),
            purge_records: handled,
            ..sample_at(t, 100 + t, history, 10_000 * t)
        }
    }

    /// Pushes the burst's seconds `ts` (history growing 5 000/s, purge handling
    /// `handled_per_s` records a second, or its counters off) and returns the last
    /// signals.
    fn grow(w: &mut SignalWindow, ts: RangeInclusive<u64>, handled_per_s: Option<u64>) -> Signals {
        let mut sig = Signals::default();
        for t in ts {
            sig = w.push(burst(t, 5_000 * t, handled_per_s.map(|h| h * t)));
        }
        sig
    }

    #[test]
    fn history_purge_keeps_pace_with_is_unfreed_not_debt() {
        let mut w = SignalWindow::new(Duration::from_secs(10));
        let mut sig = grow(&mut w, 0..=30, Some(10_000));
        assert_eq!(sig.purge_pace, Some(1.0));
        assert_eq!(sig.purge_handled_rate, Some(10_000.0));
        assert_eq!(sig.unfreed_history, Some(150_000));
        let (y, d) = (sig.history_rate.unwrap(), sig.debt_rate().unwrap());
        assert!((y - 5_000.0).abs() < 1.0 && d.abs() < 1.0, "{y} {d}");
        let e = purge::estimate(&sig, Duration::from_secs(5)).unwrap();
        assert_eq!((e.history, e.purgeable, e.unfreed), (150_000, 0, 150_000));
        // The server frees it: the unfreed share falls with history, first.
        for t in 31..=33 {
            sig = w.push(burst(t, 150_000 - 50_000 * (t - 30), Some(10_000 * t)));
        }
        assert_eq!(sig.unfreed_history, Some(0));
    }

    #[test]
    fn growth_purge_does_not_handle_stays_debt() {
        // Purge handles 6 000 of 10 000 records a second: 4 000 undo logs/s are debt,
        // and history growing 5 000/s leaves 1 000/s to the unfreed share.
        let sig = grow(
            &mut SignalWindow::new(Duration::from_secs(10)),
            0..=20,
            Some(6_000),
        );
        assert_eq!(sig.purge_pace, Some(0.6));
        // Under KEEP_PACE: all growth is debt.
        assert_eq!(sig.unfreed_history, Some(0));
        let sig = grow(
            &mut SignalWindow::new(Duration::from_secs(10)),
            0..=20,
            Some(9_500),
        );
        // Over it: the unhandled share (5 %, 500/s) stays debt, the rest is unfreed.
        assert_eq!(sig.unfreed_history, Some(90_000));
        assert!((sig.debt_rate().unwrap() - 500.0).abs() < 1.0);
    }

    #[test]
    fn counters_off_or_reset_count_all_history_as_debt() {
        let mut w = SignalWindow::new(Duration::from_secs(10));
        let mut sig = grow(&mut w, 0..=10, None);
        assert_eq!((sig.purge_pace, sig.unfreed_history), (None, None));
        assert_eq!(sig.debt_rate(), sig.history_rate);
        let e = purge::estimate(&sig, Duration::from_secs(5)).unwrap();
        assert_eq!((e.purgeable, e.unfreed), (50_000, 0));
        sig = grow(&mut w, 11..=20, Some(10_000));
        assert_eq!(sig.unfreed_history, Some(45_000));
        // innodb_monitor_reset: the counter runs backwards, the share is forgotten.
        sig = w.push(burst(21, 105_000, Some(5)));
        assert_eq!((sig.purge_pace, sig.unfreed_history), (None, Some(0)));
    }
}
