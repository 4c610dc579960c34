//! The one seam between innopilot and a server: the [`Server`] trait, the allowlist of
//! knobs innopilot may ever touch ([`Knob`]), and what a server can do ([`Capabilities`]).
//!
//! The live implementation ([`mysql::LiveServer`]) speaks to MariaDB or MySQL over sqlx;
//! the simulator and a recording implement the same trait, so the control loop and the
//! one-shot commands (`diagnose`, `drain`) cannot tell them apart. What only some
//! servers can do (a server-side purge wait, the process list, SHOW ENGINE INNODB
//! STATUS) has a default that answers [`ServerError::Unsupported`].

pub mod connect;
pub mod dsn;
pub mod flavor;
pub mod mysql;
pub mod recording;
pub mod sample;
#[cfg(test)]
pub(crate) mod testkit;

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use flavor::{Capabilities, Dynamic, Flavor, KnobCap, ServerIdentity, SignalSources, Version};

pub use sample::Sample;

/// The allowlist. A variable that is not a variant here can never be named in a `SET
/// GLOBAL` that innopilot sends: SQL text is built from [`Knob::var_name`] alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Knob {
    #[serde(rename = "innodb_purge_threads")]
    PurgeThreads,
    #[serde(rename = "innodb_purge_batch_size")]
    PurgeBatchSize,
    #[serde(rename = "innodb_max_purge_lag")]
    MaxPurgeLag,
    #[serde(rename = "innodb_max_purge_lag_delay")]
    MaxPurgeLagDelay,
    #[serde(rename = "innodb_io_capacity")]
    IoCapacity,
    #[serde(rename = "innodb_io_capacity_max")]
    IoCapacityMax,
    #[serde(rename = "innodb_log_file_size")]
    LogFileSize,
    #[serde(rename = "innodb_redo_log_capacity")]
    RedoLogCapacity,
    #[serde(rename = "innodb_undo_log_truncate")]
    UndoLogTruncate,
    #[serde(rename = "innodb_max_undo_log_size")]
    MaxUndoLogSize,
    /// A DOUBLE on both servers; innopilot only ever sets and accepts whole percents
    /// (see [`sample::parse_u64`]).
    #[serde(rename = "innodb_max_dirty_pages_pct_lwm")]
    MaxDirtyPagesPctLwm,
    /// 0 = off, 1 = dirty neighbours in the page's extent, 2 = only a contiguous run.
    #[serde(rename = "innodb_flush_neighbors")]
    FlushNeighbors,
    /// MariaDB ≥ 10.5: the free-list length the page cleaner refills to when free
    /// pages run short (`buf_flush_LRU_list_batch()`); pages held free cache nothing.
    #[serde(rename = "innodb_lru_scan_depth")]
    LruScanDepth,
}

impl Knob {
    pub const ALL: [Knob; 13] = [
        Knob::PurgeThreads,
        Knob::PurgeBatchSize,
        Knob::MaxPurgeLag,
        Knob::MaxPurgeLagDelay,
        Knob::IoCapacity,
        Knob::IoCapacityMax,
        Knob::LogFileSize,
        Knob::RedoLogCapacity,
        Knob::UndoLogTruncate,
        Knob::MaxUndoLogSize,
        Knob::MaxDirtyPagesPctLwm,
        Knob::FlushNeighbors,
        Knob::LruScanDepth,
    ];

    /// "innodb_purge_threads, innodb_io_capacity": knobs named for messages.
    pub fn list(knobs: &[Knob]) -> String {
        knobs
            .iter()
            .map(|k| k.var_name())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The server variable's name, lower case, exactly as `SET GLOBAL` takes it.
    pub const fn var_name(self) -> &'static str {
        match self {
            Knob::PurgeThreads => "innodb_purge_threads",
            Knob::PurgeBatchSize => "innodb_purge_batch_size",
            Knob::MaxPurgeLag => "innodb_max_purge_lag",
            Knob::MaxPurgeLagDelay => "innodb_max_purge_lag_delay",
            Knob::IoCapacity => "innodb_io_capacity",
            Knob::IoCapacityMax => "innodb_io_capacity_max",
            Knob::LogFileSize => "innodb_log_file_size",
            Knob::RedoLogCapacity => "innodb_redo_log_capacity",
            Knob::UndoLogTruncate => "innodb_undo_log_truncate",
            Knob::MaxUndoLogSize => "innodb_max_undo_log_size",
            Knob::MaxDirtyPagesPctLwm => "innodb_max_dirty_pages_pct_lwm",
            Knob::FlushNeighbors => "innodb_flush_neighbors",
            Knob::LruScanDepth => "innodb_lru_scan_depth",
        }
    }

