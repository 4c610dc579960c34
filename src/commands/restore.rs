//! `innopilot restore` and `innopilot release`: the two commands that act on a live
//! run's state file from outside it. Both say what actually happened and fail (a
//! non-zero exit) when nothing was done, so a script or an operator is never told
//! "done" about something that did not happen.

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use crate::config::Config;
use crate::control::audit::{AuditLog, Mode};
use crate::control::state::{open_nofollow, LockState, StateError, StateStore};
use crate::control::{recover, release_path};
use crate::server::{Knob, Server, ServerError};

/// Why `restore` or `release` did nothing, or not everything.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    #[error(transparent)]
    State(#[from] StateError),
    #[error(transparent)]
    Server(#[from] ServerError),
    #[error("nothing to restore: {0}")]
    NothingToRestore(String),
    #[error(
        "a live innopilot (pid {pid}) is running with the state file {path}: its state is \
         unclean because it is running, and it restores its own baseline when stopped \
         (SIGTERM). Stop it instead; `innopilot restore` is for a run that died"
    )]
    LiveRunHolds { path: String, pid: String },
    #[error(
        "the state file {path} belongs to another server ({theirs}); this is {ours}. Nothing \
         was changed: run `innopilot restore` against that server"
    )]
    Foreign {
        path: String,
        theirs: String,
        ours: String,
    },
    #[error(
        "the baseline was not fully restored: {detail}. The state file {path} is kept (see \
         the audit log)"
    )]
    Incomplete { path: String, detail: String },
    #[error(
        "another live innopilot is running on this server ({holder} holds its claim); \
         restoring under it could undo its work. Stop it first"
    )]
    ServerClaimed { holder: String },
    #[error("nothing to release: {0}")]
    NothingToRelease(String),
    #[error("cannot write the release request {path}: {message}")]
    Request { path: String, message: String },
    #[error(
        "asked the innopilot (pid {pid}) using {path} to take {knob} back, but it has not \
         confirmed within {}; see its audit log for `released`",
        humantime::format_duration(*waited)
    )]
    NotConfirmed {
        path: String,
        pid: String,
        knob: Knob,
        waited: Duration,
    },
}

impl RestoreError {
    /// Process exit code: 2 for a state file of another server (wrong arguments), 1
    /// for everything else.
    pub fn exit_code(&self) -> u8 {
        match self {
            RestoreError::Foreign { .. } => 2,
            _ => 1,
        }
    }
}

/// What `restore` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restored {
    /// Knobs set back to their baseline.
    pub restored: Vec<Knob>,
    /// Knobs someone else changed since (or unreadable): left alone.
    pub left: Vec<Knob>,
    /// Knobs that were already at their baseline.
    pub already: Vec<Knob>,
}

impl std::fmt::Display for Restored {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names = Knob::list;
        if self.restored.is_empty() {
            f.write_str("no knob needed restoring")?;
        } else {
            write!(f, "restored {}", names(&self.restored))?;
        }
        if !self.already.is_empty() {
            write!(f, "; already at the baseline: {}", names(&self.already))?;
        }
        if !self.left.is_empty() {
            write!(
                f,
                "; left alone (changed by someone else since): {}",
                names(&self.left)
            )?;
        }
        Ok(())
    }
}

