//! What the model's server does with a `SET GLOBAL`: the bounds and refusals of the
//! real variable, and MariaDB ≥ 10.9's redo resize, adopted only once the checkpoint
//! passes the LSN it began at (`log_t::resize_start()`, `write_checkpoint()`).

use super::*;

impl Model {
    /// Starts `SET GLOBAL innodb_log_file_size = value` as MariaDB ≥ 10.9 runs it
    /// (`Resize`): the size in effect, and the one read back, stay the old one until
    /// the checkpoint passes the LSN it began at. A second resize while one runs is
    /// refused as the server refuses it. A server with nothing left to run (the
    /// scenario is over) checkpoints at once, so the resize ends at once, as on an
    /// idle server.
    pub fn start_resize(&mut self, value: u64) -> Result<ResizeStart, ServerError> {
        let knob = self.flavor.redo_knob();
        self.refuse_while_resizing(knob)?;
        let current = self.knobs.get(&knob).copied();
        let v = self.clamp_to_server(knob, value)?;
        if current == Some(v) || self.finished() {
            return self.set_knob(knob, v).map(ResizeStart::Done);
        }
        let session = self.next_session;
        self.next_session += 1;
        self.resize = Some(Resize {
            session,
            to: v,
            lsn: self.lsn,
            started_ms: self.t_ms,
            wakers: Vec::new(),
        });
        Ok(ResizeStart::Started(session))
    }

    /// MariaDB refuses a second resize while one runs (ERROR 1221, checked on
    /// 10.11.19).
    fn refuse_while_resizing(&self, knob: Knob) -> Result<(), ServerError> {
        if self.resize.is_none() || knob != self.flavor.redo_knob() {
            return Ok(());
        }
        Err(ServerError::ResizeUnderWay {
            knob,
            message: format!(
                "ERROR 1221 (HY000): Incorrect usage of SET GLOBAL {0} and {0} change is \
                 already in progress",
                knob.var_name()
            ),
        })
    }

    /// How the resize on `session` ended, once (None while it runs, or for another
    /// session); `waker` is woken when it ends.
    pub(super) fn resize_outcome(
        &mut self,
        session: u64,
        waker: &Waker,
    ) -> Option<Result<u64, String>> {
        if let Some(o) = self.resize_outcomes.remove(&session) {
            return Some(o);
        }
        match self.resize.as_mut() {
            Some(r) if r.session == session => {
                r.wakers.push(waker.clone());
                None
            }
            _ => Some(Err(format!("no resize on session {session}"))),
        }
    }

    pub(super) fn end_resize(&mut self, r: Resize, outcome: Result<u64, String>) {
        self.resize_outcomes.insert(r.session, outcome);
        for w in r.wakers {
            w.wake();
        }
    }

    /// `KILL QUERY` on a resize's session: MariaDB abandons it
    /// (`log_t::resize_abort()`) and answers OK with the old size.
    pub(super) fn abort_resize(&mut self, session: u64) -> bool {
        match self.resize.take() {
            Some(r) if r.session == session => {
                let old = self
                    .knobs
                    .get(&self.flavor.redo_knob())
                    .copied()
                    .unwrap_or(0);
                self.end_resize(r, Ok(old));
                true
            }
            other => {
                self.resize = other;
                false
            }
        }
    }

    /// The value `knob` would take: the server's range, or why it cannot be set.
    fn clamp_to_server(&self, knob: Knob, value: u64) -> Result<u64, ServerError> {
        match self.caps.knob(knob) {
            Some(c) if c.settable() => {
                let mut v = value;
                if let Some(lo) = c.server_min {
                    v = v.max(lo);
                }
                if let Some(hi) = c.server_max {
                    v = v.min(hi);
                }
                Ok(v)
            }
            Some(c) => Err(ServerError::NotSettable {
                knob,
                why: c.note.clone(),
            }),
            None => Err(ServerError::NotSettable {
                knob,
                why: "not in the capability table".into(),
            }),
        }
    }

    /// `SET GLOBAL knob = value` with the server's bounds and cross-checks, returning
    /// what reads back.
    pub fn set_knob(&mut self, knob: Knob, value: u64) -> Result<u64, ServerError> {
        self.refuse_while_resizing(knob)?;
        let mut v = self.clamp_to_server(knob, value)?;
        // The servers keep io_capacity ≤ io_capacity_max (with a warning).
        match knob {
            Knob::IoCapacity => {
                v = v.min(self.knob(Knob::IoCapacityMax) as u64);
            }
            Knob::IoCapacityMax => {
                v = v.max(self.knob(Knob::IoCapacity) as u64);
            }
            Knob::UndoLogTruncate => v = v.min(1),
            _ => {}
        }
        self.knobs.insert(knob, v);
        Ok(v)
    }
}
