//! Crash safety: the state file and the crash-recovery plan.
//!
//! While innopilot runs, `control.state_file` holds the baseline (the knob values found
//! at start) and the value innopilot last set for each knob, written atomically
//! *before* each `SET GLOBAL`. If innopilot dies without restoring the baseline, the
//! next start finds `clean: false` and uses [`recovery_plan`] to put back only what
//! innopilot itself changed: a knob someone else has changed since is left alone and
//! reported.
//!
//! This module owns the file format ([`StateFile`]), durable writes ([`StateStore`])
//! and the recovery rule; talking to the server is the caller's job.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::config::{hard_range, Config};
use crate::policy::Learned;
use crate::server::{Knob, KnobValues};

/// The state file format version this build writes and reads.
pub const STATE_VERSION: u32 = 1;

/// What `control.state_file` holds.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct StateFile {
    /// Format version, [`STATE_VERSION`].
    pub version: u32,
    /// `false` while innopilot runs; `true` after a clean exit with the baseline
    /// restored. A `false` found at start means the previous run crashed (or is still
    /// running: see `pid`).
    pub clean: bool,
    /// Process id of the innopilot that wrote the file.
    pub pid: u32,
    /// Identity of the server, e.g. "MariaDB 10.11.19 at root@127.0.0.1:3306". Never a
    /// password.
    pub server: String,
    /// What the server *is*, independent of how the DSN spells it (`@@server_uuid` on
    /// MySQL; server id, host name, port and data directory on MariaDB): decides
    /// whether a crashed run's state belongs to the server connected now. Absent in
    /// files written before it existed, which fall back to comparing `server`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
    pub started_unix_ms: u64,
    /// Values found at start: what innopilot restores.
    pub baseline: KnobValues,
    /// What innopilot last set, per knob; written before each SET, so after a crash a
    /// knob's entry may be one SET ahead of the server.
    pub last_set: KnobValues,
    /// Per knob, the value innopilot believed in effect before its latest SET (the
    /// baseline or an earlier value of its own). A crash between saving `last_set` and
    /// the SET leaves the server at this value, which is still innopilot's to restore.
    #[serde(default)]
    pub previous: KnobValues,
    /// Knobs someone else changed during the run, with the value they set: innopilot
    /// leaves them alone. Shown by `innopilot status`.
    #[serde(default)]
    pub operator_owned: KnobValues,
    /// Knobs whose way back to the baseline the run's exit left to the server: a redo
    /// shrink still running when the exit restore stopped waiting for it. The file
    /// stays unclean; the next start (or `innopilot restore`) waits for the resize and
    /// checks the size. Shown by `innopilot status`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub handed_over: Vec<Knob>,
    /// Knobs the run's exit left at innopilot's value on purpose: a redo log it grew,
    /// kept because the checkpoint age would not have fitted the baseline log quietly
    /// (a shrink then flushes every dirty page while users write, and lands near the
    /// smaller log's maximum checkpoint age). The file stays unclean: the next live
    /// start carries the grown log on with this baseline; `innopilot restore` puts the
    /// baseline back; a server restart does too (its option files). Shown by
    /// `innopilot status`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kept: Vec<Knob>,
    /// What the policies measured about the machine ([`Learned`]), and when it was
    /// last written: recalled by the next start on the same server, clean exit or
    /// not. Absent until something is measured, and in files written before it
    /// existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub learned: Option<Remembered>,
    pub updated_unix_ms: u64,
}

/// [`Learned`] as the state file keeps it: with when it was written.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq)]
pub struct Remembered {
    #[serde(flatten)]
    pub learned: Learned,
    /// When these values were last written (Unix ms).
    pub unix_ms: u64,
}

impl StateFile {
    /// The state of a run that has just read its baseline and set nothing yet.
    pub fn new(pid: u32, server: String, now_unix_ms: u64, baseline: KnobValues) -> StateFile {
        StateFile {
            version: STATE_VERSION,
            clean: false,
            pid,
            server,
            instance: None,
            started_unix_ms: now_unix_ms,
            baseline,
            last_set: KnobValues::new(),
            previous: KnobValues::new(),
            operator_owned: KnobValues::new(),
            handed_over: Vec::new(),
            kept: Vec::new(),
            learned: None,
            updated_unix_ms: now_unix_ms,
        }
    }

    /// Notes that innopilot is about to set `knob` to `value` (save before the SET).
    pub fn record_set(&mut self, knob: Knob, value: u64, now_unix_ms: u64) {
        let before = self
            .last_set
            .get(&knob)
            .or_else(|| self.baseline.get(&knob))
            .copied();
        if let Some(b) = before {
            self.previous.insert(knob, b);
        }
        self.last_set.insert(knob, value);
        self.updated_unix_ms = now_unix_ms;
    }

