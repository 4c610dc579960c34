//! Restoring the baseline at the end of a live run (and when the loop gives up on a
//! server): the knobs that return at once first, then the redo resizes, which wait for
//! a checkpoint; a resize still running when the exit stops waiting is handed over to
//! the server, audited with its session, and noted in the state file. A blocking SET
//! still under way at exit is stopped first.
//!
//! A redo log innopilot grew is shrunk back only while users write little: less than
//! `[policy.flush] redo_shrink_fill_pct` of the baseline log's maximum checkpoint age
//! a minute ([`exit_keeps_grown_redo`]). Otherwise it is **kept**: a shrink writes
//! every page dirty at its LSN while users write, and is adopted with the age written
//! meanwhile in a log a fraction of the size (run 113's h: sent under a 0.7 MB/s base
//! load, adopted 110 s later at 88 % of the baseline's maximum, with users at 0.36×
//! through the burst that came meanwhile). A `systemctl restart` in a busy hour would pay that
//! twice: the shrink, then the stall the grow had cured. The state file keeps the
//! baseline and names the knob (`kept`); the next live start carries the log on
//! (`control::recover`), and `innopilot restore` or a server restart (its option
//! files) puts the baseline back.

use std::collections::BTreeSet;
use std::time::Duration;

use tokio::time::Instant;

use super::Controller;
use crate::control::actuator::Restored;
use crate::control::audit::{Event, RestoreTrigger};
use crate::metrics::Phase;
use crate::policy::flush::shrink_landing_fill;
use crate::server::sample::unix_ms_now;
use crate::server::{Knob, KnobValues, Server};
use crate::signals::Signals;

impl<S: Server> Controller<S> {
    /// At exit: a blocking SET still under way is stopped (`KILL QUERY` on its session;
    /// MariaDB then abandons the resize, `log_t::resize_abort()`), so that innopilot
    /// does not leave a resize behind it, and its outcome is audited.
    async fn stop_in_flight(&mut self, wait: Duration) {
        let Some(id) = self.in_flight.as_ref().map(|f| f.session_id) else {
            return;
        };
        if let Some(id) = id {
            if let Err(e) = self.server.kill_query(id).await {
                tracing::warn!("cannot stop the redo resize under way (session {id}): {e}");
            }
        }
        if let Err(e) = self.settle_in_flight(Some(wait)).await {
            tracing::warn!("{e}");
        }
        if let Some(f) = self.in_flight.take() {
            f.task.abort();
            tracing::warn!(knob = %f.knob, "a resize to {} was still under way at exit", f.to);
        }
    }

    /// The knobs a restore leaves alone: an operator's.
    fn restore_skip(&self) -> BTreeSet<Knob> {
        self.guard.operator_owned().map(|(k, _)| k).collect()
    }

    /// Restores the baseline: the knobs that return at once first, recorded before
    /// the redo resizes, which wait for a checkpoint. A resize is waited for until
    /// `resize_by` (`None`: as long as its SET takes, bounded by
    /// `server.resize_timeout`); cut off there while its session still runs it, it is
    /// handed over to the server, which finishes it on its own.
    pub(super) async fn restore(
        &mut self,
        trigger: RestoreTrigger,
        live: &KnobValues,
        resize_by: Option<Instant>,
    ) -> Restoration {
        let skip = self.restore_skip();
        let mut out = Restoration::default();
        let results = self
            .actuator
            .restore_fast(&mut self.server, live, &skip, unix_ms_now())
            .await;
        for r in results {
            out.failed |= r.error.is_some();
            self.emit(restore_event(trigger, r));
        }
        if self.opts.dry_run {
            return out;
        }
        let resizes: Vec<_> = self
            .actuator
            .pending_restore(live, &skip)
            .into_iter()
            .filter(|(k, _, _)| k.is_blocking())
            .collect();
        for (knob, from, to) in resizes {
            // Only a stopping run keeps one: after giving up on a server the loop
            // starts afresh from the baseline, and must find it in effect.
            if trigger == RestoreTrigger::Exit && to < from {
                let quiet_pct = self.cfg.policy.flush.redo_shrink_fill_pct;
                if let Some(reason) =
                    exit_keeps_grown_redo(self.last_signals.as_ref(), to, quiet_pct)
                {
                    tracing::warn!(
                        "{knob} stays at {from} (baseline {to}): {reason}; the next start \
                         carries it on, and `innopilot restore` or a server restart puts \
                         the baseline back"
                    );
                    self.emit(Event::Kept {
                        trigger,
                        knob,
                        value: from,
                        baseline: to,
                        reason,
                    });
                    out.kept.push(knob);
                    continue;
                }
            }
            let r = self.restore_resize(knob, from, to, resize_by).await;
            out.failed |= r.error.is_some();
            if r.under_way.is_some() {
                out.handed_over.push(knob);
            }
            self.emit(restore_event(trigger, r));
        }
        out
    }

