//! The actuator: the only place that changes a server. It applies guarded values in a
//! safe order, writes the state file *before* each SET (so a crash at any point leaves
//! enough on disk to restore), reads every change back, and restores the baseline on
//! exit. In dry-run it records what it would do and touches nothing.

use std::collections::BTreeSet;

use crate::control::state::{StateFile, StateStore};
use crate::server::{Knob, KnobValues, PendingSet, Server, ServerError};

#[derive(Debug, thiserror::Error)]
pub enum ActuatorError {
    #[error("refusing to change {knob}: the state file could not be written ({source}); without it a crash could leave the server changed")]
    State {
        knob: Knob,
        #[source]
        source: crate::control::state::StateError,
    },
    #[error(transparent)]
    Server(#[from] ServerError),
}

/// The result of one change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Applied {
    /// Value in effect afterwards, read back from the server (dry-run: the value it
    /// would have set).
    pub readback: u64,
}

/// Outcome of restoring one knob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restored {
    pub knob: Knob,
    pub from: u64,
    pub to: u64,
    pub readback: Option<u64>,
    pub error: Option<String>,
    /// A redo resize back to the baseline that the exit stopped waiting for while its
    /// session still ran it: the server finishes it on its own (its id).
    pub under_way: Option<u64>,
}

pub struct Actuator {
    dry_run: bool,
    store: Option<StateStore>,
    state: StateFile,
}

/// Orders one tick's changes so dependent knobs never pass through an invalid pair:
/// innodb_io_capacity_max is raised before innodb_io_capacity, and innodb_io_capacity is
/// lowered before innodb_io_capacity_max (the server requires capacity ≤ capacity_max).
/// A redo resize ([`Knob::is_blocking`]) goes last: its SET returns only once every page
/// dirty at its LSN is flushed (tens of seconds at a full redo on a slow device), and a
/// restore bounded by `control.restore_timeout` must put the DML delay and the flushing
/// knobs back before it (the thirty-first real-server run's h: the exit restore of a
/// 256 MiB redo outlasted the 10 s in every repetition).
pub fn order_changes(changes: &mut [(Knob, u64, u64)]) {
    let rank = |(knob, from, to): &(Knob, u64, u64)| -> u8 {
        let raising = to > from;
        match (knob, raising) {
            (Knob::IoCapacityMax, true) => 0,
            (Knob::IoCapacity, false) => 0,
            (Knob::IoCapacity, true) => 1,
            (Knob::IoCapacityMax, false) => 1,
            (k, _) if k.is_blocking() => 3,
            _ => 2,
        }
    };
    changes.sort_by_key(rank);
}

impl Actuator {
    /// `store` is required in live mode (the caller checks it is writable first).
    pub fn new(dry_run: bool, store: Option<StateStore>, state: StateFile) -> Self {
        Actuator {
            dry_run,
            store,
            state,
        }
    }

    pub fn is_dry_run(&self) -> bool {
        self.dry_run
    }

    pub fn baseline(&self) -> &KnobValues {
        &self.state.baseline
    }

    pub fn last_set(&self) -> &KnobValues {
        &self.state.last_set
    }

    /// Writes the state file (live mode only).
    pub fn persist(&mut self, now_unix_ms: u64) -> Result<(), crate::control::state::StateError> {
        self.state.updated_unix_ms = now_unix_ms;
        match (&self.store, self.dry_run) {
            (Some(store), false) => store.save(&self.state),
            _ => Ok(()),
        }
    }

    /// Takes new baseline values (at start, or after the server restarted and so
    /// forgot every SET GLOBAL).
    pub fn rebaseline(
        &mut self,
        baseline: KnobValues,
        now_unix_ms: u64,
    ) -> Result<(), crate::control::state::StateError> {
        self.state.baseline = baseline;
        self.state.last_set.clear();
        self.state.previous.clear();
        self.state.clean = false;
        self.persist(now_unix_ms)
    }

    /// Records (or, with `None`, clears) an operator's ownership of a knob in the state
    /// file, so `innopilot status` can show it.
    pub fn set_operator_owned(&mut self, knob: Knob, seen: Option<u64>, now_unix_ms: u64) {
        match seen {
            Some(v) => self.state.operator_owned.insert(knob, v),
            None => self.state.operator_owned.remove(&knob),
        };
        if let Err(e) = self.persist(now_unix_ms) {
            tracing::warn!("state file: {e}");
        }
    }

    /// Makes `value` the baseline of one knob (an operator's value, handed back with
    /// `innopilot release`): it is what innopilot restores from now on.
    pub fn set_baseline_value(
        &mut self,
        knob: Knob,
        value: u64,
        now_unix_ms: u64,
    ) -> Result<(), crate::control::state::StateError> {
        self.state.baseline.insert(knob, value);
        self.state.last_set.remove(&knob);
        self.persist(now_unix_ms)
    }