    /// Checks what serde cannot: the version, and that every knob innopilot set has a
    /// baseline to go back to.
    fn validate(&self) -> Result<(), String> {
        if self.version != STATE_VERSION {
            return Err(format!(
                "format version {} (this innopilot reads version {STATE_VERSION})",
                self.version
            ));
        }
        if let Some(k) = self
            .last_set
            .keys()
            .find(|k| !self.baseline.contains_key(k))
        {
            return Err(format!("last_set has {k} but baseline does not"));
        }
        if let Some(r) = &self.learned {
            r.learned.check()?;
        }
        Ok(())
    }
}

/// A state file problem. Every message names the file and what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("cannot read state file {}: {message}", path.display())]
    Read { path: PathBuf, message: String },
    #[error(
        "state file {} is unusable: {message}. It records the values innopilot found at \
         start and what it last set; inspect it (restore those values by hand if the \
         server still has innopilot's), then remove it to start afresh",
        path.display()
    )]
    Corrupt { path: PathBuf, message: String },
    #[error("cannot write state file {}: {message}. {hint}", path.display())]
    Write {
        path: PathBuf,
        message: String,
        hint: String,
    },
    /// Whoever can write the file can make innopilot set any value it lists, so it is
    /// trusted only when private, as ssh trusts its key files.
    #[error(
        "refusing to trust {}: {message}. Whoever can write it could make innopilot \
         change the server; make it (and its directory) owned by the user innopilot \
         runs as and not writable by group or others (chown, chmod go-w)",
        path.display()
    )]
    Unsafe { path: PathBuf, message: String },
    #[error(
        "another innopilot (pid {pid}) is running live with the state file {}; only one \
         live run (or `innopilot restore`) may use it at a time. Stop that one first, \
         or give this one its own control.state_file",
        path.display()
    )]
    Locked { path: PathBuf, pid: String },
}

/// Reads and writes the state file durably.
#[derive(Debug, Clone)]
pub struct StateStore {
    path: PathBuf,
}

