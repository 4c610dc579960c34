//! The audit log: one JSON object per line for every decision and lifecycle event, so
//! a DBA can answer "what did innopilot change, when and why" with `grep` and `jq`.
//!
//! This module owns the record schema ([`Record`], [`Event`]; documented field by field
//! in `docs/audit.md`) and the writer ([`AuditLog`]): append-only, flushed after every
//! record, with optional size-based rotation. Records are flat: the event's fields sit
//! next to `ts`, `unix_ms`, `mode` and `event`, so `jq 'select(.event=="decision")'`
//! needs no nesting.

use std::collections::{BTreeMap, VecDeque};
use std::ffi::OsString;
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::config::AuditConfig;
use crate::control::state::Leave;
use crate::policy::arbiter::Decision;
use crate::server::sample::unix_ms_now;
use crate::server::{Knob, KnobValues};
use crate::signals::Signals;

/// Whether innopilot was allowed to change the server when it wrote the record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    Live,
    /// Decisions are made and logged, nothing is SET.
    DryRun,
}

impl Mode {
    pub fn from_dry_run(dry_run: bool) -> Mode {
        if dry_run {
            Mode::DryRun
        } else {
            Mode::Live
        }
    }
}

/// What became of a decision, in one word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// SET sent and succeeded; `to` is in effect.
    Applied,
    /// Dry run: `to` is what would have been SET; nothing was sent.
    DryRun,
    /// As `Applied`, but the guard changed the proposal on the way (`to` ≠
    /// `proposed`: a bound or `max_step`; `guard_notes` says which).
    Clipped,
    /// The guard refused (dwell, rate limit, unmanaged knob, …); nothing was sent.
    Rejected,
    /// `to` is already in effect; nothing was sent.
    NoChange,
    /// The SET failed, or the state file could not be written before it (then
    /// nothing was sent).
    Failed,
}

impl Outcome {
    /// The word the audit log and metrics use.
    pub const fn as_str(self) -> &'static str {
        match self {
            Outcome::Applied => "applied",
            Outcome::DryRun => "dry_run",
            Outcome::Clipped => "clipped",
            Outcome::Rejected => "rejected",
            Outcome::NoChange => "no_change",
            Outcome::Failed => "failed",
        }
    }
}

/// Why innopilot restored a knob's baseline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RestoreTrigger {
    /// Normal shutdown (end of run, `--duration`, stdin closed, …).
    Exit,
    /// At start, undoing what a previous run that died left behind.
    CrashRecovery,
    /// The server stayed unreachable past `reconnect_budget` with `on_server_lost =
    /// "exit"`.
    GiveUp,
    /// SIGINT or SIGTERM.
    Signal,
}

/// One line of the audit log.
#[derive(Serialize, Debug, Clone)]
pub struct Record {
    /// RFC 3339 UTC with milliseconds, e.g. "2024-05-01T12:00:00.123Z" (from `unix_ms`).
    pub ts: String,
    /// Wall-clock milliseconds since the Unix epoch.
    pub unix_ms: u64,
    pub mode: Mode,
    #[serde(flatten)]
    pub event: Event,
}

impl Record {
    pub fn new(unix_ms: u64, mode: Mode, event: Event) -> Record {
        Record {
            ts: format_rfc3339_ms(unix_ms),
            unix_ms,
            mode,
            event,
        }
    }

    /// A record stamped with the current wall-clock time.
    pub fn now(mode: Mode, event: Event) -> Record {
        Record::new(unix_ms_now(), mode, event)
    }
}