    /// One redo resize back to the baseline, on a session of its own.
    async fn restore_resize(
        &mut self,
        knob: Knob,
        from: u64,
        to: u64,
        by: Option<Instant>,
    ) -> Restored {
        let mut r = Restored {
            knob,
            from,
            to,
            readback: None,
            error: None,
            under_way: None,
        };
        let mut pending = match self.server.start_set(knob, to).await {
            Ok(p) => p,
            Err(e) => {
                r.error = Some(e.to_string());
                return r;
            }
        };
        let mut result = match by {
            None => Some((&mut pending.set).await),
            Some(by) => tokio::time::timeout_at(by, &mut pending.set).await.ok(),
        };
        if result.is_none() {
            // Cut off. Asked while the SET's connection is still open, so the row is
            // ours; not running, it may have ended a moment after the wait did.
            if self.runs_resize(pending.session_id, knob).await {
                r.under_way = pending.session_id;
            } else {
                result = tokio::time::timeout(Duration::ZERO, &mut pending.set)
                    .await
                    .ok();
            }
        }
        match result {
            Some(Ok(readback)) => {
                r.readback = Some(readback);
                if readback == to {
                    self.actuator.restored(knob, unix_ms_now());
                } else {
                    // MariaDB answers OK with the old size when it abandons a resize.
                    r.error = Some(format!(
                        "the server answered with {readback} in effect: the resize was abandoned"
                    ));
                }
            }
            Some(Err(e)) => r.error = Some(e.to_string()),
            None if r.under_way.is_some() => {}
            None => {
                r.error = Some(format!(
                    "innopilot stopped waiting for the resize to {to} and its session is \
                     gone; the state file keeps the baseline, and the next start (or \
                     `innopilot restore`) sets it again unless the server is back at it"
                ));
            }
        }
        // Dropping the SET closes its connection: a MariaDB resize goes on without it
        // (tests/redo_resize.rs).
        drop(pending);
        r
    }

    /// Whether `session` still runs a SET of `knob` (the process list's statement).
    async fn runs_resize(&mut self, session: Option<u64>, knob: Knob) -> bool {
        let Some(id) = session else {
            return false;
        };
        match self.server.session(id, 200).await {
            Ok(Some(s)) => s
                .info
                .is_some_and(|i| i.to_ascii_lowercase().contains(knob.var_name())),
            _ => false,
        }
    }

    /// After an exit restore cut off by `control.restore_timeout`: every knob still
    /// away from its baseline is recorded as not restored, with what happens to it
    /// next. (A redo shrink cut off by the timeout would otherwise leave no record at
    /// all: the thirty-fifth real-server run's g, whose audit logs ended with
    /// `"restored": false` and nothing naming innodb_log_file_size.)
    fn record_unrestored(&mut self, live: Option<&KnobValues>, limit: Duration) {
        let Some(live) = live else {
            return;
        };
        let skip = self.restore_skip();
        for (knob, from, to) in self.actuator.pending_restore(live, &skip) {
            let why = if knob.is_blocking() {
                "a redo resize returns only once the checkpoint passes the LSN of its SET"
            } else {
                "the server did not answer in time"
            };
            let error = format!(
                "not restored within control.restore_timeout ({}): {why}; the state file \
                 keeps the baseline, and the next start (or `innopilot restore`) sets it \
                 again unless the server is back at it",
                humantime::format_duration(limit)
            );
            let r = Restored {
                knob,
                from,
                to,
                readback: None,
                error: Some(error),
                under_way: None,
            };
            self.emit(restore_event(RestoreTrigger::Exit, r));
        }
    }

