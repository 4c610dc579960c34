//! The page cleaner's batch past the async point, where io_capacity_max is not a
//! pace but the size of each batch (MariaDB `buf_flush_page_cleaner()`, buf0flu.cc;
//! docs/policies.md): never raised there, kept to a fraction of a second of the
//! device while users wait at the maximum checkpoint age, and one second of it while
//! the fill races there. [`Flush::flushing`] decides when this regime applies; this
//! module owns what the batch is in it, and why.

use super::{page_cleaner_pages, pct, Flush, Points, DEVICE_PACE, NEED_BAND};
use crate::signals::Signals;

/// Why io_capacity_max is never raised past the async point.
pub(super) const PAST_ASYNC: &str =
    "and a larger batch holds the checkpoint still longer on a device \
     that cannot write it at once (the real-server g_checkpoint_stall: raised to 16 000 there \
     while the device wrote about 330 pages/s, 85 s at 0 TPS against the defaults' 69), so it \
     is never raised there";

/// At the last second's rise the fill reaches the maximum checkpoint age within this
/// many seconds: a burst, not a creep, and the page cleaner's batches will not stop
/// it, so users reach the maximum with a batch under way and it holds them until it
/// is written. The first batch past the async point is therefore kept to one second
/// of the device before they are held. The seventy-second real-server run's g: the
/// fill rose 3.6–4.2 %/s through the async point (83.5 % at 59 s, the maximum at
/// 63 s), the page cleaner's first batch of 2 000 pages took a device of about
/// 800 pages/s until 65 s, and users had 3 s at 0 TPS in it; the batch was lowered
/// only at the first tick they were held, after it. A fill creeping at 1 %/s (e, f)
/// is not racing.
pub(super) const RACE_S: f64 = 5.0;

/// While the fill races ([`RACE_S`]), the batch is lowered once the age would cross
/// the async point within this many seconds at the last second's rise: a value set
/// at this tick is in place only after it, and the first batch starts at the
/// crossing. In the seventy-second run's g the tick a second before the crossing
/// (83.5 %, rising 3.6 %/s) projected 87.1 % a second on, short of the point's
/// 87.5 %: a value sent a second later lands as the first batch starts.
pub(super) const CROSS_S: f64 = 2.0;

impl Flush {
    /// One second of the device (its limit once shown, else the best rate seen), as a
    /// batch: between io_capacity (the server's rule) and the baseline.
    pub(super) fn device_second(&self, base_cap: u64, base_max: u64) -> u64 {
        let dev = &self.state.device;
        match dev.limit.or(dev.best) {
            Some(l) if l.is_finite() => (l as u64).min(base_max).max(base_cap).max(100),
            _ => base_max,
        }
    }

    /// The highest io_capacity_max past the async point, where it is the batch size:
    /// [`held_batch`](super::FlushConfig::held_batch) of the device's limit once
    /// shown, never above [`Self::ceiling`] nor below io_capacity (the server's rule)
    /// and 100.
    ///
    /// Until the limit is shown ([`LIMIT_WINDOW_MS`](super::LIMIT_WINDOW_MS) of users
    /// held), the best rate seen stands in for it. The best is the peak of single
    /// seconds, never below the limit learned later, so this provisional batch is
    /// never smaller than the one that follows. Without it, users wait out the
    /// learning window at the server's batch.
    /// In the eleventh real-server run's g, 6 of the 10 s at 0 TPS fell in those 5 s:
    /// batches of 2 000 against a best of 1 998 and a limit of 799 pages/s.
    pub(super) fn batch_ceiling(&self, base_cap: u64, base_max: u64) -> u64 {
        let c = self.ceiling(base_cap, base_max);
        let dev = &self.state.device;
        match dev.limit.or(dev.best) {
            Some(l) => ((l * self.cfg.held_batch.as_secs_f64()) as u64)
                .min(c)
                .max(base_cap)
                .max(100),
            None => c,
        }
    }