/// What happened. Serialized with the variant name, snake_case, in the `event` key.
/// Knobs are variable names (`innodb_purge_threads`); values are the server's own
/// units (see [`Knob::unit`]).
#[derive(Serialize, Debug, Clone)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// innopilot connected and read the baseline.
    Start {
        /// Redacted connection target and product, e.g. "MariaDB 10.11.19 at
        /// root@127.0.0.1:3306".
        server: String,
        /// "MariaDB" or "MySQL".
        flavor: String,
        /// `@@version` as the server reported it, e.g. "10.11.19-MariaDB-0+deb12u1".
        version: String,
        innopilot_version: String,
        pid: u32,
        capabilities: serde_json::Value,
        baseline: KnobValues,
        config_path: Option<String>,
        /// What an earlier run on this server measured about the machine, taken up by
        /// the policies (the state file's `learned`).
        #[serde(skip_serializing_if = "Option::is_none")]
        recalled: Option<crate::control::state::Remembered>,
    },
    /// The arbiter's winning proposal for one knob, and what became of it.
    Decision {
        policy: String,
        knob: Knob,
        /// Value in effect before.
        from: u64,
        /// Value after the guard (what was, or in a dry run would have been, SET).
        to: u64,
        /// What the policy asked for.
        proposed: u64,
        /// A SET was sent and succeeded.
        applied: bool,
        /// Value read back after the SET.
        readback: Option<u64>,
        outcome: Outcome,
        /// The policy's reason, with the numbers behind it.
        reason: String,
        /// What the guard changed or refused, and why.
        guard_notes: Vec<String>,
        /// Proposals for the same knob that lost in the arbiter: "watermark: 2 (reason)".
        lost_to: Vec<String>,
        /// The rules that kept a policy from going further than its proposal
        /// ([`Proposal::held_by`]), as "policy: rule", winner's and losers' alike.
        ///
        /// [`Proposal::held_by`]: crate::policy::Proposal::held_by
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        held_by: Vec<String>,
        /// [`compact_signals`] of the tick.
        signals: serde_json::Value,
        /// A SET that ran on a session of its own (a redo resize) is audited when it
        /// ends: this is when it was sent (ms since 1970), so that `unix_ms` less this
        /// is how long the server took. Absent for every other SET.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sent_unix_ms: Option<u64>,
    },
    /// innopilot set a knob back to its baseline.
    Restore {
        trigger: RestoreTrigger,
        knob: Knob,
        from: u64,
        to: u64,
        ok: bool,
        readback: Option<u64>,
        error: Option<String>,
        /// At exit: a redo resize back to the baseline still running on the server
        /// when innopilot stopped waiting for it (`ok` false, no `error`): the id of
        /// its session. The server finishes it at the first checkpoint past the
        /// SET's LSN; the next start waits for it and checks the size.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        under_way: Option<u64>,
    },
    /// Crash recovery left a knob alone (see [`crate::control::state::recovery_plan`]).
    RecoverySkipped {
        knob: Knob,
        /// Value in effect now; null when the server did not report it.
        live: Option<u64>,
        last_set: u64,
        /// Null only when the state file had no baseline for the knob.
        baseline: Option<u64>,
        reason: String,
    },
    /// Someone else changed a knob innopilot manages: `seen` is in effect where
    /// innopilot expected `expected`. The knob is operator-owned from now on:
    /// innopilot does not touch it again in this run, not even at exit.
    OperatorOverride {
        knob: Knob,
        expected: u64,
        seen: u64,
    },
    /// An operator-owned knob was handed back (`innopilot release KNOB`): innopilot
    /// manages it again. `reason` says what that means for the knob (e.g. its current
    /// value becomes its baseline).
    Released {
        knob: Knob,
        reason: String,
    },
    ConnectionLost {
        error: String,
    },
    ConnectionRegained {
        /// The server's uptime went back: capabilities were re-read and policies reset.
        server_restarted: bool,
        /// How long the server was unreachable, in milliseconds.
        down_ms: u64,
    },
    Stop {
        reason: String,
        /// Every knob innopilot changed is back at its baseline (or was left to an
        /// operator who changed it).
        restored: bool,
        /// The knobs not yet back whose resize to the baseline the server is
        /// finishing on its own (their `restore` records have `under_way`).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        handed_over: Vec<Knob>,
        /// The knobs left at innopilot's value on purpose (their `kept` records say
        /// why): a grown redo log the exit did not shrink while users wrote.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        kept: Vec<Knob>,
    },
    /// At exit: a redo log innopilot grew is left at `value` instead of shrunk back
    /// to `baseline`, because the checkpoint age would not fit the baseline log
    /// quietly (`reason`). The state file keeps the baseline; the next live start
    /// carries the log on, `innopilot restore` or a server restart puts it back.
    Kept {
        trigger: RestoreTrigger,
        knob: Knob,
        value: u64,
        baseline: u64,
        reason: String,
    },
    Warning {
        message: String,
    },
    /// A read view holds history that purge cannot remove: innopilot adds no DML
    /// delay for it, and names the transaction presumed to hold it. The loop cannot
    /// see read views, so the holder is a hypothesis (`evidence` says why);
    /// `innopilot diagnose` confirms it before it gives a KILL.
    PurgeBlocked {
        trx_id: String,
        thread_id: Option<u64>,
        user: Option<String>,
        host: Option<String>,
        /// Seconds the transaction has been open.
        age_s: u64,
        /// History length, undo logs.
        history: u64,
        /// Of which newer than the view (cannot be purged while it is open), undo logs.
        blocked: u64,
        purgeable: u64,
        /// Why this transaction is taken for the holder.
        evidence: String,
    },
    /// The blocking read view ended (or no longer blocks): purge can progress.
    PurgeUnblocked {
        trx_id: String,
        history: u64,
    },
}

impl Event {
    /// The `event` key's value, as serialized; metrics count events by it.
    pub const fn name(&self) -> &'static str {
        match self {
            Event::Start { .. } => "start",
            Event::Decision { .. } => "decision",
            Event::Restore { .. } => "restore",
            Event::RecoverySkipped { .. } => "recovery_skipped",
            Event::OperatorOverride { .. } => "operator_override",
            Event::Released { .. } => "released",
            Event::ConnectionLost { .. } => "connection_lost",
            Event::ConnectionRegained { .. } => "connection_regained",
            Event::Stop { .. } => "stop",
            Event::Kept { .. } => "kept",
            Event::Warning { .. } => "warning",
            Event::PurgeBlocked { .. } => "purge_blocked",
            Event::PurgeUnblocked { .. } => "purge_unblocked",
        }
    }
}

impl Event {
    /// The record of a knob crash recovery leaves alone.
    pub fn recovery_skipped(l: &Leave) -> Event {
        Event::RecoverySkipped {
            knob: l.knob,
            live: l.live,
            last_set: l.last_set,
            baseline: l.baseline,
            reason: l.reason.to_string(),
        }
    }
}

/// The signals a decision was based on, compact enough for one line per decision.
/// Unknown signals are left out; fractions are ratios (0–1), as everywhere else.
pub fn compact_signals(s: &Signals) -> serde_json::Value {
    fn round(x: Option<f64>, scale: f64, decimals: i32) -> Option<serde_json::Value> {
        let x = x.filter(|x| x.is_finite())? * scale;
        let p = 10f64.powi(decimals);
        Some(serde_json::Value::from((x * p).round() / p))
    }
    let mut m = serde_json::Map::new();
    let mut put = |k: &str, v: Option<serde_json::Value>| {
        if let Some(v) = v {
            m.insert(k.to_string(), v);
        }
    };
    put("redo_fill_ratio", round(s.redo_fill, 1.0, 4));
    put(
        "redo_fill_trend_ratio_per_second",
        round(s.redo_fill_trend, 1.0, 5),
    );
    put("history_len", s.history_len.map(Into::into));
    put("history_rate", round(s.history_rate, 1.0, 1));
    // What of it purge has handled (the purge counters on): no debt.
    put("history_unfreed", s.unfreed_history.map(Into::into));
    put("purge_pace", round(s.purge_pace, 1.0, 3));
    put("dml_rate", round(s.dml_rate, 1.0, 1));
    // With the DML rate, the user threads behind it (Little's law): what the purge-rate
    // policy's cost cap is predicted from.
    put("threads_running", s.sample.threads_running.map(Into::into));
    put("lsn_rate", round(s.lsn_rate, 1.0, 0));
    put("dirty_ratio", round(s.dirty_fraction, 1.0, 4));
    put(
        "oldest_trx_age_s",
        s.sample.oldest_trx.as_ref().map(|t| t.age_s.into()),
    );
    serde_json::Value::Object(m)
}

/// A knob held by the same rules is recorded once in this long: rules that come and
/// go every few seconds are explained a few times an hour, not every tick, while a
/// rule new to the knob is recorded at once.
pub const HELD_RECALL_MS: u64 = 600_000;