    /// Sets one knob. Live: records the intent in the state file first, then SET, then
    /// reads back. Dry-run: changes nothing.
    pub async fn apply<S: Server>(
        &mut self,
        server: &mut S,
        knob: Knob,
        value: u64,
        now_unix_ms: u64,
    ) -> Result<Applied, ActuatorError> {
        if self.dry_run {
            return Ok(Applied { readback: value });
        }
        self.record_intent(knob, value, now_unix_ms)?;
        let readback = server.set_knob(knob, value).await?;
        self.settle(knob, value, readback, now_unix_ms)
    }

    /// Starts setting a blocking knob ([`Knob::is_blocking`], a redo resize): records
    /// the intent in the state file first, as [`Actuator::apply`] does, and returns the
    /// SET under way, which the caller finishes and hands to [`Actuator::settle`].
    /// Dry-run: nothing to start (`None`).
    pub async fn start<S: Server>(
        &mut self,
        server: &mut S,
        knob: Knob,
        value: u64,
        now_unix_ms: u64,
    ) -> Result<Option<PendingSet>, ActuatorError> {
        if self.dry_run {
            return Ok(None);
        }
        self.record_intent(knob, value, now_unix_ms)?;
        Ok(Some(server.start_set(knob, value).await?))
    }

    /// What a SET read back. The server may have adjusted the value (e.g. clamped it):
    /// what is really in effect is remembered, so it is not mistaken for an operator's
    /// change.
    pub fn settle(
        &mut self,
        knob: Knob,
        value: u64,
        readback: u64,
        now_unix_ms: u64,
    ) -> Result<Applied, ActuatorError> {
        if readback != value {
            self.state.last_set.insert(knob, readback);
            self.persist(now_unix_ms)
                .map_err(|source| ActuatorError::State { knob, source })?;
        }
        Ok(Applied { readback })
    }

    /// The state file says what is about to be set before the server hears of it.
    fn record_intent(
        &mut self,
        knob: Knob,
        value: u64,
        now_unix_ms: u64,
    ) -> Result<(), ActuatorError> {
        self.state.record_set(knob, value, now_unix_ms);
        self.state.clean = false;
        self.persist(now_unix_ms)
            .map_err(|source| ActuatorError::State { knob, source })
    }

    /// Knobs whose value innopilot changed and that are not operator-owned: what a
    /// restore would set back, as (knob, live value, baseline value).
    pub fn pending_restore(
        &self,
        live: &KnobValues,
        skip: &BTreeSet<Knob>,
    ) -> Vec<(Knob, u64, u64)> {
        let mut out: Vec<(Knob, u64, u64)> = self
            .state
            .last_set
            .keys()
            .filter(|k| !skip.contains(k))
            .filter_map(|k| {
                let base = *self.state.baseline.get(k)?;
                let now = *live.get(k)?;
                (now != base).then_some((*k, now, base))
            })
            .collect();
        order_changes(&mut out);
        out
    }

    /// Restores the baseline for every knob innopilot changed whose SET returns at
    /// once, except `skip` (operator-owned). The redo resizes, which return only with
    /// a checkpoint, are the caller's: it records these first and then waits for
    /// those within the restore timeout ([`Actuator::restored`] for each that ends).
    pub async fn restore_fast<S: Server>(
        &mut self,
        server: &mut S,
        live: &KnobValues,
        skip: &BTreeSet<Knob>,
        now_unix_ms: u64,
    ) -> Vec<Restored> {
        let mut out = Vec::new();
        if self.dry_run {
            return out;
        }
        let pending = self.pending_restore(live, skip);
        for (knob, from, to) in pending.into_iter().filter(|c| !c.0.is_blocking()) {
            match server.set_knob(knob, to).await {
                Ok(rb) => {
                    out.push(Restored {
                        knob,
                        from,
                        to,
                        readback: Some(rb),
                        error: None,
                        under_way: None,
                    });
                }
                Err(e) => out.push(Restored {
                    knob,
                    from,
                    to,
                    readback: None,
                    error: Some(e.to_string()),
                    under_way: None,
                }),
            }
        }
        // What is left in last_set is exactly what could not be restored, and the
        // redo resizes, not yet tried: the next start's crash recovery will try
        // again.
        let failed: BTreeSet<Knob> = out
            .iter()
            .filter(|r| r.error.is_some())
            .map(|r| r.knob)
            .collect();
        self.state
            .last_set
            .retain(|k, _| failed.contains(k) || k.is_blocking());
        let _ = self.persist(now_unix_ms);
        out
    }