    /// io_capacity_max past the async point (and for a minute after), where it is the
    /// page cleaner's batch: never raised there ([`PAST_ASYNC`]). Lowered to
    /// [`Self::batch_ceiling`] only while users have been held at the maximum within
    /// the last minute: they wait for the checkpoint after each batch, and a smaller
    /// batch lets them through sooner (g_checkpoint_stall). While the fill races to the
    /// maximum ([`RACE_S`]) and users are not held yet, to one second of the device
    /// ([`Self::device_second`]): the batch under way when they reach it holds them
    /// until it is written. With users at their rate and the fill not racing, a
    /// smaller batch only slows every writer (the eighth real-server run's f_cold_view:
    /// batches of 200 while the age sat at the maximum, 2.3 × the defaults' history in
    /// two repetitions of three, none of it without the flush policy); one second of
    /// the device flushes what the device can anyway. A value of ours above the
    /// device's ceiling comes down to it.
    pub(super) fn past_async_value(
        &self,
        cur: u64,
        base_cap: u64,
        base_max: u64,
        held: bool,
        racing: bool,
    ) -> u64 {
        let floor = base_cap.max(100);
        if held {
            cur.min(self.batch_ceiling(base_cap, base_max)).max(floor)
        } else if racing {
            // Within the band the batch holds: the best rate decays, and a step of a
            // few pages is only a statement.
            let d = self.device_second(base_cap, base_max);
            if (d as f64) * (1.0 + NEED_BAND) < cur as f64 {
                d.max(floor)
            } else {
                cur
            }
        } else if cur == base_max {
            cur
        } else {
            cur.min(self.ceiling(base_cap, base_max)).max(floor)
        }
    }

    /// The fill reaches the maximum checkpoint age within [`RACE_S`] at its last
    /// second's rise, and the device, not the request, is what flushes this second:
    /// the woken page cleaner asked at least [`DEVICE_PACE`] × what was flushed (the
    /// limit's own test, [`Self::learn`]). Where the device flushes what is asked, a batch of the
    /// best rate seen would cap flushing that could still meet the need.
    pub(super) fn racing(
        &self,
        s: &Signals,
        points: Option<Points>,
        cap: u64,
        max: u64,
        fill: f64,
    ) -> bool {
        let rise = self.state.rise;
        let fast = rise > 0.0 && rise.is_finite() && (1.0 - fill) <= rise * RACE_S;
        let flushed = s.pages_flushed_rate.filter(|r| r.is_finite() && *r >= 0.0);
        let short = match (points, flushed) {
            (Some(p), Some(r)) if self.state.woken || p.past_async() => {
                page_cleaner_pages(p.age, p.async_point, p.lwm, cap as f64, max as f64)
                    >= DEVICE_PACE * r
            }
            _ => false,
        };
        fast && short
    }

    /// What [`Self::past_async_value`] does, in words.
    pub(super) fn past_async_text(&self, held: bool, racing: bool) -> String {
        if held {
            let dev = &self.state.device;
            let rate = match (dev.limit, dev.best) {
                (Some(l), _) => format!(" (its limit, about {l:.0} pages/s)"),
                (None, Some(b)) => {
                    format!(" (the best it has shown, {b:.0} pages/s, until its limit is measured)")
                }
                (None, None) => String::new(),
            };
            format!(
                "users waited at the maximum checkpoint age within the last minute, and \
                 each batch holds them until its checkpoint: a batch of at most {} of the \
                 device{rate}",
                humantime::format_duration(self.cfg.held_batch)
            )
        } else if racing {
            format!(
                "the fill rises {}/s and reaches the maximum checkpoint age within {RACE_S} s, \
                 where the batch under way holds users until it is written: a batch of at \
                 most one second of the device ({})",
                pct(self.state.rise),
                self.device_text()
            )
        } else {
            "users are not held at the maximum checkpoint age, so a smaller batch would only \
             slow every writer: it holds"
                .to_string()
        }
    }
}