/// The explanations kept per knob: more than the rules that can hold one knob, few
/// enough to bound the memory whatever the guard's notes say.
const HELD_RECALLED: usize = 16;

/// The rules that hold a knob where it is, as the audit log last recorded them, so
/// that a hold gets a `no_change` record when its rules are new, and not every tick.
///
/// Without it the log records changes only, and a rule that holds a knob — no purge
/// thread over the baseline while the page cleaner is evicting, a proposal held at a
/// configured bound — leaves no trace: the eighty-first real-server run held the purge
/// threads at the baseline for half an hour and no record said why.
#[derive(Debug, Default, Clone)]
pub struct Explained {
    /// knob → (the [`hold_rules`] of a record, when it was written, sample ms), oldest
    /// first.
    recent: BTreeMap<Knob, VecDeque<(Vec<String>, u64)>>,
}

impl Explained {
    /// Whether a knob held by `rules` ([`hold_rules`]) deserves a record at `t_ms`:
    /// some rule holds it, and no record of the knob in the last [`HELD_RECALL_MS`]
    /// named the same rules.
    pub fn wants(&self, knob: Knob, rules: &[String], t_ms: u64) -> bool {
        !rules.is_empty()
            && !self.recent.get(&knob).is_some_and(|r| {
                r.iter()
                    .any(|(seen, at)| *seen == rules && t_ms.saturating_sub(*at) < HELD_RECALL_MS)
            })
    }

    /// The audit named `rules` for `knob` at `t_ms`: in a change, a refusal or a hold.
    /// A hold that follows by the same rules adds nothing to it; a record that named
    /// none leaves nothing to remember.
    pub fn note(&mut self, knob: Knob, rules: Vec<String>, t_ms: u64) {
        if rules.is_empty() {
            return;
        }
        let r = self.recent.entry(knob).or_default();
        r.retain(|(seen, at)| *seen != rules && t_ms.saturating_sub(*at) < HELD_RECALL_MS);
        r.push_back((rules, t_ms));
        if r.len() > HELD_RECALLED {
            r.pop_front();
        }
    }
}

/// The rules that keep decision `d`'s knob from going further, sorted: each
/// proposal's [`Proposal::held_by`] as "policy: rule" (the winner's and the losers'),
/// then each of the guard's `notes` (a bound it was clipped to) with every number (a
/// sign, digits and decimal points) replaced by `#`, so that the same bound is one rule
/// whatever the proposal was.
///
/// [`Proposal::held_by`]: crate::policy::Proposal::held_by
pub fn hold_rules(d: &Decision, notes: &[String]) -> Vec<String> {
    let mut rules = held_by(d);
    rules.extend(notes.iter().map(|n| without_numbers(n)));
    rules
}

/// Each proposal's [`Proposal::held_by`] in decision `d`, as "policy: rule", sorted:
/// the record's `held_by`.
///
/// [`Proposal::held_by`]: crate::policy::Proposal::held_by
pub fn held_by(d: &Decision) -> Vec<String> {
    let mut rules: Vec<String> = std::iter::once(&d.winner)
        .chain(&d.losers)
        .filter_map(|p| p.held_by.map(|rule| format!("{}: {rule}", p.policy.name())))
        .collect();
    rules.sort();
    rules.dedup();
    rules
}

/// `text` with each number (a sign, digits and decimal points) replaced by `#`.
fn without_numbers(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_number = false;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        let signed = matches!(c, '-' | '+') && chars.peek().is_some_and(char::is_ascii_digit);
        let numeric = c.is_ascii_digit() || signed || (in_number && c == '.');
        if !numeric {
            out.push(c);
        } else if !in_number {
            out.push('#');
        }
        in_number = numeric;
    }
    out
}

/// "YYYY-MM-DDTHH:MM:SS.mmmZ" for milliseconds since the Unix epoch (UTC).
pub fn format_rfc3339_ms(unix_ms: u64) -> String {
    let days = (unix_ms / 86_400_000) as i64;
    let ms_of_day = unix_ms % 86_400_000;
    let (y, mo, d) = civil_from_days(days);
    let (h, mi, s, ms) = (
        ms_of_day / 3_600_000,
        ms_of_day / 60_000 % 60,
        ms_of_day / 1000 % 60,
        ms_of_day % 1000,
    );
    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{ms:03}Z")
}

/// Days since 1970-01-01 → (year, month, day) in the proleptic Gregorian calendar
/// (Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097); // day of era, 0..=146096
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // 0..=399
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // 0..=365, from March 1st
    let mp = (5 * doy + 2) / 153; // month from March, 0..=11
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// An audit log problem; every message names the destination.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error(
        "cannot open audit log {}: {message}. Make its directory writable by the user \
         innopilot runs as, or set audit.path (\"-\" for standard output)",
        path.display()
    )]
    Open { path: PathBuf, message: String },
    /// The record was not written.
    #[error("cannot write to audit log {}: {message}", path.display())]
    Write { path: PathBuf, message: String },
    /// The record *was* written, to the file that could not be rotated; it keeps
    /// growing past `audit.max_size` until a rotation succeeds. Reported once per
    /// failing spell, not on every record.
    #[error(
        "cannot rotate audit log {}: {message}; it keeps growing past audit.max_size \
         until rotation succeeds",
        path.display()
    )]
    Rotate { path: PathBuf, message: String },
}

impl AuditError {
    /// Whether the record that caused the error is missing from the log.
    pub fn record_lost(&self) -> bool {
        !matches!(self, AuditError::Rotate { .. })
    }
}

enum Sink {
    File(File),
    Stdout,
    Writer(Box<dyn Write + Send>),
    Discard,
}

/// Writes [`Record`]s as JSON Lines.
pub struct AuditLog {
    sink: Sink,
    /// The file, `-` for standard output; used in error messages.
    path: PathBuf,
    max_bytes: u64,
    keep: u32,
    /// Bytes in the current file, as far as innopilot knows.
    size: u64,
    written: u64,
    /// A rotation failed and has not succeeded since: further failures are not
    /// reported again.
    rotate_failing: bool,
}