/// Restores the baseline a live run that died left in `state_file`, holding the state
/// file's lock meanwhile (so it never races a live run), then marks the file clean.
/// Every value is checked against `config` first; see [`recover`].
pub async fn restore<S: Server>(
    server: &mut S,
    target: &str,
    config: &Config,
    state_file: &Path,
) -> Result<Restored, RestoreError> {
    let store = StateStore::new(state_file.to_path_buf());
    let path = state_file.display().to_string();
    let first = store.load()?;
    match &first {
        None => {
            return Err(RestoreError::NothingToRestore(format!(
                "no state file at {path}"
            )))
        }
        Some(s) if s.clean => {
            return Err(RestoreError::NothingToRestore(format!(
                "{path}: the last run finished cleanly and restored its baseline"
            )))
        }
        Some(_) => {}
    }
    let _lock = store.lock().map_err(|e| match e {
        StateError::Locked { pid, .. } => RestoreError::LiveRunHolds {
            path: path.clone(),
            pid,
        },
        e => e.into(),
    })?;
    // Read again under the lock: a run may have finished in between.
    let saved = match store.load()? {
        Some(s) if !s.clean => s,
        _ => {
            return Err(RestoreError::NothingToRestore(format!(
                "{path}: the run finished cleanly meanwhile"
            )))
        }
    };
    server.probe().await?;
    // A live run on this server with another state file may own the values now.
    if let Some(holder) = server.claim().await? {
        return Err(RestoreError::ServerClaimed { holder });
    }
    let mut audit = AuditLog::open(&config.audit).unwrap_or_else(|e| {
        tracing::warn!("restoring without an audit log: {e}");
        AuditLog::discard()
    });
    let report = recover(
        server,
        &saved,
        config,
        target,
        &mut audit,
        Mode::Live,
        false,
    )
    .await?;
    if let Some(theirs) = report.foreign {
        let ours = match server.instance() {
            Some(i) => format!("{i} at {target}"),
            None => target.to_string(),
        };
        return Err(RestoreError::Foreign { path, theirs, ours });
    }
    if let Some(detail) = report.incomplete() {
        return Err(RestoreError::Incomplete { path, detail });
    }
    let mut done = saved;
    done.clean = true;
    done.last_set.clear();
    store.save(&done)?;
    Ok(Restored {
        restored: report.restored,
        left: report.left,
        already: report.already,
    })
}

/// Hands `knob` back to the live run using `state_file` (it took it for an operator's)
/// and waits up to `wait` for the run to confirm it in its state file. Fails when no
/// live run holds the file, when the knob is not operator-owned there, or when the run
/// does not confirm.
pub async fn release(
    state_file: &Path,
    knob: Knob,
    wait: Duration,
) -> Result<String, RestoreError> {
    let store = StateStore::new(state_file.to_path_buf());
    let path = state_file.display().to_string();
    let pid = match store.lock_state() {
        LockState::Held(pid) => pid,
        LockState::Free => {
            return Err(RestoreError::NothingToRelease(format!(
                "no live innopilot is running with the state file {path}"
            )))
        }
        LockState::Unknown(why) => {
            return Err(RestoreError::NothingToRelease(format!(
                "cannot tell whether an innopilot runs with the state file {path} ({why}); \
                 run `innopilot release` as the service's user"
            )))
        }
    };
    let owned = |store: &StateStore| -> Result<bool, RestoreError> {
        Ok(store
            .load()?
            .is_some_and(|s| s.operator_owned.contains_key(&knob)))
    };
    if !owned(&store)? {
        return Err(RestoreError::NothingToRelease(format!(
            "the innopilot (pid {pid}) using {path} does not hold {knob} as operator-owned; it manages it already"
        )));
    }
    let request = release_path(state_file);
    let mut opts = std::fs::OpenOptions::new();
    opts.create(true).append(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let req_err = |e: std::io::Error| RestoreError::Request {
        path: request.display().to_string(),
        message: e.to_string(),
    };
    let mut f = open_nofollow(&request, &mut opts).map_err(req_err)?;
    writeln!(f, "{}", knob.var_name()).map_err(req_err)?;
    drop(f);
    let deadline = tokio::time::Instant::now() + wait;
    while tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if !owned(&store)? {
            return Ok(format!(
                "the innopilot (pid {pid}) using {path} took {knob} back; its current value is now its baseline"
            ));
        }
    }
    Err(RestoreError::NotConfirmed {
        path,
        pid,
        knob,
        waited: wait,
    })
}