    /// Notes that `knob` is back at its baseline: the next start has nothing to
    /// recover for it.
    pub fn restored(&mut self, knob: Knob, now_unix_ms: u64) {
        if self.state.last_set.remove(&knob).is_some() {
            let _ = self.persist(now_unix_ms);
        }
    }

    /// Marks the state clean (baseline restored; nothing to recover) and saves it.
    pub fn finish(&mut self, now_unix_ms: u64) -> Result<(), crate::control::state::StateError> {
        self.state.clean = true;
        self.persist(now_unix_ms)
    }

    /// Notes at exit that the server finishes these knobs' way back to the baseline on
    /// its own (a redo shrink still running): the file stays unclean, so the next start
    /// waits for the resize and checks the size, and `innopilot status` can say the
    /// run stopped rather than crashed.
    pub fn hand_over(
        &mut self,
        knobs: &[Knob],
        now_unix_ms: u64,
    ) -> Result<(), crate::control::state::StateError> {
        self.state.handed_over = knobs.to_vec();
        self.persist(now_unix_ms)
    }

    /// Notes at exit that these knobs stay at innopilot's value on purpose (a grown
    /// redo log kept while the server is busy, [`StateFile::kept`]): the file stays
    /// unclean with their baseline, which the next live start carries on.
    ///
    /// [`StateFile::kept`]: crate::control::state::StateFile::kept
    pub fn keep(
        &mut self,
        knobs: &[Knob],
        now_unix_ms: u64,
    ) -> Result<(), crate::control::state::StateError> {
        self.state.kept = knobs.to_vec();
        self.persist(now_unix_ms)
    }

    /// Keeps what the policies have measured ([`crate::policy::Learned`]) in the state
    /// file: written now when it is news ([`crate::policy::Learned::news_since`]), else
    /// with the file's next write (the exit's at the latest). Nothing learned never
    /// erases what an earlier run left.
    pub fn remember(
        &mut self,
        learned: crate::policy::Learned,
        now_unix_ms: u64,
    ) -> Result<(), crate::control::state::StateError> {
        // A value the file would refuse would make every later write of it (each
        // SET's) fail: it is not kept.
        if learned.is_empty()
            || learned.check().is_err()
            || self.state.learned.is_some_and(|r| r.learned == learned)
        {
            return Ok(());
        }
        let news = self
            .state
            .learned
            .is_none_or(|r| learned.news_since(&r.learned));
        self.state.learned = Some(crate::control::state::Remembered {
            learned,
            unix_ms: now_unix_ms,
        });
        if news {
            self.persist(now_unix_ms)?;
        }
        Ok(())
    }

    /// Takes over a redo log a previous run left grown (kept at exit,
    /// [`Actuator::keep`], or any other way: `control::recover`): its `baseline` is
    /// the one to restore, and the value in effect, `now`, is innopilot's.
    pub fn carry(
        &mut self,
        knob: Knob,
        baseline: u64,
        now: u64,
        now_unix_ms: u64,
    ) -> Result<(), crate::control::state::StateError> {
        self.state.baseline.insert(knob, baseline);
        self.state.last_set.insert(knob, now);
        self.state.previous.insert(knob, baseline);
        self.persist(now_unix_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_capacity_pair_is_ordered() {
        let mut up = vec![
            (Knob::IoCapacity, 200, 4000),
            (Knob::IoCapacityMax, 2000, 8000),
        ];
        order_changes(&mut up);
        assert_eq!(up[0].0, Knob::IoCapacityMax);
        let mut down = vec![
            (Knob::IoCapacityMax, 8000, 2000),
            (Knob::IoCapacity, 4000, 200),
        ];
        order_changes(&mut down);
        assert_eq!(down[0].0, Knob::IoCapacity);
    }

    /// A redo resize blocks its session until a checkpoint: everything else first,
    /// whatever the allowlist's order (innodb_log_file_size sorts before the undo and
    /// page-cleaner knobs).
    #[test]
    fn a_redo_resize_goes_last() {
        let mut v = vec![
            (Knob::MaxPurgeLagDelay, 5000, 0),
            (Knob::LogFileSize, 1 << 30, 128 << 20),
            (Knob::RedoLogCapacity, 1 << 30, 100 << 20),
            (Knob::MaxUndoLogSize, 1 << 30, 10 << 20),
            (Knob::MaxDirtyPagesPctLwm, 1, 0),
            (Knob::IoCapacityMax, 4000, 2000),
        ];
        order_changes(&mut v);
        let order: Vec<Knob> = v.iter().map(|c| c.0).collect();
        assert_eq!(
            order,
            [
                Knob::IoCapacityMax,
                Knob::MaxPurgeLagDelay,
                Knob::MaxUndoLogSize,
                Knob::MaxDirtyPagesPctLwm,
                Knob::LogFileSize,
                Knob::RedoLogCapacity,
            ]
        );
    }
}
