//! Crash recovery: what a live run that did not finish left changed goes back to its
//! baseline before anything else, at the next start or by `innopilot restore`; a redo
//! log it left grown is carried on by a live start instead, whose exit decides. State
//! written for another server is never acted on, every saved value is checked against
//! the configuration first, and a redo resize still under way is waited for before the
//! size is read.

use std::time::Duration;

use tokio::time::Instant;

use super::emit;
use crate::config::Config;
use crate::control::actuator::order_changes;
use crate::control::audit::{AuditLog, Event, Mode, RestoreTrigger};
use crate::control::state::{
    recovery_plan, refused_values, Leave, LeaveReason, Refused, StateFile,
};
use crate::server::sample::unix_ms_now;
use crate::server::{Knob, Server, ServerError};

/// What crash recovery did, knob by knob.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// The state belongs to another server (how it describes that server): nothing was
    /// read or set.
    pub foreign: Option<String>,
    /// Set back to the baseline.
    pub restored: Vec<Knob>,
    /// The SET failed.
    pub failed: Vec<Knob>,
    /// Values the state file asks for that innopilot will not set.
    pub refused: Vec<Refused>,
    /// Left alone: changed by someone else since, not readable, a redo resize still
    /// under way, or the server restarted since the state was written
    /// ([`crate::control::state::LeaveReason`]).
    pub left: Vec<Knob>,
    /// Already at the baseline.
    pub already: Vec<Knob>,
    /// A redo log the previous run left grown (kept at exit, [`StateFile::kept`]; a
    /// shrink it handed over that did not land; or a run that died) and a live start
    /// carries on, as (knob, baseline, value in effect): restored at its exit, when
    /// users write little, not now.
    pub carried: Vec<(Knob, u64, u64)>,
}

impl RecoveryReport {
    /// Why the server may still carry a value of innopilot's; `None` when nothing of
    /// the saved run is left to restore.
    pub fn incomplete(&self) -> Option<String> {
        let mut why = Vec::new();
        if let Some(theirs) = &self.foreign {
            why.push(format!("the state belongs to another server ({theirs})"));
        }
        if !self.failed.is_empty() {
            why.push(format!("could not set {}", Knob::list(&self.failed)));
        }
        for r in &self.refused {
            why.push(format!("refused {r}"));
        }
        (!why.is_empty()).then(|| why.join("; "))
    }
}

/// "server_id 1, host db1, port 3306, datadir /var/lib/mysql/ (MariaDB … at …)": what
/// a refusal shows of the server connected now.
pub(super) fn describe_server<S: Server>(server: &S, target: &str) -> String {
    match server.instance() {
        Some(i) => format!("{i} at {target}"),
        None => target.to_string(),
    }
}

/// Whether `saved` was written for the server connected now: by what the server is
/// when both sides know it, else (older files, the simulator) by the target string.
pub(super) fn same_server<S: Server>(saved: &StateFile, server: &S, target: &str) -> bool {
    match (&saved.instance, server.instance()) {
        (Some(theirs), Some(ours)) => *theirs == ours,
        _ => saved.server == target,
    }
}