    /// Looks a knob up by variable name, ignoring case (information_schema upper-cases).
    pub fn from_var_name(name: &str) -> Option<Knob> {
        Knob::ALL
            .into_iter()
            .find(|k| k.var_name().eq_ignore_ascii_case(name))
    }

    /// Unit of the value, for humans.
    pub const fn unit(self) -> &'static str {
        match self {
            Knob::PurgeThreads => "threads",
            Knob::PurgeBatchSize => "undo pages",
            Knob::MaxPurgeLag => "undo logs of history",
            Knob::MaxPurgeLagDelay => "µs",
            Knob::IoCapacity | Knob::IoCapacityMax => "IOPS",
            Knob::LogFileSize | Knob::RedoLogCapacity | Knob::MaxUndoLogSize => "bytes",
            Knob::UndoLogTruncate => "0=OFF 1=ON",
            Knob::MaxDirtyPagesPctLwm => "% of the buffer pool dirty",
            Knob::FlushNeighbors => "0=off 1=area 2=contiguous",
            Knob::LruScanDepth => "free pages",
        }
    }

    /// Boolean variables read back as ON/OFF and are set as 0/1.
    pub const fn is_bool(self) -> bool {
        matches!(self, Knob::UndoLogTruncate)
    }

    /// A value as `SHOW GLOBAL VARIABLES` prints it (booleans as ON/OFF).
    pub fn show_value(self, value: u64) -> String {
        match (self.is_bool(), value) {
            (true, 0) => "OFF".into(),
            (true, _) => "ON".into(),
            (false, v) => v.to_string(),
        }
    }

    /// Resizing the redo log blocks the session that asks for it until the resize is
    /// done: such knobs are set on a connection of their own, never the sampling one.
    pub const fn is_blocking(self) -> bool {
        matches!(self, Knob::LogFileSize | Knob::RedoLogCapacity)
    }
}

impl std::fmt::Display for Knob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.var_name())
    }
}

impl std::str::FromStr for Knob {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Knob::from_var_name(s).ok_or_else(|| {
            let names: Vec<&str> = Knob::ALL.iter().map(|k| k.var_name()).collect();
            format!(
                "`{s}` is not a knob innopilot manages; one of: {}",
                names.join(", ")
            )
        })
    }
}

/// Values of the knobs in effect on the server, as typed integers.
pub type KnobValues = BTreeMap<Knob, u64>;

/// Everything that can go wrong talking to a server. Messages never contain a
/// password: connection targets are rendered by [`dsn::ConnectTarget`]'s redacting
/// `Display`, and server messages are passed through [`dsn::redact`].
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("cannot connect to {target}: {message}. {hint}")]
    Connect {
        target: String,
        message: String,
        hint: &'static str,
    },
    #[error("{what} did not answer within {}; the server may be overloaded or hung (raise server.query_timeout if it is merely slow)", humantime::format_duration(*after))]
    Timeout { what: &'static str, after: Duration },
    #[error("connection to the server lost during {what}: {message}")]
    Lost { what: &'static str, message: String },
    #[error("{what} failed: {message}")]
    Query { what: &'static str, message: String },
    #[error("{what}: access denied: {message}. {hint}")]
    Denied {
        what: &'static str,
        message: String,
        hint: &'static str,
    },
    #[error("the server answered {what} with something innopilot does not understand: {detail}")]
    Unexpected { what: &'static str, detail: String },
    #[error("{knob} cannot be changed on this server: {why}")]
    NotSettable { knob: Knob, why: String },
    /// The server refuses a redo resize while another one runs, whoever sent it
    /// (MariaDB: ER_WRONG_USAGE, error 1221, "innodb_log_file_size change is already in
    /// progress"). That resize ends on its own once the checkpoint passes its LSN.
    #[error("{knob} is being resized already and the server takes no other size until that resize ends ({message}); wait for it (SHOW PROCESSLIST shows its SET GLOBAL) and try again")]
    ResizeUnderWay { knob: Knob, message: String },
    #[error("{what} is not available on {server}")]
    Unsupported {
        what: &'static str,
        /// The kind of server asked ("a recording", "the simulated MySQL", …).
        server: &'static str,
    },
}

impl ServerError {
    /// Errors after which the connection is suspect and must be re-established (and
    /// capabilities re-read) before anything else is done.
    pub fn is_connection_lost(&self) -> bool {
        matches!(
            self,
            ServerError::Connect { .. } | ServerError::Lost { .. } | ServerError::Timeout { .. }
        )
    }

    /// The server cannot do this at all (as opposed to failing at it now).
    pub fn is_unsupported(&self) -> bool {
        matches!(self, ServerError::Unsupported { .. })
    }
}

/// What a server that cannot do something answers, for the trait's defaults.
fn unsupported<T>(what: &'static str) -> Result<T, ServerError> {
    Err(ServerError::Unsupported {
        what,
        server: "this server",
    })
}

/// Which of a server's named global values to read ([`Server::read_globals`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Globals {
    /// `SHOW GLOBAL VARIABLES`.
    Variables,
    /// `SHOW GLOBAL STATUS`.
    Status,
}

impl Globals {
    /// What reading them is called in messages.
    pub const fn what(self) -> &'static str {
        match self {
            Globals::Variables => "reading global variables",
            Globals::Status => "reading global status",
        }
    }
}

/// One session of the server's process list (for naming the transaction that blocks
/// purge and what it runs).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SessionInfo {
    /// The account, so a holder found outside the oldest transaction's row is still
    /// named with its user and host.
    pub user: Option<String>,
    pub host: Option<String>,
    pub command: Option<String>,
    /// Seconds in the current state.
    pub time_s: Option<u64>,
    pub state: Option<String>,
    /// The statement it runs now (PROCESSLIST INFO), truncated; `None` when idle.
    pub info: Option<String>,
}