impl StateStore {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        StateStore { path: path.into() }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The saved state; `None` when there is no file (first run). A file that others
    /// could have written is refused ([`StateError::Unsafe`]).
    pub fn load(&self) -> Result<Option<StateFile>, StateError> {
        let read_error = |e: io::Error| StateError::Read {
            path: self.path.clone(),
            message: e.to_string(),
        };
        // Opened without following a symlink, and checked through the open file, so
        // what is checked is what is read.
        let mut f = match open_nofollow(&self.path, OpenOptions::new().read(true)) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(read_error(e)),
        };
        check_private(&self.path, &f.metadata().map_err(read_error)?)?;
        check_private(&self.dir(), &fs::metadata(self.dir()).map_err(read_error)?)?;
        self.parse(&mut f)
    }

    /// The saved state for display only (`innopilot status`, which may run as another
    /// user): no owner or mode check, since nothing is set from it. `None` when absent
    /// or unreadable.
    pub fn peek(&self) -> Option<StateFile> {
        let mut f = open_nofollow(&self.path, OpenOptions::new().read(true)).ok()?;
        self.parse(&mut f).ok().flatten()
    }

    fn parse(&self, f: &mut File) -> Result<Option<StateFile>, StateError> {
        let mut text = String::new();
        f.read_to_string(&mut text).map_err(|e| StateError::Read {
            path: self.path.clone(),
            message: e.to_string(),
        })?;
        let corrupt = |message: String| StateError::Corrupt {
            path: self.path.clone(),
            message,
        };
        let state: StateFile = serde_json::from_str(&text).map_err(|e| corrupt(e.to_string()))?;
        state.validate().map_err(corrupt)?;
        Ok(Some(state))
    }

    /// Replaces the file atomically: a crash at any point leaves either the old or the
    /// new content, never a torn file, because the new content is written and fsynced
    /// under a temporary name in the same directory, renamed over, and the directory
    /// fsynced so the rename itself survives a power loss.
    pub fn save(&self, s: &StateFile) -> Result<(), StateError> {
        // Refuse to write what load() would refuse to read: a crash would then leave a
        // file the next start cannot use.
        s.validate().map_err(|message| StateError::Write {
            path: self.path.clone(),
            message,
            hint: "This is a bug in innopilot; please report it".into(),
        })?;
        let mut text = serde_json::to_vec_pretty(s).map_err(|e| self.write_error(e.into()))?;
        text.push(b'\n');
        let name = self.file_name()?;
        let dir = self.dir();
        // A random name created with O_EXCL: a file or link planted under a guessable
        // name can neither be overwritten nor followed. Removed again on any error.
        let result = temp_file(&dir, &name, "tmp").and_then(|mut tmp| {
            tmp.write_all(&text)?;
            tmp.as_file().sync_all()?;
            tmp.persist(&self.path).map_err(|e| e.error)?;
            sync_dir(&dir)
        });
        result.map_err(|e| self.write_error(e))
    }

    /// Proves the file can be saved: creates the directory if missing (mode 0700),
    /// then writes, fsyncs and renames a probe file there. Live mode calls this before
    /// touching the server, so a bad path fails at start rather than before the first
    /// SET.
    pub fn check_writable(&self) -> Result<(), StateError> {
        let name = self.file_name()?;
        let dir = self.dir();
        if !dir.exists() {
            create_private_dir(&dir).map_err(|e| self.write_error(e))?;
        }
        if self.path.is_dir() {
            return Err(self.write_error(io::Error::other("it is a directory")));
        }
        let meta = fs::metadata(&dir).map_err(|e| self.write_error(e))?;
        check_private(&dir, &meta)?;
        // Both probe names are random and created with O_EXCL; the rename proves the
        // directory takes the atomic replace that save() relies on. Dropping them
        // removes whatever is left.
        let result = temp_file(&dir, &name, "probe").and_then(|mut probe| {
            probe.write_all(b"{}\n")?;
            probe.as_file().sync_all()?;
            let target = temp_file(&dir, &name, "probe")?;
            fs::rename(probe.path(), target.path())
        });
        result.map_err(|e| self.write_error(e))
    }

    /// Takes the advisory lock that makes this the only live run (or restore) using
    /// the state file, for as long as the returned guard lives. Refuses with the
    /// holder's pid when another process has it.
    pub fn lock(&self) -> Result<StateLock, StateError> {
        let path = lock_path(&self.path);
        let err = |e: io::Error| self.write_error(e);
        let mut opts = OpenOptions::new();
        opts.read(true).write(true).create(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            opts.mode(0o600);
        }
        let mut file = open_nofollow(&path, &mut opts).map_err(err)?;
        check_private(&path, &file.metadata().map_err(err)?)?;
        match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {}
            Err(e) if e == rustix::io::Errno::WOULDBLOCK => {
                let mut pid = String::new();
                let _ = file.read_to_string(&mut pid);
                let pid = pid.trim();
                return Err(StateError::Locked {
                    path: self.path.clone(),
                    pid: if pid.is_empty() {
                        "unknown".into()
                    } else {
                        pid.into()
                    },
                });
            }
            Err(e) => return Err(err(e.into())),
        }
        // The pid is for the refusal message of the next one; the lock is the flock.
        file.set_len(0).map_err(err)?;
        file.rewind().map_err(err)?;
        writeln!(file, "{}", std::process::id()).map_err(err)?;
        Ok(StateLock { _file: file })
    }

    /// Whether a live run holds the state file's lock (a brief, shared probe of the
    /// lock that changes nothing on disk). An unclean state file alone cannot tell a
    /// running run from one that crashed or handed a resize to the server; the lock
    /// can, when this process may read it.
    pub fn lock_state(&self) -> LockState {
        let path = lock_path(&self.path);
        let mut file = match open_nofollow(&path, OpenOptions::new().read(true)) {
            Ok(f) => f,
            // Every run creates the lock file before it writes the state: none there,
            // none held.
            Err(e) if e.kind() == io::ErrorKind::NotFound => return LockState::Free,
            Err(e) => return LockState::Unknown(format!("cannot open {}: {e}", path.display())),
        };
        match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockShared) {
            Ok(()) => LockState::Free,
            Err(e) if e == rustix::io::Errno::WOULDBLOCK => {
                let mut pid = String::new();
                let _ = file.read_to_string(&mut pid);
                let pid = pid.trim();
                LockState::Held(if pid.is_empty() {
                    "unknown".into()
                } else {
                    pid.into()
                })
            }
            Err(e) => {
                LockState::Unknown(format!("cannot probe the lock on {}: {e}", path.display()))
            }
        }
    }

    fn file_name(&self) -> Result<std::ffi::OsString, StateError> {
        self.path
            .file_name()
            .map(|n| n.to_os_string())
            .ok_or_else(|| StateError::Write {
                path: self.path.clone(),
                message: "the path does not name a file".into(),
                hint: "Set control.state_file to a file path such as /var/lib/innopilot/state.json"
                    .into(),
            })
    }

    /// The state file's directory (for temp files and fsync); "." for a bare name.
    fn dir(&self) -> PathBuf {
        match self.path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        }
    }

    fn write_error(&self, e: io::Error) -> StateError {
        let dir = match self.path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.display().to_string(),
            _ => ".".into(),
        };
        let hint = match e.kind() {
            io::ErrorKind::StorageFull => format!("Free space on the file system of {dir}"),
            _ => format!(
                "Create {dir} owned by the user innopilot runs as (mode 0700), or set \
                 control.state_file to a writable path"
            ),
        };
        StateError::Write {
            path: self.path.clone(),
            message: e.to_string(),
            hint,
        }
    }
}

/// Whether a live run holds a state file's lock ([`StateStore::lock_state`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockState {
    /// A live run (or `innopilot restore`) holds it: its pid as it wrote it.
    Held(String),
    /// No process holds it.
    Free,
    /// This process cannot tell (the lock file cannot be opened or probed): why.
    Unknown(String),
}