    /// Restores the baseline (live mode) within `control.restore_timeout`, writes the
    /// final state, and records the stop. Returns whether nothing is left for an
    /// operator: the server is back at its baseline, or a redo resize back to it is
    /// still running on the server, which finishes it on its own (handed over; the
    /// state file stays unclean so that the next start checks it). Always true in
    /// dry-run, which changed nothing.
    pub async fn shutdown(&mut self, reason: &str) -> bool {
        self.publish(Phase::Stopping);
        let mut outcome = Restoration::default();
        if !self.opts.dry_run {
            let limit = self.cfg.control.restore_timeout;
            // A resize is waited for three quarters of the limit: the rest is for
            // asking whether its session still runs it.
            let resize_by = Instant::now() + limit * 3 / 4;
            // The knobs as read at exit, to name what a timed-out restore left.
            let mut read_at_exit: Option<KnobValues> = None;
            let attempt = async {
                // Bounded by the same limit: the resize is stopped, not waited for.
                self.stop_in_flight(limit / 2).await;
                if self.caps.is_none() {
                    if let Ok(c) = self.server.probe().await {
                        self.caps = Some(c);
                    }
                }
                match self.server.read_knobs().await {
                    Ok(live) => {
                        read_at_exit = Some(live.clone());
                        self.restore(RestoreTrigger::Exit, &live, Some(resize_by))
                            .await
                    }
                    Err(e) => {
                        self.emit(Event::Warning {
                            message: format!("cannot read the knobs to restore them: {e}"),
                        });
                        Restoration {
                            failed: true,
                            ..Restoration::default()
                        }
                    }
                }
            };
            match tokio::time::timeout(limit, attempt).await {
                Ok(o) => outcome = o,
                Err(_) => {
                    outcome.failed = true;
                    self.record_unrestored(read_at_exit.as_ref(), limit);
                }
            }
            if !outcome.kept.is_empty() {
                if let Err(e) = self.actuator.keep(&outcome.kept, unix_ms_now()) {
                    tracing::warn!("cannot note the kept redo size in the state file: {e}");
                }
            }
            if outcome.ok() {
                if let Err(e) = self.actuator.finish(unix_ms_now()) {
                    tracing::warn!("cannot mark the state file clean: {e}");
                }
            } else if outcome.failed {
                tracing::error!("the baseline could not be fully restored within {}; the state file keeps it and the next start restores it", humantime::format_duration(limit));
            } else if !outcome.handed_over.is_empty() {
                if let Err(e) = self.actuator.hand_over(&outcome.handed_over, unix_ms_now()) {
                    tracing::warn!("cannot note the handover in the state file: {e}");
                }
                tracing::warn!(
                    "the server is still resizing {} back to the baseline and finishes it on \
                     its own at its next checkpoint; the state file stays unclean, and the \
                     next start waits for the resize and checks the size",
                    Knob::list(&outcome.handed_over)
                );
            }
        }
        self.emit(Event::Stop {
            reason: reason.to_string(),
            restored: outcome.ok(),
            handed_over: outcome.handed_over.clone(),
            kept: outcome.kept.clone(),
        });
        !outcome.failed
    }
}

/// What a restore achieved.
#[derive(Default)]
pub(super) struct Restoration {
    /// A knob could not be restored (an error, or cut off by the timeout).
    failed: bool,
    /// Redo resizes back to the baseline the server finishes on its own.
    handed_over: Vec<Knob>,
    /// Grown redo logs left as they are while users write ([`exit_keeps_grown_redo`]).
    kept: Vec<Knob>,
}