impl fmt::Debug for AuditLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AuditLog")
            .field("path", &self.path)
            .field("max_bytes", &self.max_bytes)
            .field("keep", &self.keep)
            .field("size", &self.size)
            .field("written", &self.written)
            .finish()
    }
}

impl AuditLog {
    /// Opens the log for appending (creating the file with mode 0640, and its
    /// directory with mode 0750 if missing), or standard output for `-`.
    pub fn open(cfg: &AuditConfig) -> Result<AuditLog, AuditError> {
        let mut log = AuditLog {
            sink: Sink::Stdout,
            path: cfg.path.clone(),
            max_bytes: cfg.max_bytes,
            keep: cfg.keep,
            size: 0,
            written: 0,
            rotate_failing: false,
        };
        if !cfg.is_stdout() {
            let (file, size) = open_append(&cfg.path).map_err(|e| AuditError::Open {
                path: cfg.path.clone(),
                message: e.to_string(),
            })?;
            log.sink = Sink::File(file);
            log.size = size;
        }
        Ok(log)
    }

    /// A log that counts records and writes nothing (tests, or audit disabled).
    pub fn discard() -> AuditLog {
        AuditLog::with_sink(Sink::Discard, "(discarded)")
    }

    /// A log that writes to any writer, e.g. a buffer a test or the simulator reads
    /// back. Never rotates.
    pub fn to_writer(w: Box<dyn Write + Send>) -> AuditLog {
        AuditLog::with_sink(Sink::Writer(w), "(writer)")
    }

    fn with_sink(sink: Sink, label: &str) -> AuditLog {
        AuditLog {
            sink,
            path: PathBuf::from(label),
            max_bytes: 0,
            keep: 0,
            size: 0,
            written: 0,
            rotate_failing: false,
        }
    }

    /// Records written since the log was opened (rotation does not reset it).
    pub fn records_written(&self) -> u64 {
        self.written
    }

    /// Appends one record as one line and flushes it. When `max_bytes > 0` and the
    /// line would take the file past it, the file is rotated first.
    pub fn write(&mut self, rec: &Record) -> Result<(), AuditError> {
        let mut line = serde_json::to_vec(rec).map_err(|e| AuditError::Write {
            path: self.path.clone(),
            message: e.to_string(),
        })?;
        line.push(b'\n');
        let len = line.len() as u64;

        let mut rotate_error = None;
        if self.needs_rotation(len) {
            match self.rotate() {
                Ok(()) => self.rotate_failing = false,
                Err(e) => {
                    if !self.rotate_failing {
                        rotate_error = Some(AuditError::Rotate {
                            path: self.path.clone(),
                            message: e.to_string(),
                        });
                    }
                    self.rotate_failing = true;
                }
            }
        }

        self.follow_path();
        // The whole line in one write call (O_APPEND), so a crash cuts at most the
        // last line and never leaves half a record in the middle of the file.
        let result = match &mut self.sink {
            Sink::File(f) => write_whole(f, &line),
            Sink::Stdout => {
                let mut out = io::stdout().lock();
                out.write_all(&line).and_then(|()| out.flush())
            }
            Sink::Writer(w) => w.write_all(&line).and_then(|()| w.flush()),
            Sink::Discard => Ok(()),
        };
        result.map_err(|e| AuditError::Write {
            path: self.path.clone(),
            message: e.to_string(),
        })?;
        self.size += len;
        self.written += 1;
        rotate_error.map_or(Ok(()), Err)
    }

    /// Makes sure the next records up to `bytes` can be written: follows the path (a
    /// deleted or replaced file is reopened) and reserves the space on disk. Live mode
    /// calls it before each SET: a change that could not be audited is not made.
    /// Sinks other than a file always have room.
    pub fn reserve(&mut self, bytes: u64) -> Result<(), AuditError> {
        self.follow_path();
        let Sink::File(f) = &self.sink else {
            return Ok(());
        };
        let err = |message: String| AuditError::Write {
            path: self.path.clone(),
            message,
        };
        let size = f.metadata().map_err(|e| err(e.to_string()))?.len();
        // KEEP_SIZE: the blocks are allocated past the end without changing the file's
        // length, and the next appends land in them.
        match rustix::fs::fallocate(f, rustix::fs::FallocateFlags::KEEP_SIZE, size, bytes) {
            Ok(()) => Ok(()),
            // A file system that cannot preallocate: nothing to reserve with.
            Err(e) if e == rustix::io::Errno::OPNOTSUPP || e == rustix::io::Errno::NOSYS => Ok(()),
            Err(e) => Err(err(format!("cannot reserve {bytes} bytes: {e}"))),
        }
    }

    /// Reopens the file when the path no longer leads to the file innopilot has open
    /// (deleted, or replaced by someone else): records written to a deleted inode
    /// reach nobody.
    fn follow_path(&mut self) {
        let Sink::File(f) = &self.sink else {
            return;
        };
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            let same = match (fs::metadata(&self.path), f.metadata()) {
                (Ok(p), Ok(o)) => p.dev() == o.dev() && p.ino() == o.ino(),
                _ => false,
            };
            if same {
                return;
            }
            tracing::warn!(
                "audit log {} was deleted or replaced; reopening it",
                self.path.display()
            );
            if let Ok((file, size)) = open_append(&self.path) {
                self.sink = Sink::File(file);
                self.size = size;
            }
        }
    }

    /// Reopens the file at the configured path, for when something outside innopilot
    /// has moved it away (e.g. on SIGHUP after an external rotation).
    pub fn reopen(&mut self) -> Result<(), AuditError> {
        if let Sink::File(_) = self.sink {
            let (file, size) = open_append(&self.path).map_err(|e| AuditError::Open {
                path: self.path.clone(),
                message: e.to_string(),
            })?;
            self.sink = Sink::File(file);
            self.size = size;
        }
        Ok(())
    }

    fn needs_rotation(&mut self, len: u64) -> bool {
        let Sink::File(f) = &self.sink else {
            return false;
        };
        // A record larger than max_bytes goes alone into a fresh file rather than
        // rotating on every write.
        if self.max_bytes == 0 || self.size == 0 || self.size + len <= self.max_bytes {
            return false;
        }
        // The tracked size is stale if something truncated the file (logrotate
        // copytruncate); ask the file system before rotating.
        if let Ok(m) = f.metadata() {
            self.size = m.len();
        }
        self.size > 0 && self.size + len > self.max_bytes
    }

    /// path.(keep-1) → path.keep, …, path.1 → path.2, path → path.1, then a new path.
    /// Renames replace the target, so the oldest file drops out without a delete.
    /// Until the new file is open the old handle stays in use, so a failure at any
    /// step loses no record.
    fn rotate(&mut self) -> io::Result<()> {
        // If the file is gone (moved or deleted by someone else), shifting the
        // numbered files again would push out history for nothing: just reopen.
        if fs::symlink_metadata(&self.path).is_ok() {
            let keep = self.keep.max(1);
            for i in (1..keep).rev() {
                let from = numbered(&self.path, i);
                if fs::symlink_metadata(&from).is_ok() {
                    fs::rename(&from, numbered(&self.path, i + 1))?;
                }
            }
            fs::rename(&self.path, numbered(&self.path, 1))?;
        }
        let (file, size) = open_append(&self.path)?;
        self.sink = Sink::File(file);
        self.size = size;
        Ok(())
    }
}