/// The future of a [`HistoryWait`]: owns everything it needs, so it runs beside
/// further calls on the server (progress samples).
pub type WaitFuture = Pin<Box<dyn Future<Output = Result<(), ServerError>> + Send>>;

/// A wait, inside the server, until the history list is short enough
/// ([`Server::wait_for_history_at_most`]).
pub struct HistoryWait {
    /// The session that waits: dropping [`HistoryWait::done`] does not stop a statement
    /// in the server, [`Server::kill_query`] with this id does.
    pub session_id: u64,
    /// Resolves when history ≤ the target (`Ok`), or with why the wait ended
    /// ([`ServerError::Timeout`] at the limit).
    pub done: WaitFuture,
}

impl std::fmt::Debug for HistoryWait {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HistoryWait")
            .field("session_id", &self.session_id)
            .finish_non_exhaustive()
    }
}

/// A `SET GLOBAL` of a blocking knob ([`Knob::is_blocking`]) under way on a session of
/// its own ([`Server::start_set`]). It holds nothing of the server it came from.
pub struct PendingSet {
    /// The session running it, where there is one: [`Server::kill_query`] on it stops
    /// the statement, and MariaDB then abandons the resize (`log_t::resize_abort()`).
    pub session_id: Option<u64>,
    /// Resolves to the value read back once the server has finished it.
    pub set: Pin<Box<dyn Future<Output = Result<u64, ServerError>> + Send + 'static>>,
}

impl PendingSet {
    /// A SET that is already over.
    pub fn done(result: Result<u64, ServerError>) -> Self {
        PendingSet {
            session_id: None,
            set: Box::pin(std::future::ready(result)),
        }
    }
}

/// What innopilot needs from a server. Implemented by the live connection
/// ([`mysql::LiveServer`]), the simulator and recordings ([`recording`]); nothing else
/// in the crate talks SQL. The first four are what the control loop uses; the rest
/// serve `diagnose` and `drain`, with defaults for a server that cannot do them.
pub trait Server: Send {
    /// Identifies the server and builds its capability table. Called at start and after
    /// every reconnect or server restart, before any decision is acted on.
    fn probe(&mut self) -> impl Future<Output = Result<Capabilities, ServerError>> + Send;

    /// One sample of every signal and of the knobs' values in effect. At most three
    /// round trips.
    fn sample(&mut self) -> impl Future<Output = Result<Sample, ServerError>> + Send;

    /// Reads the knobs' values in effect (one round trip).
    fn read_knobs(&mut self) -> impl Future<Output = Result<KnobValues, ServerError>> + Send;