/// Held for a live run's life (and by `innopilot restore`): the advisory lock on
/// `STATE.lock`. The kernel drops it when the process ends, however it ends.
#[derive(Debug)]
pub struct StateLock {
    _file: File,
}

/// `STATE.lock`, beside the state file. The state file itself cannot carry the lock:
/// every save replaces it with a new file.
pub fn lock_path(state_file: &Path) -> PathBuf {
    let mut p = state_file.as_os_str().to_owned();
    p.push(".lock");
    PathBuf::from(p)
}

/// A hidden temp file with a random name in `dir` (mode 0600, O_EXCL), e.g.
/// `.state.json.tmp.Xa81Kq`; hidden so that globbing `*.json` never picks it up.
fn temp_file(
    dir: &Path,
    name: &std::ffi::OsStr,
    what: &str,
) -> io::Result<tempfile::NamedTempFile> {
    let prefix = format!(".{}.{what}.", name.to_string_lossy());
    tempfile::Builder::new().prefix(&prefix).tempfile_in(dir)
}

/// Opens `path` refusing a symlink as its last component (O_NOFOLLOW): a link
/// planted there must not redirect innopilot to another file.
pub fn open_nofollow(path: &Path, opts: &mut OpenOptions) -> io::Result<File> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32);
    }
    opts.open(path).map_err(|e| {
        if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) {
            io::Error::other(format!(
                "{} is a symbolic link; innopilot does not follow links there",
                path.display()
            ))
        } else {
            e
        }
    })
}

/// The ssh rule: a file innopilot takes orders from must be owned by the user it runs
/// as (or root) and writable by nobody else.
fn check_private(path: &Path, meta: &fs::Metadata) -> Result<(), StateError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let me = rustix::process::geteuid().as_raw();
        let unsafe_ = |message: String| StateError::Unsafe {
            path: path.to_path_buf(),
            message,
        };
        if meta.uid() != me && meta.uid() != 0 {
            return Err(unsafe_(format!(
                "it is owned by uid {}, and innopilot runs as uid {me} (run it as the \
                 owner, e.g. `sudo -u` the service user, or change the owner)",
                meta.uid()
            )));
        }
        if meta.mode() & 0o022 != 0 {
            return Err(unsafe_(format!(
                "its mode {:o} lets group or others write it",
                meta.mode() & 0o7777
            )));
        }
    }
    #[cfg(not(unix))]
    let _ = (path, meta);
    Ok(())
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    // Only Unix can open and fsync a directory; elsewhere the rename is as durable as
    // the platform makes it.
    #[cfg(unix)]
    File::open(dir)?.sync_all()?;
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

fn create_private_dir(dir: &Path) -> io::Result<()> {
    let mut b = fs::DirBuilder::new();
    b.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        b.mode(0o700);
    }
    b.create(dir)
}

/// A value in a state file that innopilot will not set, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub knob: Knob,
    pub value: u64,
    pub why: String,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} = {}: {}", self.knob, self.value, self.why)
    }
}

/// Checks every value of `saved` that recovery could act on (each knob innopilot set:
/// its baseline, last and previous values) against the knob's hard range, the
/// configured `[knobs.*]` bounds and `manage`, exactly as a policy's proposal is
/// checked. The file is input like any other: an edited or corrupted one must not
/// make innopilot set what its configuration forbids. A refused value is reported,
/// never clamped into something to set.
pub fn refused_values(saved: &StateFile, cfg: &Config) -> Vec<Refused> {
    let mut out = Vec::new();
    for (&knob, &last) in &saved.last_set {
        let limits = cfg.limits(knob);
        let (lo, hi) = hard_range(knob);
        let base = saved.baseline.get(&knob).copied();
        if !limits.manage {
            out.push(Refused {
                knob,
                value: base.unwrap_or(last),
                why: format!("[knobs.{knob}] has manage = false: innopilot never sets it"),
            });
            continue;
        }
        let mut values = vec![last];
        values.extend(saved.previous.get(&knob));
        values.extend(base);
        if let Some(&v) = values.iter().find(|v| !(lo..=hi).contains(*v)) {
            out.push(Refused {
                knob,
                value: v,
                why: format!("outside the range any server accepts ({lo}..={hi})"),
            });
        } else if let Some(b) = base.filter(|b| !(limits.min..=limits.max).contains(b)) {
            out.push(Refused {
                knob,
                value: b,
                why: format!(
                    "outside the configured bounds [knobs.{knob}] min = {}, max = {}",
                    limits.min, limits.max
                ),
            });
        }
    }
    out
}

/// Why crash recovery leaves a knob alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LeaveReason {
    /// The live value is neither innopilot's last value nor the baseline: someone else
    /// set it after innopilot did, and their value wins.
    ChangedSince,
    /// The server did not report the knob (different server, version or privileges).
    NotReadable,
    /// The state has no baseline for the knob, so there is nothing to go back to
    /// (only a hand-edited file can get here: `load` rejects such files).
    NoBaseline,
    /// A redo resize is still under way on the server after crash recovery's wait
    /// (`server.resize_timeout`): MariaDB refuses another until it ends ("change is
    /// already in progress"), and it ends on its own.
    ResizeUnderWay,
    /// The server has restarted since the state was last written: no SET GLOBAL of
    /// that run is in effect, and a value equal to one is the server's own (its option
    /// files: the advice after a grow says to write the grown size there).
    ServerRestarted,
}