impl Restoration {
    /// Every knob is back at its baseline now.
    fn ok(&self) -> bool {
        !self.failed && self.handed_over.is_empty() && self.kept.is_empty()
    }
}

/// Why the exit keeps a redo log innopilot grew instead of shrinking it back to
/// `baseline` bytes; `None` when it shrinks it. It keeps it when a shrink started now
/// would land at `quiet_pct` % or more of the baseline log's maximum checkpoint age
/// ([`shrink_landing_fill`]: what users write in a minute at the latest window's rate),
/// the test `[policy.flush] redo_shrink` applies while innopilot runs. When the rate is
/// not known (no window yet, a server that does not report it), it shrinks: the
/// baseline is the contract, and without a measurement there is no case against it.
pub(crate) fn exit_keeps_grown_redo(
    last: Option<&Signals>,
    baseline: u64,
    quiet_pct: f64,
) -> Option<String> {
    let last = last?;
    let landing = shrink_landing_fill(last, baseline)?;
    (landing * 100.0 >= quiet_pct).then(|| {
        format!(
            "users write {:.1} MB/s of redo, {:.0} % of the baseline log's maximum \
             checkpoint age a minute, over [policy.flush] redo_shrink_fill_pct \
             ({quiet_pct} %): a shrink now would write every page dirty at its LSN under \
             them and land what they write meanwhile in the smaller log",
            last.lsn_rate.unwrap_or(0.0) / 1e6,
            landing * 100.0
        )
    })
}

/// The audit record of one knob's restore.
fn restore_event(trigger: RestoreTrigger, r: Restored) -> Event {
    Event::Restore {
        trigger,
        knob: r.knob,
        from: r.from,
        to: r.to,
        ok: r.error.is_none() && r.under_way.is_none(),
        readback: r.readback,
        error: r.error,
        under_way: r.under_way,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::sample::RedoSample;

    const MIB: u64 = 1 << 20;

    /// The last signals with a 1 GiB log whose sync point is 80 % of it, users
    /// writing `mb_s` MB/s of redo.
    fn writing(mb_s: f64) -> Signals {
        let mut s = Signals {
            lsn_rate: Some(mb_s * 1e6),
            ..Signals::default()
        };
        s.sample.redo = RedoSample {
            checkpoint_age: Some(70 * MIB),
            sync_point: Some(1024 * MIB / 5 * 4),
            capacity: Some(1024 * MIB),
            ..RedoSample::default()
        };
        s
    }

    /// A 128 MiB baseline's maximum is 102.4 MiB: 25 % of it a minute is 0.45 MB/s (the
    /// test at 25 %, not the shipped 5 %, to show the threshold is the config's).
    #[test]
    fn the_exit_shrinks_a_grown_log_only_when_users_write_little() {
        let base = 128 * MIB;
        assert_eq!(exit_keeps_grown_redo(Some(&writing(0.0)), base, 25.0), None);
        assert_eq!(exit_keeps_grown_redo(Some(&writing(0.4)), base, 25.0), None);
        // Run 113's base load: 0.7 MB/s, 39 % of the baseline's maximum a minute.
        let why = exit_keeps_grown_redo(Some(&writing(0.7)), base, 25.0).unwrap();
        assert!(
            why.contains("users write 0.7 MB/s of redo, 39 % of the baseline log's maximum")
                && why.contains("redo_shrink_fill_pct (25 %)"),
            "{why}"
        );
        assert!(exit_keeps_grown_redo(Some(&writing(4.0)), base, 25.0).is_some());
        // Without a measurement the baseline is restored, as it always was.
        assert_eq!(exit_keeps_grown_redo(None, base, 25.0), None);
        let mut unknown = writing(4.0);
        unknown.lsn_rate = None;
        assert_eq!(exit_keeps_grown_redo(Some(&unknown), base, 25.0), None);
        unknown = writing(4.0);
        unknown.sample.redo.capacity = None;
        assert_eq!(exit_keeps_grown_redo(Some(&unknown), base, 25.0), None);
    }
}