    /// Sets one allowlisted knob to a typed integer and returns the value in effect
    /// afterwards, read back from the server.
    fn set_knob(
        &mut self,
        knob: Knob,
        value: u64,
    ) -> impl Future<Output = Result<u64, ServerError>> + Send;

    /// Starts a `SET GLOBAL` of a blocking knob ([`Knob::is_blocking`]) and returns what
    /// finishes it. A redo resize returns only once a checkpoint has passed the LSN at
    /// which it began (tens of seconds at a full redo on a slow device): the live server
    /// runs it on a connection of its own, so the loop samples and decides meanwhile.
    /// The default finishes it first with [`Server::set_knob`] (the simulator and a
    /// replay answer at once).
    fn start_set(
        &mut self,
        knob: Knob,
        value: u64,
    ) -> impl Future<Output = Result<PendingSet, ServerError>> + Send {
        async move { Ok(PendingSet::done(self.set_knob(knob, value).await)) }
    }

    /// Global variables or status values by innopilot's own constant names:
    /// lower-cased name → value as text (booleans as ON/OFF). Names the server does not
    /// have are absent.
    fn read_globals(
        &mut self,
        which: Globals,
        names: &[&'static str],
    ) -> impl Future<Output = Result<BTreeMap<String, String>, ServerError>> + Send {
        let _ = names;
        async move { unsupported(which.what()) }
    }

    /// The process-list row of one session, its statement cut to `max_chars`
    /// characters; `None` when no such session exists.
    fn session(
        &mut self,
        thread_id: u64,
        max_chars: u32,
    ) -> impl Future<Output = Result<Option<SessionInfo>, ServerError>> + Send {
        let _ = (thread_id, max_chars);
        async { unsupported("the process list") }
    }

    /// The sessions running a redo resize now (`SET GLOBAL innodb_log_file_size` or
    /// `innodb_redo_log_capacity`, whoever sent it), as `(session id, seconds in it)`.
    /// A MariaDB resize goes on when its client is gone (tests/redo_resize.rs), and
    /// the server refuses another until it has ended ("innodb_log_file_size change is
    /// already in progress"): crash recovery waits for it first.
    fn resizes_under_way(
        &mut self,
    ) -> impl Future<Output = Result<Vec<(u64, Option<u64>)>, ServerError>> + Send {
        async { unsupported("the process list") }
    }

    /// `SHOW ENGINE INNODB STATUS` as text, once (never in a loop: it takes the lock
    /// system latch).
    fn engine_innodb_status(&mut self) -> impl Future<Output = Result<String, ServerError>> + Send {
        async { unsupported("SHOW ENGINE INNODB STATUS") }
    }

    /// Starts a wait, inside the server and on a session of its own, until the history
    /// list is at most `target` undo logs, ending after `limit` at the latest (MariaDB's
    /// `innodb_max_purge_lag_wait`). Where the server cannot wait, the caller polls.
    fn wait_for_history_at_most(
        &mut self,
        target: u32,
        limit: Duration,
    ) -> impl Future<Output = Result<HistoryWait, ServerError>> + Send {
        let _ = (target, limit);
        async { unsupported("waiting for purge (innodb_max_purge_lag_wait)") }
    }

    /// Stops the statement a session runs (`KILL QUERY`): only ever a session innopilot
    /// opened itself, such as a [`HistoryWait`]'s.
    fn kill_query(
        &mut self,
        session_id: u64,
    ) -> impl Future<Output = Result<(), ServerError>> + Send {
        let _ = session_id;
        async { unsupported("stopping a statement (KILL QUERY)") }
    }

    /// What the server is, as read at the last [`Server::probe`], independent of how
    /// it was reached (`@@server_uuid` on MySQL; server id, host name, port and data
    /// directory on MariaDB). `None` where there is no such thing (the simulator):
    /// callers then compare the connection target.
    fn instance(&self) -> Option<String> {
        None
    }

    /// Whether this server lives in real time, so that events are stamped with the wall
    /// clock when they happen. The simulator and replays date their samples in virtual
    /// time, and events with the last sample's time.
    fn real_time(&self) -> bool {
        false
    }

    /// Claims the server for one live innopilot: `Ok(None)` when this connection holds
    /// the claim (again, after a reconnect), `Ok(Some(holder))` describing who holds it
    /// otherwise. Servers without such a thing (the simulator) are always free.
    fn claim(&mut self) -> impl Future<Output = Result<Option<String>, ServerError>> + Send {
        async { Ok(None) }
    }
}