/// Restores what a crashed live run left changed: knobs still at innopilot's last value
/// go back to the saved baseline; knobs changed by someone else since are left alone
/// and reported, and so is every knob when the server has restarted since the state
/// was last written (no SET GLOBAL survives a restart: a value equal to innopilot's
/// is then the server's own). Every value is checked against `cfg` before it is set
/// ([`refused_values`]). State written for another server is not acted on at all.
///
/// With `carry_redo` (a live start), a redo log the previous run left grown and still
/// at its value is not shrunk but reported in [`RecoveryReport::carried`]: a shrink
/// writes every page dirty at its start under the users, for minutes under a light
/// load, and a start has not yet measured their rate; the run's own exit decides
/// (`control::restore`). Whether the exit kept it ([`StateFile::kept`]), handed a
/// shrink over that the server then abandoned at its statement timeout
/// (`server.resize_timeout`; the hundred-and-fifteenth benchmark run), or the run
/// died. `innopilot restore` passes false: the operator asked for the baseline.
pub async fn recover<S: Server>(
    server: &mut S,
    saved: &StateFile,
    cfg: &Config,
    target: &str,
    audit: &mut AuditLog,
    mode: Mode,
    carry_redo: bool,
) -> Result<RecoveryReport, ServerError> {
    let mut report = RecoveryReport::default();
    if !same_server(saved, server, target) {
        let theirs = match &saved.instance {
            Some(i) => format!("{i} at {}", saved.server),
            None => saved.server.clone(),
        };
        emit(
            audit,
            mode,
            unix_ms_now(),
            Event::Warning {
                message: format!(
                    "the state file belongs to another server ({theirs}); not restoring from it"
                ),
            },
        );
        report.foreign = Some(theirs);
        return Ok(report);
    }
    let refused = refused_values(saved, cfg);
    let resizing = saved.last_set.keys().any(|k| k.is_blocking())
        && wait_for_resizes(server, cfg.server.resize_timeout, audit, mode).await;
    let live = server.read_knobs().await?;
    let plan = recovery_plan(saved, &live);
    // Whether the server has restarted since the state was last written: its start
    // (the sample's time − Uptime, whole seconds) more than 5 s after. Then no SET
    // GLOBAL of that run is in effect, and a value equal to one of innopilot's is the
    // server's own configuration (its option files: the advice after a redo grow says
    // to write the grown size there); putting the old baseline over it would undo the
    // DBA's. The sample's own time, not this process's clock: the simulator's samples
    // are dated in virtual time, like the state it writes. One sample, and only when
    // there is something to restore.
    let restarted_since = if plan.restore.is_empty() {
        false
    } else {
        match server.sample().await {
            Ok(s) => s.uptime_s.is_some_and(|up| {
                s.unix_ms.saturating_sub(up.saturating_mul(1000))
                    > saved.updated_unix_ms.saturating_add(5_000)
            }),
            Err(_) => false,
        }
    };
    let mut restore = plan.restore;
    order_changes(&mut restore);
    for (knob, from, to) in restore {
        if let Some(r) = refused.iter().find(|r| r.knob == knob) {
            let message = format!(
                "crash recovery refuses {r}; {knob} stays at {from}: check the state file (it may have been edited) and the [knobs.{knob}] settings"
            );
            tracing::error!("{message}");
            emit(audit, mode, unix_ms_now(), Event::Warning { message });
            report.refused.push(r.clone());
            continue;
        }
        // A SET now would fail ("already in progress") and fail the start with it
        // (the hundred-and-fourteenth run's restarted innopilot, after a shrink handed
        // over at exit outlasted the 2 min wait); and after a server restart every
        // value is the server's own.
        let left_because = if resizing && knob.is_blocking() {
            Some(LeaveReason::ResizeUnderWay)
        } else if restarted_since {
            Some(LeaveReason::ServerRestarted)
        } else {
            None
        };
        if let Some(reason) = left_because {
            let leave = Leave {
                knob,
                live: Some(from),
                last_set: saved.last_set.get(&knob).copied().unwrap_or(from),
                baseline: Some(to),
                reason,
            };
            tracing::warn!("{knob}: {}", leave.reason);
            emit(audit, mode, unix_ms_now(), Event::recovery_skipped(&leave));
            report.left.push(knob);
            continue;
        }
        if carry_redo && knob.is_blocking() && to < from {
            let how = if saved.kept.contains(&knob) {
                ", kept at its exit while users wrote"
            } else {
                ""
            };
            let message = format!(
                "{knob} is at {from}, grown by the previous run{how} (baseline {to}): this \
                 run carries it on rather than shrinking it at start, before it has measured \
                 the users' redo rate, and shrinks it back at its own exit if they write \
                 little; `innopilot restore` puts the baseline back now"
            );
            tracing::info!("{message}");
            emit(audit, mode, unix_ms_now(), Event::Warning { message });
            report.carried.push((knob, to, from));
            continue;
        }
        let mut res = server.set_knob(knob, to).await;
        if knob.is_blocking()
            && res
                .as_ref()
                .is_err_and(|e| matches!(e, ServerError::ResizeUnderWay { .. }))
        {
            // A resize that ended on the server a moment ago (stopped by its statement
            // timeout as the wait above ended: the hundred-and-fifteenth benchmark run,
            // both at 120 s) is still being abandoned: once more, after it.
            tokio::time::sleep(Duration::from_secs(2)).await;
            res = server.set_knob(knob, to).await;
        }
        let (readback, error) = match &res {
            Ok(rb) => (Some(*rb), None),
            Err(e) => (None, Some(e.to_string())),
        };
        if res.is_ok() {
            report.restored.push(knob);
        } else {
            report.failed.push(knob);
        }
        emit(
            audit,
            mode,
            unix_ms_now(),
            Event::Restore {
                trigger: RestoreTrigger::CrashRecovery,
                knob,
                from,
                to,
                ok: res.is_ok(),
                readback,
                error,
                under_way: None,
            },
        );
    }
    for leave in &plan.leave {
        report.left.push(leave.knob);
        emit(audit, mode, unix_ms_now(), Event::recovery_skipped(leave));
    }
    report.already = plan.already_baseline;
    Ok(report)
}

/// Before crash recovery reads a redo size: waits, up to `limit`, for a resize still
/// under way on the server to end. It is the previous run's (a shrink handed to the
/// server at exit, or a grow whose client died with it), and until it ends the old
/// size reads as in effect and MariaDB refuses another resize ("change is already in
/// progress"): read now, the grown size would be restored over a shrink already
/// under way, or a grow about to land taken for the baseline. Returns whether one is
/// still under way when the wait ends.
async fn wait_for_resizes<S: Server>(
    server: &mut S,
    limit: Duration,
    audit: &mut AuditLog,
    mode: Mode,
) -> bool {
    let start = Instant::now();
    let mut announced = false;
    loop {
        let sessions = match server.resizes_under_way().await {
            Ok(s) => s,
            Err(e) if e.is_unsupported() => return false,
            Err(e) => {
                tracing::warn!("cannot tell whether a redo resize is under way: {e}");
                return false;
            }
        };
        let Some(&(id, secs)) = sessions.first() else {
            if announced {
                tracing::info!(
                    "the redo resize under way ended after {:.0?}",
                    start.elapsed()
                );
            }
            return false;
        };
        if start.elapsed() >= limit {
            tracing::warn!(
                "a redo resize is still under way after {} (session {id}); recovery goes on \
                 without it",
                humantime::format_duration(limit)
            );
            return true;
        }
        if !announced {
            announced = true;
            let message = format!(
                "a redo resize is under way on the server (session {id}, for {}); crash \
                 recovery waits for it to end (at most server.resize_timeout, {}) before \
                 reading the redo size",
                secs.map_or("an unknown time".to_string(), |s| format!("{s}s")),
                humantime::format_duration(limit)
            );
            tracing::warn!("{message}");
            emit(audit, mode, unix_ms_now(), Event::Warning { message });
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