impl std::fmt::Display for LeaveReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LeaveReason::ChangedSince => {
                "changed by someone else since innopilot set it; their value is kept"
            }
            LeaveReason::NotReadable => "the server does not report this variable now",
            LeaveReason::NoBaseline => "the state file has no baseline for it",
            LeaveReason::ServerRestarted => {
                "the server has restarted since the previous run last wrote its state, so \
                 this value is the server's own configuration (its option files), not \
                 innopilot's: left alone"
            }
            LeaveReason::ResizeUnderWay => {
                "a redo resize is still under way on the server (the previous run's shrink, \
                 handed over at its exit, or a grow it died in); the server finishes it on its \
                 own and refuses another until then, so this run leaves the size alone"
            }
        })
    }
}

/// A knob crash recovery does not touch, for the audit log and the operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leave {
    pub knob: Knob,
    /// Value in effect now; `None` when the server did not report it.
    pub live: Option<u64>,
    /// What innopilot last set (or was about to set when it died).
    pub last_set: u64,
    /// `None` only with [`LeaveReason::NoBaseline`].
    pub baseline: Option<u64>,
    pub reason: LeaveReason,
}

/// What to do after a crash, knob by knob; every knob in `last_set` is in exactly one
/// list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryPlan {
    /// `(knob, live value, baseline)`: still at innopilot's value; set back.
    pub restore: Vec<(Knob, u64, u64)>,
    /// Not innopilot's to restore any more.
    pub leave: Vec<Leave>,
    /// Already at the baseline; nothing to do.
    pub already_baseline: Vec<Knob>,
}

impl RecoveryPlan {
    /// Nothing to restore and nothing to report.
    pub fn is_empty(&self) -> bool {
        self.restore.is_empty() && self.leave.is_empty()
    }
}