/// Appends `line` with one write call, or nothing: a short write (a full disk) is cut
/// back to the previous length, so the file never holds half a record for the next one
/// to be glued to.
fn write_whole(f: &mut File, line: &[u8]) -> io::Result<()> {
    let before = f.metadata()?.len();
    let n = match f.write(line) {
        Ok(n) => n,
        Err(e) => {
            let _ = f.set_len(before);
            return Err(e);
        }
    };
    if n < line.len() {
        let _ = f.set_len(before);
        return Err(io::Error::new(
            io::ErrorKind::StorageFull,
            format!(
                "only {n} of {} bytes written; the record was taken back",
                line.len()
            ),
        ));
    }
    Ok(())
}

fn numbered(path: &Path, i: u32) -> PathBuf {
    let mut s = OsString::from(path.as_os_str());
    s.push(format!(".{i}"));
    PathBuf::from(s)
}

fn open_append(path: &Path) -> io::Result<(File, u64)> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if !dir.exists() {
            let mut b = fs::DirBuilder::new();
            b.recursive(true);
            #[cfg(unix)]
            {
                use std::os::unix::fs::DirBuilderExt;
                b.mode(0o750);
            }
            b.create(dir)?;
        }
    }
    let mut opts = OpenOptions::new();
    opts.append(true).create(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o640);
    }
    let f = opts.open(path)?;
    let size = f.metadata()?.len();
    Ok((f, size))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_names_match_their_serialized_tag() {
        let events = [
            Event::Warning {
                message: "m".into(),
            },
            Event::ConnectionLost { error: "e".into() },
            Event::ConnectionRegained {
                server_restarted: false,
                down_ms: 1,
            },
        ];
        for e in events {
            let v = serde_json::to_value(&e).unwrap();
            assert_eq!(v["event"], e.name());
        }
    }
    use std::sync::{Arc, Mutex};

    use proptest::prelude::*;

    use crate::control::state::LeaveReason;
    use crate::server::sample::TrxInfo;

    fn cfg(path: &Path, max_bytes: u64, keep: u32) -> AuditConfig {
        AuditConfig {
            path: path.to_path_buf(),
            max_bytes,
            keep,
        }
    }

    fn warning(i: usize) -> Record {
        Record::new(
            1_700_000_000_000 + i as u64,
            Mode::Live,
            Event::Warning {
                message: format!("record {i}"),
            },
        )
    }

    /// One example of every event.
    fn every_event() -> Vec<Event> {
        let baseline: KnobValues = [(Knob::PurgeThreads, 4), (Knob::IoCapacity, 200)].into();
        vec![
            Event::Start {
                server: "MariaDB 10.11.19 at root@127.0.0.1:3306".into(),
                flavor: "MariaDB".into(),
                version: "10.11.19-MariaDB-0+deb12u1".into(),
                innopilot_version: "0.1.0".into(),
                pid: 4242,
                capabilities: serde_json::json!({"purge_threads": "dynamic"}),
                baseline,
                config_path: Some("/etc/innopilot.toml".into()),
                recalled: Some(crate::control::state::Remembered {
                    learned: crate::policy::Learned {
                        device_limit_pages_s: Some(495.0),
                    },
                    unix_ms: 1_714_560_000_000,
                }),
            },
            Event::Decision {
                policy: "watermark".into(),
                knob: Knob::PurgeThreads,
                from: 4,
                to: 3,
                proposed: 2,
                applied: true,
                readback: Some(3),
                outcome: Outcome::Clipped,
                reason: "redo fill 63 % entered bucket 2 of 4".into(),
                guard_notes: vec!["max_step 1: 2 → 3".into()],
                lost_to: vec!["purge_rate: 6 (history growing 1200/s)".into()],
                held_by: vec![],
                signals: serde_json::json!({"redo_fill_ratio": 0.63}),
                sent_unix_ms: None,
            },
            Event::Restore {
                trigger: RestoreTrigger::CrashRecovery,
                knob: Knob::PurgeThreads,
                from: 2,
                to: 4,
                ok: true,
                readback: Some(4),
                error: None,
                under_way: None,
            },
            Event::recovery_skipped(&Leave {
                knob: Knob::IoCapacity,
                live: Some(5000),
                last_set: 2000,
                baseline: Some(200),
                reason: LeaveReason::ChangedSince,
            }),
            Event::OperatorOverride {
                knob: Knob::IoCapacity,
                expected: 2000,
                seen: 5000,
            },
            Event::Released {
                knob: Knob::IoCapacity,
                reason: "handed back by `innopilot release`; its current value is now its baseline"
                    .into(),
            },
            Event::ConnectionLost {
                error: "connection reset".into(),
            },
            Event::ConnectionRegained {
                server_restarted: true,
                down_ms: 12_000,
            },
            Event::Kept {
                trigger: RestoreTrigger::Signal,
                knob: Knob::LogFileSize,
                value: 1 << 30,
                baseline: 128 << 20,
                reason: "busy".into(),
            },
            Event::Stop {
                reason: "signal".into(),
                restored: false,
                handed_over: vec![],
                kept: vec![Knob::LogFileSize],
            },
            Event::Warning {
                message: "hello".into(),
            },
        ]
    }

    fn keys(v: &serde_json::Value) -> Vec<&str> {
        let mut k: Vec<&str> = v.as_object().unwrap().keys().map(|s| s.as_str()).collect();
        k.sort();
        k
    }

    #[test]
    fn record_shape_is_flat() {
        let expected: &[(&str, &[&str])] = &[
            (
                "start",
                &[
                    "baseline",
                    "capabilities",
                    "config_path",
                    "flavor",
                    "innopilot_version",
                    "pid",
                    "recalled",
                    "server",
                    "version",
                ],
            ),
            (
                "decision",
                &[
                    "applied",
                    "from",
                    "guard_notes",
                    "knob",
                    "lost_to",
                    "outcome",
                    "policy",
                    "proposed",
                    "readback",
                    "reason",
                    "signals",
                    "to",
                ],
            ),
            (
                "restore",
                &["error", "from", "knob", "ok", "readback", "to", "trigger"],
            ),
            (
                "recovery_skipped",
                &["baseline", "knob", "last_set", "live", "reason"],
            ),
            ("operator_override", &["expected", "knob", "seen"]),
            ("released", &["knob", "reason"]),
            ("connection_lost", &["error"]),
            ("connection_regained", &["down_ms", "server_restarted"]),
            ("kept", &["baseline", "knob", "reason", "trigger", "value"]),
            ("stop", &["kept", "reason", "restored"]),
            ("warning", &["message"]),
        ];
        let events = every_event();
        assert_eq!(events.len(), expected.len());
        for (ev, (name, fields)) in events.into_iter().zip(expected) {
            let line =
                serde_json::to_string(&Record::new(1_714_564_800_123, Mode::DryRun, ev)).unwrap();
            assert!(!line.contains('\n'));
            let v: serde_json::Value = serde_json::from_str(&line).unwrap();
            assert_eq!(v["event"], *name, "{line}");
            assert_eq!(v["ts"], "2024-05-01T12:00:00.123Z", "{line}");
            assert_eq!(v["unix_ms"], 1_714_564_800_123u64, "{line}");
            assert_eq!(v["mode"], "dry_run", "{line}");
            let mut want: Vec<&str> = fields.to_vec();
            want.extend(["event", "mode", "ts", "unix_ms"]);
            want.sort();
            assert_eq!(keys(&v), want, "{line}");
            // The common keys come first, so lines read well unparsed too.
            assert!(line.starts_with("{\"ts\":\"2024-"), "{line}");
        }
    }

    /// A decision for purge threads at the baseline: the watermark wins, purge_rate
    /// loses with the same value, held back by `rule`.
    fn held(rule: Option<&'static str>) -> Decision {
        let p = |name, held_by| crate::policy::Proposal {
            policy: crate::policy::PolicyId::unranked(name),
            knob: Knob::PurgeThreads,
            value: 4,
            intent: crate::policy::Intent::Release,
            reason: format!("{name}: redo fill 63.2 % and history 12345"),
            held_by,
        };
        Decision {
            winner: p("watermark", None),
            losers: vec![p("purge_rate", rule)],
        }
    }

    #[test]
    fn a_hold_is_recorded_when_its_rule_is_new_and_not_again_for_ten_minutes() {
        let k = Knob::PurgeThreads;
        let evicting = held(Some("page_cleaner_evicting"));
        assert_eq!(held_by(&evicting), ["purge_rate: page_cleaner_evicting"]);
        let mut e = Explained::default();
        // Nothing holds the knob: no record, however often.
        assert!(!e.wants(k, &hold_rules(&held(None), &[]), 0));
        assert!(held_by(&held(None)).is_empty());
        // A rule new to the knob: recorded at once, by the loser's name.
        assert!(e.wants(k, &hold_rules(&evicting, &[]), 1_000));
        e.note(k, hold_rules(&evicting, &[]), 1_000);
        assert!(!e.wants(k, &hold_rules(&evicting, &[]), 2_000));
        // Another rule: at once, even a second later; then the two alternate without a
        // record until the first is ten minutes old.
        let redo = held(Some("threads_max_redo_fill_pct"));
        assert!(e.wants(k, &hold_rules(&redo, &[]), 2_000));
        e.note(k, hold_rules(&redo, &[]), 2_000);
        assert!(!e.wants(k, &hold_rules(&evicting, &[]), 600_999));
        assert!(e.wants(k, &hold_rules(&evicting, &[]), 601_000));
        // Another knob is another story.
        assert!(e.wants(Knob::IoCapacity, &hold_rules(&evicting, &[]), 2_000));
        // A change that says the rule explains the hold that follows it.
        let mut e = Explained::default();
        e.note(k, hold_rules(&evicting, &[]), 5_000);
        assert!(!e.wants(k, &hold_rules(&evicting, &[]), 6_000));
    }

    #[test]
    fn a_hold_at_a_bound_is_one_rule_whatever_the_numbers() {
        let k = Knob::IoCapacityMax;
        let note = |n: i64| {
            vec![format!("clipped: proposed {n} is above the upper bound 4000.5 (knobs.innodb_io_capacity_max.max)")]
        };
        let mut e = Explained::default();
        assert!(e.wants(k, &hold_rules(&held(None), &note(9000)), 0));
        e.note(k, hold_rules(&held(None), &note(9000)), 0);
        assert!(!e.wants(k, &hold_rules(&held(None), &note(-12)), 1_000));
        assert_eq!(
            hold_rules(&held(None), &note(7)),
            ["clipped: proposed # is above the upper bound # (knobs.innodb_io_capacity_max.max)"]
        );
    }

    #[test]
    fn held_by_is_in_the_record_only_when_a_rule_held() {
        let mut ev = every_event()[1].clone();
        let Event::Decision { held_by, .. } = &mut ev else {
            panic!("the second event is a decision");
        };
        *held_by = vec!["purge_rate: page_cleaner_evicting".into()];
        let v = serde_json::to_value(Record::new(0, Mode::Live, ev)).unwrap();
        assert_eq!(v["held_by"][0], "purge_rate: page_cleaner_evicting");
        let v = serde_json::to_value(Record::new(0, Mode::Live, every_event()[1].clone())).unwrap();
        assert!(v.get("held_by").is_none(), "{v}");
    }

    proptest! {
        /// However rules come and go, a knob gets at most one record per set of rules
        /// in any ten minutes, and the memory stays bounded.
        #[test]
        fn holds_are_recorded_at_most_once_per_rules_and_window(
            ticks in proptest::collection::vec((0usize..4, 0u64..5_000), 1..400),
        ) {
            const RULES: [Option<&str>; 4] =
                [None, Some("a"), Some("b"), Some("c")];
            let k = Knob::PurgeThreads;
            let mut e = Explained::default();
            let mut t = 0;
            let mut recorded: Vec<(usize, u64)> = Vec::new();
            for (r, dt) in ticks {
                t += dt;
                let d = held(RULES[r]);
                if e.wants(k, &hold_rules(&d, &[]), t) {
                    prop_assert!(RULES[r].is_some());
                    prop_assert!(!recorded.iter().any(|(q, at)| *q == r && t - at < HELD_RECALL_MS));
                    recorded.push((r, t));
                    e.note(k, hold_rules(&d, &[]), t);
                } else if let Some(rule) = RULES[r] {
                    // Not recorded: the same rule was, within the window.
                    prop_assert!(recorded.iter().any(|(q, at)| *q == r && t - at < HELD_RECALL_MS), "{rule} at {t}");
                }
                prop_assert!(e.recent.get(&k).map_or(0, |r| r.len()) <= HELD_RECALLED);
            }
        }
    }

    #[test]
    fn values_are_typed() {
        let ev = every_event();
        let v = serde_json::to_value(Record::new(0, Mode::Live, ev[1].clone())).unwrap();
        assert_eq!(v["knob"], "innodb_purge_threads");
        assert_eq!(v["outcome"], "clipped");
        assert_eq!(v["from"], 4);
        assert_eq!(v["readback"], 3);
        let v = serde_json::to_value(Record::new(0, Mode::Live, ev[0].clone())).unwrap();
        assert_eq!(v["baseline"]["innodb_io_capacity"], 200);
        let v = serde_json::to_value(Record::new(0, Mode::Live, ev[2].clone())).unwrap();
        assert_eq!(v["trigger"], "crash_recovery");
        assert_eq!(v["error"], serde_json::Value::Null);
        let v = serde_json::to_value(Record::new(0, Mode::Live, ev[3].clone())).unwrap();
        assert!(v["reason"].as_str().unwrap().contains("someone else"));
    }

    #[test]
    fn compact_signals_rounds_and_omits_unknowns() {
        let mut s = Signals {
            redo_fill: Some(0.63456),
            history_len: Some(12_345),
            history_rate: Some(-3.26),
            dml_rate: Some(f64::NAN),
            lsn_rate: Some(1_048_576.4),
            ..Signals::default()
        };
        s.sample.threads_running = Some(17);
        s.sample.oldest_trx = Some(TrxInfo {
            trx_id: "1".into(),
            age_s: 61,
            holds_read_view: true,
            ..TrxInfo::default()
        });
        let v = compact_signals(&s);
        assert_eq!(
            v,
            serde_json::json!({
                "redo_fill_ratio": 0.6346,
                "history_len": 12345,
                "history_rate": -3.3,
                "lsn_rate": 1048576.0,
                "threads_running": 17,
                "oldest_trx_age_s": 61,
            })
        );
        assert_eq!(compact_signals(&Signals::default()), serde_json::json!({}));
    }

    #[test]
    fn timestamps() {
        assert_eq!(format_rfc3339_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            format_rfc3339_ms(951_782_400_000),
            "2000-02-29T00:00:00.000Z"
        );
        assert_eq!(
            format_rfc3339_ms(1_700_000_000_123),
            "2023-11-14T22:13:20.123Z"
        );
        assert_eq!(
            format_rfc3339_ms(4_107_542_399_999),
            "2100-02-28T23:59:59.999Z"
        );
        // Absurd clocks give absurd years, not panics.
        let _ = format_rfc3339_ms(u64::MAX);
    }

    proptest! {
        #[test]
        fn timestamps_match_humantime(ms in 0u64..253_402_300_800_000) {
            let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms);
            prop_assert_eq!(
                format_rfc3339_ms(ms),
                humantime::format_rfc3339_millis(t).to_string()
            );
        }
    }

    fn lines(path: &Path) -> Vec<String> {
        match fs::read_to_string(path) {
            Ok(t) => t.lines().map(str::to_string).collect(),
            Err(_) => Vec::new(),
        }
    }

    fn message(line: &str) -> usize {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        v["message"].as_str().unwrap()[7..].parse().unwrap()
    }

    #[test]
    fn appends_and_counts() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("sub/audit.jsonl");
        let mut log = AuditLog::open(&cfg(&path, 0, 5)).unwrap();
        for i in 0..3 {
            log.write(&warning(i)).unwrap();
        }
        drop(log);
        let mut log = AuditLog::open(&cfg(&path, 0, 5)).unwrap();
        log.write(&warning(3)).unwrap();
        assert_eq!(log.records_written(), 1);
        let got: Vec<usize> = lines(&path).iter().map(|l| message(l)).collect();
        assert_eq!(got, vec![0, 1, 2, 3]);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode & !0o640, 0, "{mode:o}");
        }
    }

    /// Reads path.keep … path.1, path in order.
    fn all_records(path: &Path, keep: u32) -> Vec<usize> {
        let mut out = Vec::new();
        for i in (1..=keep).rev() {
            out.extend(lines(&numbered(path, i)).iter().map(|l| message(l)));
        }
        out.extend(lines(path).iter().map(|l| message(l)));
        out
    }

    #[test]
    fn rotation_keeps_n_files_and_loses_nothing() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("audit.jsonl");
        let line_len = serde_json::to_vec(&warning(100)).unwrap().len() as u64 + 1;
        let max = line_len * 10;
        let mut log = AuditLog::open(&cfg(&path, max, 3)).unwrap();
        // Three-digit numbers only, so every line has the same length.
        let n = 900;
        for i in 100..100 + n {
            log.write(&warning(i)).unwrap();
        }
        assert_eq!(log.records_written(), n as u64);
        for p in [
            path.clone(),
            numbered(&path, 1),
            numbered(&path, 2),
            numbered(&path, 3),
        ] {
            let len = fs::metadata(&p).unwrap().len();
            assert!(len <= max, "{} is {len} bytes", p.display());
        }
        assert!(!numbered(&path, 4).exists());
        // What is kept is the newest records, in order, without a gap.
        let got = all_records(&path, 3);
        assert!(got.len() > 30, "{}", got.len());
        let first = got[0];
        assert_eq!(got, (first..100 + n).collect::<Vec<_>>());
        drop(log);

        // With room for everything, everything is there.
        let path = d.path().join("all.jsonl");
        let mut log = AuditLog::open(&cfg(&path, max, 100)).unwrap();
        for i in 100..400 {
            log.write(&warning(i)).unwrap();
        }
        assert_eq!(all_records(&path, 100), (100..400).collect::<Vec<_>>());
    }

    #[test]
    fn oversized_record_goes_alone() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("audit.jsonl");
        let mut log = AuditLog::open(&cfg(&path, 10, 2)).unwrap();
        for i in 100..105 {
            log.write(&warning(i)).unwrap();
        }
        assert_eq!(lines(&path).len(), 1);
        assert_eq!(all_records(&path, 2), vec![102, 103, 104]);
    }

    #[test]
    fn deleted_or_replaced_file_is_reopened() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("audit.jsonl");
        let mut log = AuditLog::open(&cfg(&path, 0, 1)).unwrap();
        log.write(&warning(100)).unwrap();
        // Deleted: the next record goes to a new file at the path, not the lost inode.
        fs::remove_file(&path).unwrap();
        log.reserve(4096).unwrap();
        log.write(&warning(101)).unwrap();
        assert_eq!(all_records(&path, 0), vec![101]);
        // Replaced by another file (renamed over it): followed too.
        let other = d.path().join("other");
        fs::write(&other, "").unwrap();
        fs::rename(&other, &path).unwrap();
        log.write(&warning(102)).unwrap();
        assert_eq!(all_records(&path, 0), vec![102]);
        // Room reserved for the next records does not change the file's length.
        let len = fs::metadata(&path).unwrap().len();
        log.reserve(1 << 20).unwrap();
        assert_eq!(fs::metadata(&path).unwrap().len(), len);
    }

    #[test]
    fn external_truncation_is_noticed() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("audit.jsonl");
        let line_len = serde_json::to_vec(&warning(100)).unwrap().len() as u64 + 1;
        let mut log = AuditLog::open(&cfg(&path, line_len * 3, 2)).unwrap();
        for i in 100..102 {
            log.write(&warning(i)).unwrap();
        }
        // logrotate copytruncate: the file is emptied under innopilot's feet.
        OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(0)
            .unwrap();
        for i in 102..105 {
            log.write(&warning(i)).unwrap();
        }
        assert!(!numbered(&path, 1).exists());
        assert_eq!(all_records(&path, 2), vec![102, 103, 104]);
    }

    #[test]
    fn failed_rotation_keeps_the_record_and_reports_once() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("audit.jsonl");
        // A non-empty directory where path.1 should go: the rename fails, even as root.
        fs::create_dir_all(numbered(&path, 1).join("x")).unwrap();
        let mut log = AuditLog::open(&cfg(&path, 10, 1)).unwrap();
        log.write(&warning(100)).unwrap();
        let e = log.write(&warning(101)).unwrap_err();
        assert!(!e.record_lost());
        let msg = e.to_string();
        assert!(
            msg.contains("rotate") && msg.contains(&path.display().to_string()),
            "{msg}"
        );
        log.write(&warning(102)).unwrap();
        assert_eq!(log.records_written(), 3);
        let got: Vec<usize> = lines(&path).iter().map(|l| message(l)).collect();
        assert_eq!(got, vec![100, 101, 102]);

        // Once the obstacle is gone, rotation resumes.
        fs::remove_dir_all(numbered(&path, 1)).unwrap();
        log.write(&warning(103)).unwrap();
        assert_eq!(lines(&numbered(&path, 1)).len(), 3);
        assert_eq!(lines(&path).len(), 1);
    }

    #[test]
    fn open_error_names_path() {
        let f = tempfile::NamedTempFile::new().unwrap();
        // Under a regular file: fails for everyone, root included.
        let path = f.path().join("audit.jsonl");
        let e = AuditLog::open(&cfg(&path, 0, 1)).unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, AuditError::Open { .. }), "{e:?}");
        assert!(
            msg.contains(&path.display().to_string()) && msg.contains("audit.path"),
            "{msg}"
        );
    }

    #[test]
    fn write_error_is_an_error() {
        let full = Path::new("/dev/full");
        if !full.exists() {
            return;
        }
        let mut log = AuditLog::open(&cfg(full, 0, 1)).unwrap();
        let e = log.write(&warning(1)).unwrap_err();
        assert!(e.record_lost());
        assert!(e.to_string().contains("/dev/full"), "{e}");
        assert_eq!(log.records_written(), 0);
    }

    #[test]
    fn stdout_mode() {
        let mut log = AuditLog::open(&cfg(Path::new("-"), 10, 3)).unwrap();
        assert!(matches!(log.sink, Sink::Stdout));
        log.write(&warning(1)).unwrap();
        log.write(&warning(2)).unwrap();
        assert_eq!(log.records_written(), 2);
        // No file named "-" appears, and stdout never rotates.
        assert!(!Path::new("-").exists() && !Path::new("-.1").exists());
    }

    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);
    impl Write for Shared {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn log_can_move_between_tasks() {
        fn send<T: Send>() {}
        send::<AuditLog>();
    }

    #[test]
    fn writer_and_discard() {
        let buf = Shared::default();
        let mut log = AuditLog::to_writer(Box::new(buf.clone()));
        for ev in every_event() {
            log.write(&Record::new(1, Mode::Live, ev)).unwrap();
        }
        let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        assert_eq!(text.lines().count(), 11);
        assert!(text.ends_with('\n'));
        for l in text.lines() {
            serde_json::from_str::<serde_json::Value>(l).unwrap();
        }

        let mut log = AuditLog::discard();
        log.write(&warning(1)).unwrap();
        assert_eq!(log.records_written(), 1);
    }
}
