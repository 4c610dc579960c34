//! Restoring the baseline at the end of a live run (and when the loop gives up on a
//! server): the knobs that return at once first, then the redo resizes, which wait for
//! a checkpoint; a resize still running when the exit stops waiting is handed over to
//! the server, audited with its session, and noted in the state file. A blocking SET
//! still under way at exit is stopped first.

use std::collections::BTreeSet;
use std::time::Duration;

use tokio::time::Instant;

use super::{now_unix_ms, Controller};
use crate::control::actuator::Restored;
use crate::control::audit::{Event, RestoreTrigger};
use crate::metrics::Phase;
use crate::server::{Knob, KnobValues, Server};

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
            .restore_fast(&mut self.server, live, &skip, now_unix_ms())
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
                    self.actuator.restored(knob, now_unix_ms());
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
                            handed_over: Vec::new(),
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
            if outcome.ok() {
                if let Err(e) = self.actuator.finish(now_unix_ms()) {
                    tracing::warn!("cannot mark the state file clean: {e}");
                }
            } else if !outcome.failed {
                if let Err(e) = self.actuator.hand_over(&outcome.handed_over, now_unix_ms()) {
                    tracing::warn!("cannot note the handover in the state file: {e}");
                }
                tracing::warn!(
                    "the server is still resizing {} back to the baseline and finishes it on \
                     its own at its next checkpoint; the state file stays unclean, and the \
                     next start waits for the resize and checks the size",
                    Knob::list(&outcome.handed_over)
                );
            } else {
                tracing::error!("the baseline could not be fully restored within {}; the state file keeps it and the next start restores it", humantime::format_duration(limit));
            }
        }
        self.emit(Event::Stop {
            reason: reason.to_string(),
            restored: outcome.ok(),
            handed_over: outcome.handed_over.clone(),
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
}

impl Restoration {
    /// Every knob is back at its baseline now.
    fn ok(&self) -> bool {
        !self.failed && self.handed_over.is_empty()
    }
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