/// Crash recovery: given the saved state and the values in effect now, which knobs to
/// restore and which to leave.
///
/// A knob is restored only when its live value is innopilot's: what it last set, or
/// what it believed in effect just before that SET (it may have died between writing
/// the state and sending the SET). Any other value means an operator (or another tool)
/// has taken over, and overwriting their choice with a stale baseline would be worse
/// than leaving it.
pub fn recovery_plan(saved: &StateFile, live: &KnobValues) -> RecoveryPlan {
    let mut plan = RecoveryPlan::default();
    for (&knob, &last) in &saved.last_set {
        // Without a baseline there is nothing to restore to; leave rather than guess.
        let Some(&base) = saved.baseline.get(&knob) else {
            plan.leave.push(Leave {
                knob,
                live: live.get(&knob).copied(),
                last_set: last,
                baseline: None,
                reason: LeaveReason::NoBaseline,
            });
            continue;
        };
        match live.get(&knob).copied() {
            Some(now) if now == base => plan.already_baseline.push(knob),
            Some(now) if now == last || saved.previous.get(&knob) == Some(&now) => {
                plan.restore.push((knob, now, base))
            }
            now => plan.leave.push(Leave {
                knob,
                live: now,
                last_set: last,
                baseline: Some(base),
                reason: if now.is_some() {
                    LeaveReason::ChangedSince
                } else {
                    LeaveReason::NotReadable
                },
            }),
        }
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample_state() -> StateFile {
        let baseline: KnobValues = [
            (Knob::PurgeThreads, 4),
            (Knob::MaxPurgeLag, 0),
            (Knob::IoCapacity, 200),
            (Knob::MaxUndoLogSize, 10 << 30),
        ]
        .into();
        let mut s = StateFile::new(
            4242,
            "MariaDB 10.11.19 at root@127.0.0.1:3306".into(),
            1_700_000_000_000,
            baseline,
        );
        s.record_set(Knob::PurgeThreads, 2, 1_700_000_001_000);
        s
    }

    fn dir_entries(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn crash_between_state_write_and_set_is_still_restored() {
        // innopilot had set 2, saved "about to set 1", and died before the SET: the
        // server still runs innopilot's 2, which must go back to the baseline 4.
        let mut s = sample_state();
        s.record_set(Knob::PurgeThreads, 1, 1_700_000_002_000);
        assert_eq!(s.previous[&Knob::PurgeThreads], 2);
        let live: KnobValues = [(Knob::PurgeThreads, 2)].into();
        let plan = recovery_plan(&s, &live);
        assert_eq!(plan.restore, vec![(Knob::PurgeThreads, 2, 4)]);
        // An operator's 7 is still left alone.
        let live: KnobValues = [(Knob::PurgeThreads, 7)].into();
        assert!(recovery_plan(&s, &live).restore.is_empty());
    }

    #[test]
    fn missing_file_is_none() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(
            StateStore::new(d.path().join("state.json")).load().unwrap(),
            None
        );
    }

    #[test]
    fn round_trip() {
        let d = tempfile::tempdir().unwrap();
        let store = StateStore::new(d.path().join("state.json"));
        let mut s = sample_state();
        store.save(&s).unwrap();
        assert_eq!(store.load().unwrap(), Some(s.clone()));

        // Knobs serialize as variable names, so a DBA can read the file.
        let text = fs::read_to_string(store.path()).unwrap();
        assert!(text.contains("\"innodb_purge_threads\": 2"), "{text}");

        s.record_set(Knob::IoCapacity, 20_000, 1_700_000_002_000);
        s.clean = true;
        store.save(&s).unwrap();
        assert_eq!(store.load().unwrap(), Some(s.clone()));

        // What the policies measured, flat beside its time.
        s.learned = Some(Remembered {
            learned: Learned {
                device_limit_pages_s: Some(495.5),
            },
            unix_ms: 1_700_000_003_000,
        });
        store.save(&s).unwrap();
        let text = fs::read_to_string(store.path()).unwrap();
        assert!(
            text.contains("\"device_limit_pages_s\": 495.5")
                && text.contains("\"unix_ms\": 1700000003000"),
            "{text}"
        );
        assert_eq!(store.load().unwrap(), Some(s));
    }

    /// A file written before `learned` existed reads as one with nothing learned.
    #[test]
    fn a_file_without_learned_reads() {
        let d = tempfile::tempdir().unwrap();
        let store = StateStore::new(d.path().join("state.json"));
        let s = sample_state();
        store.save(&s).unwrap();
        let text = fs::read_to_string(store.path()).unwrap();
        assert!(!text.contains("learned"), "{text}");
        assert_eq!(store.load().unwrap().unwrap().learned, None);
    }

    #[test]
    fn save_leaves_no_temp_files() {
        let d = tempfile::tempdir().unwrap();
        let store = StateStore::new(d.path().join("state.json"));
        let mut s = sample_state();
        for i in 0..20 {
            s.record_set(Knob::IoCapacity, 200 + i, 1_700_000_000_000 + i);
            store.save(&s).unwrap();
        }
        store.check_writable().unwrap();
        assert_eq!(dir_entries(d.path()), vec!["state.json".to_string()]);
    }

    #[test]
    fn bare_file_name_means_current_dir() {
        // A bare file name has an empty parent; it must mean ".", not "".
        assert_eq!(StateStore::new("state.json").dir(), PathBuf::from("."));
    }

    #[test]
    fn tampered_values_are_refused_not_clamped() {
        use Knob::*;
        let cfg = Config::default();
        let good = state(&[(PurgeThreads, 4)], &[(PurgeThreads, 2)]);
        assert!(refused_values(&good, &cfg).is_empty());
        let cases = [
            // Beyond any server's range: the server would clamp it into something else.
            (IoCapacity, u64::MAX, "range any server accepts"),
            // Within the server's range, beyond the configured bounds (100 ms).
            (MaxPurgeLagDelay, 10_000_000, "configured bounds"),
            // Not managed by default: a redo resize on MySQL.
            (RedoLogCapacity, 1 << 30, "manage = false"),
            // Managed, beyond the configured bounds (4 GiB).
            (LogFileSize, 8 << 30, "configured bounds"),
        ];
        for (knob, base, why) in cases {
            let s = state(&[(knob, base)], &[(knob, hard_range(knob).0.max(200))]);
            let r = refused_values(&s, &cfg);
            assert_eq!(r.len(), 1, "{knob}: {r:?}");
            assert_eq!((r[0].knob, r[0].value), (knob, base));
            assert!(r[0].to_string().contains(why), "{}", r[0]);
        }
        // A knob innopilot never set is not its business, whatever its baseline.
        let s = state(
            &[(IoCapacity, u64::MAX), (PurgeThreads, 4)],
            &[(PurgeThreads, 2)],
        );
        assert!(refused_values(&s, &cfg).is_empty());
    }

    #[cfg(unix)]
    #[test]
    fn state_others_can_write_is_refused_but_may_be_shown() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let store = StateStore::new(d.path().join("state.json"));
        store.save(&sample_state()).unwrap();
        fs::set_permissions(store.path(), fs::Permissions::from_mode(0o666)).unwrap();
        let e = store.load().unwrap_err();
        assert!(matches!(e, StateError::Unsafe { .. }), "{e:?}");
        assert!(e.to_string().contains("chmod go-w"), "{e}");
        // Shown (status) but never acted on.
        assert_eq!(store.peek(), Some(sample_state()));
        fs::set_permissions(store.path(), fs::Permissions::from_mode(0o600)).unwrap();
        fs::set_permissions(d.path(), fs::Permissions::from_mode(0o777)).unwrap();
        assert!(matches!(store.load(), Err(StateError::Unsafe { .. })));
        assert!(matches!(
            store.check_writable(),
            Err(StateError::Unsafe { .. })
        ));
        fs::set_permissions(d.path(), fs::Permissions::from_mode(0o700)).unwrap();
        assert!(store.load().unwrap().is_some());
    }

    #[cfg(unix)]
    #[test]
    fn planted_links_are_not_followed() {
        let d = tempfile::tempdir().unwrap();
        let victim = d.path().join("victim");
        fs::write(&victim, "precious").unwrap();
        let path = d.path().join("state.json");
        std::os::unix::fs::symlink(&victim, &path).unwrap();
        std::os::unix::fs::symlink(&victim, lock_path(&path)).unwrap();
        let store = StateStore::new(&path);
        assert!(store.load().is_err());
        assert!(store.lock().is_err());
        // save replaces the link itself (rename), never writes through it.
        store.save(&sample_state()).unwrap();
        assert_eq!(fs::read_to_string(&victim).unwrap(), "precious");
        assert!(!fs::symlink_metadata(&path)
            .unwrap()
            .file_type()
            .is_symlink());
    }

    #[test]
    fn one_lock_holder_at_a_time() {
        let d = tempfile::tempdir().unwrap();
        let store = StateStore::new(d.path().join("state.json"));
        assert_eq!(store.lock_state(), LockState::Free);
        let held = store.lock().unwrap();
        // flock locks belong to the open file, so a second open in this process
        // conflicts just as another process would.
        let e = store.lock().unwrap_err();
        let pid = std::process::id().to_string();
        assert!(
            matches!(&e, StateError::Locked { pid: p, .. } if *p == pid),
            "{e:?}"
        );
        assert!(e.to_string().contains(&pid), "{e}");
        assert_eq!(store.lock_state(), LockState::Held(pid));
        drop(held);
        assert_eq!(store.lock_state(), LockState::Free);
        let _again = store.lock().unwrap();
    }

    /// A lock file this process cannot open says "cannot tell", not "free": a status
    /// run by another user must not report a live run as stopped.
    #[cfg(unix)]
    #[test]
    fn an_unreadable_lock_is_unknown_not_free() {
        let d = tempfile::tempdir().unwrap();
        let store = StateStore::new(d.path().join("state.json"));
        std::os::unix::fs::symlink(d.path().join("elsewhere"), lock_path(store.path())).unwrap();
        match store.lock_state() {
            LockState::Unknown(why) => assert!(why.contains("state.json.lock"), "{why}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn corrupt_file_names_path_and_fix() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("state.json");
        let store = StateStore::new(&path);
        for bad in ["{\"version\": 1, \"clean\": tru", "", "[]"] {
            fs::write(&path, bad).unwrap();
            let e = store.load().unwrap_err();
            assert!(matches!(e, StateError::Corrupt { .. }), "{e:?}");
            let msg = e.to_string();
            assert!(msg.contains(&path.display().to_string()), "{msg}");
            assert!(msg.contains("remove it"), "{msg}");
        }

        let mut s = sample_state();
        s.version = 2;
        fs::write(&path, serde_json::to_string(&s).unwrap()).unwrap();
        let msg = store.load().unwrap_err().to_string();
        assert!(msg.contains("version 2"), "{msg}");

        let mut s = sample_state();
        s.last_set.insert(Knob::PurgeBatchSize, 100);
        fs::write(&path, serde_json::to_string(&s).unwrap()).unwrap();
        let msg = store.load().unwrap_err().to_string();
        assert!(msg.contains("innodb_purge_batch_size"), "{msg}");
        // ... and save refuses to write such a state in the first place.
        assert!(store.save(&s).is_err());

        // A learned rate no device flushes: not innopilot's writing.
        for bad in ["-1.0", "0.0", "1e12"] {
            let text = serde_json::to_string(&sample_state())
                .unwrap()
                .replacen(
                    "\"updated_unix_ms\"",
                    &format!("\"learned\":{{\"device_limit_pages_s\":{bad},\"unix_ms\":1}},\"updated_unix_ms\""),
                    1,
                );
            fs::write(&path, text).unwrap();
            let msg = store.load().unwrap_err().to_string();
            assert!(
                msg.contains("device_limit_pages_s") && msg.contains("remove it"),
                "{bad}: {msg}"
            );
        }
    }

    #[test]
    fn check_writable_creates_private_dir() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("var/lib/innopilot");
        let store = StateStore::new(dir.join("state.json"));
        store.check_writable().unwrap();
        assert!(dir.is_dir());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
            // The umask may only remove bits.
            assert_eq!(mode & !0o700, 0, "{mode:o}");
        }
        assert!(dir_entries(&dir).is_empty());
        assert_eq!(store.load().unwrap(), None);
    }

    fn assert_write_error(e: StateError, path: &Path) {
        let msg = e.to_string();
        assert!(matches!(e, StateError::Write { .. }), "{e:?}");
        assert!(msg.contains(&path.display().to_string()), "{msg}");
        assert!(msg.contains("control.state_file"), "{msg}");
    }

    #[test]
    fn unwritable_path_is_a_clear_error() {
        // A path under a regular file fails for everyone, root included.
        let f = tempfile::NamedTempFile::new().unwrap();
        let path = f.path().join("state.json");
        let store = StateStore::new(&path);
        assert_write_error(store.check_writable().unwrap_err(), &path);
        assert_write_error(store.save(&sample_state()).unwrap_err(), &path);

        // A read-only directory fails unless permission checks do not apply (root).
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let d = tempfile::tempdir().unwrap();
            let ro = d.path().join("ro");
            fs::create_dir(&ro).unwrap();
            fs::set_permissions(&ro, fs::Permissions::from_mode(0o500)).unwrap();
            let checks_apply = fs::write(ro.join("probe"), b"").is_err();
            let path = ro.join("state.json");
            let store = StateStore::new(&path);
            if checks_apply {
                assert_write_error(store.check_writable().unwrap_err(), &path);
                assert_write_error(store.save(&sample_state()).unwrap_err(), &path);
            }
            fs::set_permissions(&ro, fs::Permissions::from_mode(0o700)).unwrap();
        }
    }

    #[test]
    fn state_file_path_is_a_directory() {
        let d = tempfile::tempdir().unwrap();
        let store = StateStore::new(d.path());
        assert!(store.check_writable().is_err());
        let store = StateStore::new(d.path().join("sub"));
        fs::create_dir(d.path().join("sub")).unwrap();
        assert!(store.check_writable().is_err());
    }

    fn state(baseline: &[(Knob, u64)], last: &[(Knob, u64)]) -> StateFile {
        let mut s = StateFile::new(1, "test".into(), 0, baseline.iter().copied().collect());
        for &(k, v) in last {
            s.record_set(k, v, 1);
        }
        s
    }

    #[test]
    fn recovery_plan_cases() {
        use Knob::*;
        let s = state(
            &[
                (PurgeThreads, 4),
                (IoCapacity, 200),
                (MaxPurgeLag, 0),
                (MaxPurgeLagDelay, 0),
                (PurgeBatchSize, 300),
                (UndoLogTruncate, 0),
            ],
            &[
                (PurgeThreads, 2),     // still ours → restore
                (IoCapacity, 2000),    // operator set 5000 → leave
                (MaxPurgeLag, 100),    // already back at baseline
                (MaxPurgeLagDelay, 5), // not readable now → leave
                (UndoLogTruncate, 0),  // innopilot set the baseline itself
            ],
        );
        let live: KnobValues = [
            (PurgeThreads, 2),
            (IoCapacity, 5000),
            (MaxPurgeLag, 0),
            (PurgeBatchSize, 999), // never set by innopilot: not its business
            (UndoLogTruncate, 0),
        ]
        .into();
        let p = recovery_plan(&s, &live);
        assert_eq!(p.restore, vec![(PurgeThreads, 2, 4)]);
        assert_eq!(
            p.leave,
            vec![
                Leave {
                    knob: MaxPurgeLagDelay,
                    live: None,
                    last_set: 5,
                    baseline: Some(0),
                    reason: LeaveReason::NotReadable,
                },
                Leave {
                    knob: IoCapacity,
                    live: Some(5000),
                    last_set: 2000,
                    baseline: Some(200),
                    reason: LeaveReason::ChangedSince,
                },
            ]
        );
        assert_eq!(p.already_baseline, vec![MaxPurgeLag, UndoLogTruncate]);
        assert!(!p.is_empty());

        assert!(recovery_plan(&state(&[(PurgeThreads, 4)], &[]), &live).is_empty());
    }

    fn knob_map() -> impl Strategy<Value = KnobValues> {
        // Few distinct values so that equal live / last / baseline values are common.
        proptest::collection::btree_map(
            proptest::sample::select(Knob::ALL.to_vec()),
            0u64..3,
            0..10,
        )
    }

    proptest! {
        #[test]
        fn never_restores_what_someone_else_changed(
            baseline in knob_map(),
            last in knob_map(),
            live in knob_map(),
        ) {
            let mut s = StateFile::new(1, "p".into(), 0, baseline);
            s.last_set = last;
            let p = recovery_plan(&s, &live);
            for &(k, from, to) in &p.restore {
                prop_assert_eq!(live.get(&k), Some(&from));
                prop_assert_eq!(s.last_set.get(&k), Some(&from));
                prop_assert_eq!(s.baseline.get(&k), Some(&to));
                prop_assert_ne!(from, to);
            }
            // Every knob innopilot set is accounted for exactly once.
            let mut seen: Vec<Knob> = p.restore.iter().map(|r| r.0).collect();
            seen.extend(p.leave.iter().map(|l| l.knob));
            seen.extend(p.already_baseline.iter().copied());
            seen.sort();
            prop_assert_eq!(seen, s.last_set.keys().copied().collect::<Vec<_>>());
        }
    }
}
