//! The control loop: every interval, sample → signals → policies → arbiter → guard →
//! actuator → audit + state. Also owns the lifecycle around it: the privilege check,
//! crash recovery at start ([`recovery`]), lost connections and server restarts,
//! operator-owned knobs, and restoring the baseline at the end (`restore`).
//!
//! | module | owns |
//! | --- | --- |
//! | [`plan`] | the pure planning step: proposals → arbiter → guard → changes |
//! | [`guard`] | bounds, dwell, rate limits, operator-owned knobs |
//! | [`actuator`] | SET, read back, the state file written before each SET |
//! | [`state`] | the state file and its lock |
//! | [`audit`] | the audit log |
//! | `restore` | the baseline back at exit, resizes handed over |
//! | [`recovery`] | what a run that did not finish left, put back |
//!
//! Invariants:
//! - No decision is acted on unless the capabilities and knob values it rests on were
//!   read in this server life: after a lost connection the server is probed again, and
//!   after a restart (uptime went down) the baseline is taken anew.
//! - A knob whose live value is neither what innopilot expects nor the outcome of a SET
//!   whose result was unknown is operator-owned from then on.

pub mod actuator;
pub mod audit;
pub mod guard;
pub mod plan;
pub mod recovery;
mod restore;
pub mod state;

use recovery::describe_server;
pub use recovery::{recover, RecoveryReport};

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tokio::sync::{mpsc, watch};
use tokio::time::{Instant, MissedTickBehavior};

use crate::config::{Config, OnServerLost};
use crate::control::actuator::{Actuator, ActuatorError, Applied};
use crate::control::audit::{
    compact_signals, held_by, hold_rules, AuditLog, Event, Explained, Mode, Outcome, Record,
    RestoreTrigger,
};
use crate::control::guard::Guard;
use crate::control::state::{LockState, StateFile, StateLock, StateStore};
use crate::metrics::{Phase, Snapshot, Telemetry};
use crate::policy::{Policy, PolicyInput};
use crate::server::sample::unix_ms_now;
use crate::server::{Capabilities, Flavor, Knob, KnobValues, Server, ServerError};
use crate::signals::{SignalWindow, Signals};

/// What one tick did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TickReport {
    /// Time of the sample the tick acted on; `None` when no sample was taken (the
    /// connection was down).
    pub unix_ms: Option<u64>,
    /// Every decision the tick audited: applied, dry-run, refused, failed, or held
    /// where it is by a rule new to the knob.
    pub decisions: Vec<TickDecision>,
}

/// One audited decision of a tick.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TickDecision {
    /// When it was stamped (the tick's sample time).
    pub unix_ms: u64,
    pub policy: String,
    pub knob: Knob,
    pub from: u64,
    pub to: u64,
    pub outcome: Outcome,
    pub reason: String,
    /// The rules that held a policy back, "policy: rule" (the audit's `held_by`).
    pub held_by: Vec<String>,
}

/// Fatal conditions: the loop stops (restoring the baseline where it can).
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("the account {account} may not SET GLOBAL, so innopilot cannot act. Grant it with:\n    {grant}\nor run `innopilot run --dry-run`, which only needs: GRANT {observe} ON *.* TO {account};")]
    Privileges {
        account: String,
        grant: String,
        /// What observing needs on this flavor and version.
        observe: String,
    },
    #[error(
        "live mode needs a writable state file to be able to restore the server after a crash: {0}"
    )]
    State(#[from] crate::control::state::StateError),
    #[error("cannot start: {0}")]
    Start(#[source] ServerError),
    /// Another live run (or a restore) holds the state file, or the file is not
    /// private: nothing was changed.
    #[error("{0}")]
    Refused(#[source] crate::control::state::StateError),
    #[error(
        "the state file {path} holds the baseline of a live run that did not finish on \
         another server ({theirs}); this is {ours}. innopilot will not overwrite it: \
         restore that server with `innopilot restore --state-file {path} --dsn <that \
         server>`, or give this run its own control.state_file. Nothing was changed"
    )]
    ForeignState {
        path: String,
        theirs: String,
        ours: String,
    },
    #[error(
        "another live innopilot is running on this server ({holder} holds its claim, \
         the named lock `innopilot`); only one may change a server's variables at a time. \
         Stop that one first, or use --dry-run to observe alongside it"
    )]
    ServerClaimed { holder: String },
    #[error(
        "crash recovery from {path} did not finish: {detail}. The state file is kept as it \
         is; fix the cause (the audit log has each knob) and run `innopilot restore`, or \
         set the values back by hand and remove the file"
    )]
    Unrecovered { path: String, detail: String },
    #[error("gave up on the server after {} without a connection (control.on_server_lost = \"exit\"); the state file keeps the baseline, and the next start restores it", humantime::format_duration(*.0))]
    GaveUp(std::time::Duration),
}

impl ControlError {
    /// Process exit code for this error.
    pub fn exit_code(&self) -> u8 {
        match self {
            ControlError::Privileges { .. } => 3,
            ControlError::ForeignState { .. } => 2,
            ControlError::GaveUp(_) => 4,
            _ => 1,
        }
    }
}

/// How `run` was asked to behave.
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub dry_run: bool,
    /// The config file in use, for the audit log.
    pub config_path: Option<String>,
    /// Who we talk to, as printed (never a password): identifies the server in the
    /// state file.
    pub target: String,
}

/// Counters for status and metrics.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    pub ticks: u64,
    pub samples_ok: u64,
    pub sample_errors: u64,
    pub sets_applied: u64,
    pub sets_failed: u64,
    pub decisions: u64,
}

/// The output of a future that is already over, without waiting: the simulator's and a
/// replay's SETs are, and must be audited in the tick that made them.
fn poll_now<F: Future + Unpin>(f: &mut F) -> Option<F::Output> {
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match std::pin::Pin::new(f).poll(&mut cx) {
        std::task::Poll::Ready(v) => Some(v),
        std::task::Poll::Pending => None,
    }
}

/// Room reserved in the audit log before each live SET: a decision record, its
/// failure record and a restore record fit several times over.
const AUDIT_RESERVE: u64 = 16 * 1024;

/// Path of the release mailbox beside the state file: `innopilot release KNOB` appends
/// knob names there; the loop reads and removes it each tick.
pub fn release_path(state_file: &std::path::Path) -> PathBuf {
    let mut p = state_file.as_os_str().to_owned();
    p.push(".release");
    PathBuf::from(p)
}

/// A blocking SET under way ([`Server::start_set`]): what to audit when it ends.
struct InFlight {
    knob: Knob,
    from: u64,
    to: u64,
    notes: Vec<String>,
    decision: crate::policy::arbiter::Decision,
    /// The signals it was decided on (its audit record's).
    signals: Signals,
    /// When it was sent (its audit record's `sent_unix_ms`).
    sent_unix_ms: u64,
    /// The session running it, to stop it if innopilot stops first.
    session_id: Option<u64>,
    task: tokio::task::JoinHandle<Result<u64, ServerError>>,
}

/// Where a SET ran, for its audit record and a lost connection.
#[derive(Debug, Clone, Copy)]
enum Via {
    /// The connection the loop samples with: a lost connection there is the loop's.
    Sampling,
    /// A session of its own (a redo resize) that had ended by the tick it was sent in.
    AtOnce,
    /// A session of its own, audited when it ended: sent then.
    Session { sent_unix_ms: u64 },
}

impl Via {
    /// The event, with when it was sent where that differs from when it is written.
    fn stamp(self, mut ev: Event) -> Event {
        if let (
            Via::Session { sent_unix_ms },
            Event::Decision {
                sent_unix_ms: s, ..
            },
        ) = (self, &mut ev)
        {
            *s = Some(sent_unix_ms);
        }
        ev
    }
}

/// The controller: one server, one loop.
pub struct Controller<S: Server> {
    server: S,
    cfg: Config,
    opts: RunOptions,
    policies: Vec<Box<dyn Policy>>,
    guard: Guard,
    actuator: Actuator,
    audit: AuditLog,
    window: SignalWindow,
    caps: Option<Capabilities>,
    /// What innopilot believes is in effect per knob: the baseline, or the last value
    /// it set (dry-run: would have set).
    expected: KnobValues,
    /// SETs whose outcome is unknown (connection cut mid-SET): (before, intended).
    uncertain: BTreeMap<Knob, (u64, u64)>,
    /// A blocking SET (a redo resize) under way on a session of its own, finished by a
    /// later tick ([`Controller::settle_in_flight`]).
    in_flight: Option<InFlight>,
    /// Dry-run: the live values last seen, to notice an operator's change.
    last_live: KnobValues,
    /// The transaction whose read view blocks purge, as last reported.
    blocked_by: Option<String>,
    /// The latest sample, kept across lost connections to tell a restart.
    last_sample: Option<crate::server::sample::Sample>,
    /// Set when a connection is lost; cleared when regained.
    lost_since: Option<Instant>,
    /// The connection stayed lost beyond the budget: restore on return.
    gave_up: bool,
    just_reconnected: bool,
    /// Last reject audited per knob, so a dwell or rate limit is not logged every tick.
    last_reject: BTreeMap<Knob, String>,
    /// The rules the audit named lately for each knob, so that a knob held where it
    /// is gets a record when the rules holding it are new, not every tick.
    explained: Explained,
    last_signals: Option<Signals>,
    /// What the tick in progress did (see [`Controller::tick`]).
    report: TickReport,
    pub stats: Stats,
    /// Counters by kind for `/metrics` (decisions, errors, sample durations, reloads).
    pub telemetry: Telemetry,
    /// Where a [`Snapshot`] goes after every tick (the HTTP endpoints read it).
    publisher: Option<watch::Sender<Arc<Snapshot>>>,
    /// When the last successful sample was taken (for `/healthz`).
    last_sample_at: Option<Instant>,
    last_tick_at: Option<Instant>,
    /// "MariaDB 10.11.19", kept while disconnected.
    server_label: Option<String>,
    /// Live mode: the state file's lock, held until the controller is dropped.
    _lock: Option<StateLock>,
}

/// A configuration reload request (SIGHUP), prepared outside the loop.
#[derive(Debug)]
pub enum Reload {
    /// A new, validated configuration, and the file it came from.
    Apply { config: Box<Config>, source: String },
    /// The file could not be read or is invalid: the running configuration stays.
    Rejected { source: String, error: String },
}

impl<S: Server> Controller<S> {
    /// Connects, checks privileges, recovers from a crashed previous run, records the
    /// baseline. Fails fast: a wrong DSN or missing privileges must not retry forever.
    pub async fn start(
        mut server: S,
        cfg: Config,
        opts: RunOptions,
        mut audit: AuditLog,
    ) -> Result<Self, ControlError> {
        let dry_run = opts.dry_run;
        let caps = server.probe().await.map_err(ControlError::Start)?;
        if !dry_run && !caps.can_set_global {
            let privilege = match caps.identity.flavor {
                Flavor::MariaDb => "SUPER",
                Flavor::MySql => "SYSTEM_VARIABLES_ADMIN",
            };
            let account = if caps.account.is_empty() {
                "'innopilot'@'localhost'".to_string()
            } else {
                quote_account(&caps.account)
            };
            return Err(ControlError::Privileges {
                grant: format!("GRANT {privilege} ON *.* TO {account};"),
                observe: crate::server::flavor::observe_grants(&caps.identity),
                account,
            });
        }
        let mode = if dry_run { Mode::DryRun } else { Mode::Live };
        let store = StateStore::new(cfg.control.state_file.clone());
        let mut store_opt = None;
        let mut lock = None;
        // Redo logs the previous run left grown, carried on: (knob, baseline, value).
        let mut carried = Vec::new();
        // What an earlier run on this server measured about the machine.
        let mut recalled = None;
        if !dry_run {
            store.check_writable()?;
            // Held for the run's life: a second live run on this state file would
            // take this run's changes for a crash's and each would overwrite the
            // other's baseline.
            lock = Some(store.lock().map_err(ControlError::Refused)?);
            // ... and one live run per server, whatever its state file.
            if let Some(holder) = server.claim().await.map_err(ControlError::Start)? {
                return Err(ControlError::ServerClaimed { holder });
            }
            // Crash recovery: a previous live run did not finish cleanly. Its file is
            // the only record of the server's real baseline, so it is overwritten
            // only once everything it asks for is restored.
            let saved = match store.load() {
                Ok(s) => s,
                Err(e @ crate::control::state::StateError::Unsafe { .. }) => {
                    return Err(ControlError::Refused(e))
                }
                Err(e) => return Err(e.into()),
            };
            recalled = recallable(saved.as_ref(), &server, &opts.target);
            if let Some(saved) = saved.filter(|s| !s.clean) {
                let report = recover(
                    &mut server,
                    &saved,
                    &cfg,
                    &opts.target,
                    &mut audit,
                    mode,
                    true,
                )
                .await
                .map_err(ControlError::Start)?;
                carried = report.carried.clone();
                let path = cfg.control.state_file.display().to_string();
                if let Some(theirs) = report.foreign {
                    return Err(ControlError::ForeignState {
                        path,
                        theirs,
                        ours: describe_server(&server, &opts.target),
                    });
                }
                if let Some(detail) = report.incomplete() {
                    return Err(ControlError::Unrecovered { path, detail });
                }
            }
            store_opt = Some(store);
        } else if let Some(saved) = store.peek() {
            recalled = recallable(Some(&saved), &server, &opts.target);
            if !saved.clean {
                // A healthy live run holds the lock: its state is unclean because it
                // is running, and restoring would undo its work.
                let path = cfg.control.state_file.display();
                let message = match store.lock_state() {
                    LockState::Held(pid) => format!("a live innopilot (pid {pid}) is running with the state file {path}; dry-run observes alongside it and touches nothing"),
                    LockState::Free if !saved.kept.is_empty() => format!("the state file {path} shows a live run that kept {} grown at exit while users wrote; dry-run will not touch the server: the next live run carries it on, `innopilot restore` puts the baseline back", Knob::list(&saved.kept)),
                    LockState::Free => format!("the state file {path} shows a live run that did not finish cleanly; dry-run will not touch the server: run `innopilot restore` to put its baseline back"),
                    LockState::Unknown(why) => format!("the state file {path} shows a live run that is running or did not finish cleanly ({why}); dry-run touches nothing either way: when no innopilot runs, `innopilot restore` puts its baseline back"),
                };
                tracing::warn!("{message}");
                emit(&mut audit, mode, unix_ms_now(), Event::Warning { message });
            }
        }
        let baseline = server.read_knobs().await.map_err(ControlError::Start)?;
        let mut state = StateFile::new(
            std::process::id(),
            opts.target.clone(),
            unix_ms_now(),
            baseline.clone(),
        );
        state.instance = server.instance();
        state.learned = recalled;
        let mut actuator = Actuator::new(dry_run, store_opt, state);
        actuator.persist(unix_ms_now())?;
        for (knob, base, now) in carried {
            actuator.carry(knob, base, now, unix_ms_now())?;
        }
        emit(
            &mut audit,
            mode,
            unix_ms_now(),
            Event::Start {
                server: format!(
                    "{} {} at {}",
                    caps.identity.flavor, caps.identity.version, opts.target
                ),
                innopilot_version: env!("CARGO_PKG_VERSION").to_string(),
                pid: std::process::id(),
                flavor: caps.identity.flavor.to_string(),
                version: caps.identity.version_string.clone(),
                capabilities: serde_json::to_value(&caps).unwrap_or_default(),
                // With a carried log's baseline, not its grown size.
                baseline: actuator.baseline().clone(),
                config_path: opts.config_path.clone(),
                recalled,
            },
        );
        let mut policies = crate::policy::build(&cfg.policy);
        if let Some(r) = &recalled {
            crate::policy::recall(&mut policies, &r.learned);
        }
        let guard = Guard::new(cfg.knobs.clone(), cfg.control.max_sets_per_minute);
        Ok(Controller {
            window: SignalWindow::new(cfg.sampler.window),
            server,
            opts,
            policies,
            guard,
            actuator,
            audit,
            caps: Some(caps),
            expected: baseline.clone(),
            last_live: baseline,
            uncertain: BTreeMap::new(),
            last_sample: None,
            blocked_by: None,
            lost_since: None,
            gave_up: false,
            just_reconnected: false,
            last_reject: BTreeMap::new(),
            explained: Explained::default(),
            in_flight: None,
            last_signals: None,
            report: TickReport::default(),
            stats: Stats::default(),
            telemetry: {
                // The start record was written above, before the counters existed.
                let mut t = Telemetry::new();
                t.count_event("start");
                t
            },
            publisher: None,
            last_sample_at: None,
            last_tick_at: None,
            server_label: None,
            _lock: lock,
            cfg,
        })
    }

    fn mode(&self) -> Mode {
        if self.opts.dry_run {
            Mode::DryRun
        } else {
            Mode::Live
        }
    }

    /// The time of an event happening now. A real server: the wall clock (the last
    /// sample's time dated events after an outage back to before it, and the stop
    /// seconds early). Simulated or replayed servers live in virtual time, in which
    /// their samples are dated: the last sample's time, else the wall clock.
    fn event_unix_ms(&self) -> u64 {
        if self.server.real_time() {
            return unix_ms_now();
        }
        self.last_signals
            .as_ref()
            .map(|s| s.sample.unix_ms)
            .filter(|t| *t > 0)
            .unwrap_or_else(unix_ms_now)
    }

    fn emit(&mut self, event: Event) {
        let unix_ms = self.event_unix_ms();
        self.count_event(&event);
        if let Event::Decision {
            policy,
            knob,
            from,
            to,
            outcome,
            reason,
            held_by,
            ..
        } = &event
        {
            self.report.decisions.push(TickDecision {
                unix_ms,
                policy: policy.clone(),
                knob: *knob,
                from: *from,
                to: *to,
                outcome: *outcome,
                reason: reason.clone(),
                held_by: held_by.clone(),
            });
        }
        let mode = self.mode();
        if !emit(&mut self.audit, mode, unix_ms, event) {
            self.telemetry.count_error("audit");
        }
    }

    pub fn capabilities(&self) -> Option<&Capabilities> {
        self.caps.as_ref()
    }

    pub fn baseline(&self) -> &KnobValues {
        self.actuator.baseline()
    }

    pub fn guard(&self) -> &Guard {
        &self.guard
    }

    /// What the policies have measured about the machine so far.
    pub fn learned(&self) -> crate::policy::Learned {
        crate::policy::learned(&self.policies)
    }

    pub fn last_signals(&self) -> Option<&Signals> {
        self.last_signals.as_ref()
    }

    /// Runs ticks every `sampler.interval` until `shutdown` resolves (to a reason).
    /// A tick in progress is finished first: every query in it is bounded by a timeout,
    /// and stopping mid-SET would leave its outcome unknown.
    pub async fn run<F>(&mut self, shutdown: F) -> Result<String, ControlError>
    where
        F: Future<Output = String>,
    {
        let (_keep, mut reloads) = mpsc::unbounded_channel();
        self.run_with_reload(shutdown, &mut reloads).await
    }

    /// [`Self::run`], also applying configuration reloads as they arrive (between
    /// ticks, never during one). A snapshot is published after every tick.
    pub async fn run_with_reload<F>(
        &mut self,
        shutdown: F,
        reloads: &mut mpsc::UnboundedReceiver<Reload>,
    ) -> Result<String, ControlError>
    where
        F: Future<Output = String>,
    {
        let ticker_for = |period| {
            let mut t = tokio::time::interval(period);
            t.set_missed_tick_behavior(MissedTickBehavior::Skip);
            t
        };
        let mut period = self.cfg.sampler.interval;
        let mut ticker = ticker_for(period);
        tokio::pin!(shutdown);
        self.publish(Phase::Running);
        loop {
            tokio::select! {
                reason = &mut shutdown => return Ok(reason),
                Some(req) = reloads.recv() => {
                    match req {
                        Reload::Apply { config, source } => {
                            self.reload(*config, &source);
                        }
                        Reload::Rejected { source, error } => self.reload_rejected(&source, &error),
                    }
                    if self.cfg.sampler.interval != period {
                        period = self.cfg.sampler.interval;
                        ticker = ticker_for(period);
                    }
                    self.publish(Phase::Running);
                }
                _ = ticker.tick() => {
                    let r = self.tick().await;
                    self.publish(Phase::Running);
                    r?;
                }
            }
        }
    }

    /// One iteration of the loop, and what it did, typed: the audit log, metrics, the
    /// simulator and replay all read the same facts, never re-parsed JSON.
    pub async fn tick(&mut self) -> Result<TickReport, ControlError> {
        self.report = TickReport::default();
        self.tick_inner().await?;
        Ok(std::mem::take(&mut self.report))
    }

    async fn tick_inner(&mut self) -> Result<(), ControlError> {
        self.stats.ticks += 1;
        self.last_tick_at = Some(Instant::now());
        self.check_release_requests();
        self.settle_in_flight(None).await?;
        if self.caps.is_none() {
            match self.server.probe().await {
                Ok(caps) => {
                    self.caps = Some(caps);
                    self.just_reconnected = true;
                }
                Err(e) => return self.connection_down(e),
            }
            // The claim went with the old connection: take it again before acting.
            if !self.opts.dry_run {
                match self.server.claim().await {
                    Ok(None) => {}
                    Ok(Some(holder)) => return Err(ControlError::ServerClaimed { holder }),
                    Err(e) => return self.connection_lost(e),
                }
            }
        }
        let sample = match self.server.sample().await {
            Ok(s) => s,
            Err(e) if e.is_connection_lost() => return self.connection_lost(e),
            Err(e) => {
                self.stats.sample_errors += 1;
                self.telemetry.count_server_error(&e);
                tracing::warn!("sample failed: {e}");
                return Ok(());
            }
        };
        self.stats.samples_ok += 1;
        self.report.unix_ms = Some(sample.unix_ms);
        self.telemetry
            .observe_sample_duration(sample.duration_ms / 1000.0);
        self.last_sample_at = Some(Instant::now());
        // Compared with the last sample of the previous life we saw, so a restart during
        // an outage is noticed however short it was.
        let restarted = self
            .last_sample
            .as_ref()
            .is_some_and(|prev| crate::signals::looks_restarted(prev, &sample));
        self.last_sample = Some(sample.clone());
        if self.just_reconnected || restarted {
            let reprobed = std::mem::take(&mut self.just_reconnected);
            let down_ms = self
                .lost_since
                .take()
                .map(|t| t.elapsed().as_millis() as u64)
                .unwrap_or(0);
            self.emit(Event::ConnectionRegained {
                server_restarted: restarted,
                down_ms,
            });
            if restarted {
                // SET GLOBAL does not survive a restart: nothing of innopilot's is in
                // effect any more. The values the server came up with are the new
                // baseline. Capabilities are re-read too (it may have been upgraded),
                // unless this tick's reconnect just did.
                if !reprobed {
                    match self.server.probe().await {
                        Ok(c) => self.caps = Some(c),
                        Err(e) => return self.connection_lost(e),
                    }
                }
                self.rebaseline(sample.knobs.clone())?;
                self.window.reset();
                self.window.push(sample);
                return Ok(());
            }
            if self.gave_up {
                // innopilot gave up on this server while it was away: put the baseline
                // back before doing anything else, then start afresh.
                self.gave_up = false;
                self.restore(RestoreTrigger::GiveUp, &sample.knobs, None)
                    .await;
                self.expected = self.actuator.baseline().clone();
                self.window.reset();
                return Ok(());
            }
        }
        self.reconcile(&sample.knobs);
        let signals = self.window.push(sample);
        self.last_signals = Some(signals.clone());
        self.note_purge_blocking(&signals);
        self.decide_and_act(&signals).await
    }

    fn rebaseline(&mut self, live: KnobValues) -> Result<(), ControlError> {
        self.actuator.rebaseline(live.clone(), unix_ms_now())?;
        self.expected = live.clone();
        self.last_live = live;
        self.uncertain.clear();
        for p in &mut self.policies {
            p.reset();
        }
        Ok(())
    }

    fn connection_lost(&mut self, e: ServerError) -> Result<(), ControlError> {
        if self.lost_since.is_none() {
            self.lost_since = Some(Instant::now());
            tracing::warn!("connection lost: {e}");
            self.emit(Event::ConnectionLost {
                error: e.to_string(),
            });
        }
        self.caps = None;
        self.window.reset();
        for p in &mut self.policies {
            p.reset();
        }
        self.connection_down(e)
    }

    fn connection_down(&mut self, e: ServerError) -> Result<(), ControlError> {
        self.stats.sample_errors += 1;
        self.telemetry.count_server_error(&e);
        let since = *self.lost_since.get_or_insert_with(Instant::now);
        let down_for = since.elapsed();
        tracing::debug!("server unreachable for {:?}: {e}", down_for);
        if down_for > self.cfg.control.reconnect_budget && !self.gave_up {
            self.gave_up = true;
            let changed = !self.actuator.last_set().is_empty();
            self.emit(Event::Warning {
                message: format!(
                    "no connection for {}; {}",
                    humantime::format_duration(self.cfg.control.reconnect_budget),
                    if changed {
                        "the baseline will be restored when the server returns"
                    } else {
                        "nothing of innopilot's is in effect"
                    }
                ),
            });
            if self.cfg.control.on_server_lost == OnServerLost::Exit {
                return Err(ControlError::GaveUp(self.cfg.control.reconnect_budget));
            }
        }
        Ok(())
    }

    /// Notices changes innopilot did not make.
    fn reconcile(&mut self, live: &KnobValues) {
        let dry_run = self.opts.dry_run;
        let mut overridden = Vec::new();
        for (knob, &seen) in live {
            if !self.cfg.limits(*knob).manage || self.guard.is_operator_owned(*knob) {
                continue;
            }
            // A resize under way shows the old size until the server adopts the new one.
            if self.in_flight.as_ref().is_some_and(|f| f.knob == *knob) {
                continue;
            }
            if let Some((before, intended)) = self.uncertain.remove(knob) {
                if seen == before || seen == intended {
                    self.expected.insert(*knob, seen);
                    continue;
                }
            }
            let reference = if dry_run {
                self.last_live.get(knob)
            } else {
                self.expected.get(knob)
            };
            if let Some(&expected) = reference {
                if expected != seen {
                    overridden.push((*knob, expected, seen));
                }
            }
        }
        self.last_live = live.clone();
        for (knob, expected, seen) in overridden {
            let now = self.last_signals.as_ref().map(|s| s.t_ms).unwrap_or(0);
            self.guard.mark_operator_owned(knob, now, seen, expected);
            self.actuator
                .set_operator_owned(knob, Some(seen), unix_ms_now());
            self.expected.insert(knob, seen);
            tracing::warn!(%knob, expected, seen, "changed by someone else: innopilot leaves it alone until `innopilot release {knob}` or a restart");
            self.emit(Event::OperatorOverride {
                knob,
                expected,
                seen,
            });
        }
    }

    fn check_release_requests(&mut self) {
        let path = release_path(&self.cfg.control.state_file);
        // Not through a link: whatever a link points to is not a request.
        let Ok(mut f) =
            crate::control::state::open_nofollow(&path, std::fs::OpenOptions::new().read(true))
        else {
            return;
        };
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut f, &mut text);
        let _ = std::fs::remove_file(&path);
        for name in text.split_whitespace() {
            let Some(knob) = Knob::from_var_name(name) else {
                continue;
            };
            if self.guard.release(knob) {
                self.actuator.set_operator_owned(knob, None, unix_ms_now());
                // The operator's value is what the server should return to from now
                // on; policies start over so the hand-back causes no bump.
                if let Some(&live) = self.last_live.get(&knob) {
                    if let Err(e) = self.actuator.set_baseline_value(knob, live, unix_ms_now()) {
                        tracing::warn!("state file: {e}");
                    }
                    self.expected.insert(knob, live);
                }
                for p in &mut self.policies {
                    p.reset();
                }
                self.emit(Event::Released {
                    knob,
                    reason:
                        "handed back by `innopilot release`; its current value is now its baseline"
                            .into(),
                });
            }
        }
    }

    /// Records in the audit log when a read view starts or stops blocking purge, with
    /// the culprit: the purge policy's "no delay" is otherwise silent (a no-op).
    fn note_purge_blocking(&mut self, signals: &Signals) {
        let est = crate::signals::purge::estimate(signals, self.cfg.policy.purge_rate.min_view_age);
        let now = est
            .as_ref()
            .filter(|e| e.is_blocked())
            .and_then(|e| e.culprit.as_ref().map(|c| (e, c)));
        let now_id = now.map(|(_, c)| c.trx_id.clone());
        if now_id == self.blocked_by {
            return;
        }
        if let Some(prev) = self.blocked_by.take() {
            let history = signals.history_len.unwrap_or(0);
            self.emit(Event::PurgeUnblocked {
                trx_id: prev,
                history,
            });
        }
        if let Some((e, c)) = now {
            tracing::warn!(
                "purge is blocked by a read view, presumably {} ({}): no DML delay for that history",
                c.describe(),
                c.evidence
            );
            self.emit(Event::PurgeBlocked {
                trx_id: c.trx_id.clone(),
                thread_id: c.thread_id,
                user: c.user.clone(),
                host: c.host.clone(),
                age_s: c.age_s,
                history: e.history,
                blocked: e.blocked,
                purgeable: e.purgeable,
                evidence: c.evidence.clone(),
            });
        }
        self.blocked_by = now_id;
    }

    async fn decide_and_act(&mut self, signals: &Signals) -> Result<(), ControlError> {
        let Some(caps) = self.caps.clone() else {
            return Ok(());
        };
        let baseline = self.actuator.baseline().clone();
        let current = self.expected.clone();
        let input = PolicyInput {
            signals,
            caps: &caps,
            current: &current,
            baseline: &baseline,
        };
        let plan = plan::plan(
            self.policies.iter_mut().map(|p| &mut **p),
            &input,
            &self.guard,
        );
        let t_ms = signals.t_ms;
        let learned = crate::policy::learned(&self.policies);
        if let Err(e) = self.actuator.remember(learned, signals.sample.unix_ms) {
            // Only a measurement is lost: the next SET's write of the same file is
            // the one that guards the server, and it fails loudly.
            self.telemetry.count_error("state_file");
            let message = format!("could not save what innopilot measured to the state file: {e}");
            tracing::warn!("{message}");
            self.emit(Event::Warning { message });
        }
        for held in plan.unchanged {
            self.last_reject.remove(&held.knob);
            let rules = hold_rules(&held.decision, &held.notes);
            if !self.explained.wants(held.knob, &rules, t_ms) {
                continue;
            }
            self.explained.note(held.knob, rules, t_ms);
            let reason = held.decision.winner.reason.clone();
            let rec = decision_event(
                &held.decision,
                held.current,
                held.current,
                false,
                None,
                Outcome::NoChange,
                reason,
                held.notes,
                signals,
            );
            self.emit(rec);
        }
        for r in plan.refused {
            // A refusal is audited once per kind, not every tick a dwell or rate
            // limit holds it back.
            let key = format!(
                "{}:{}",
                r.decision.winner.value,
                r.reason.split(';').next().unwrap_or("")
            );
            let kind_key = format!("{:?}", Some(r.kind));
            if self
                .last_reject
                .get(&r.knob)
                .map(|k| k.starts_with(&kind_key))
                != Some(true)
            {
                self.last_reject.insert(r.knob, format!("{kind_key} {key}"));
                self.explained
                    .note(r.knob, hold_rules(&r.decision, &[]), t_ms);
                let rec = decision_event(
                    &r.decision,
                    r.current,
                    r.current,
                    false,
                    None,
                    Outcome::Rejected,
                    r.reason,
                    vec![],
                    signals,
                );
                self.emit(rec);
            }
        }
        for change in plan.changes {
            self.last_reject.remove(&change.knob);
            self.explained.note(
                change.knob,
                hold_rules(&change.decision, &change.notes),
                t_ms,
            );
            let plan::Change {
                knob,
                from,
                to,
                notes,
                decision: d,
            } = change;
            // Like the state file, the audit trail comes before the change: a SET
            // whose record could not be written is not sent.
            if !self.opts.dry_run {
                if let Err(e) = self.audit.reserve(AUDIT_RESERVE) {
                    self.telemetry.count_error("audit");
                    tracing::error!("not changing {knob} ({from} -> {to}): the change could not be audited: {e}");
                    continue;
                }
            }
            self.stats.decisions += 1;
            if knob.is_blocking() && !self.opts.dry_run {
                self.start_blocking(knob, from, to, notes, d, signals)
                    .await?;
                continue;
            }
            let result = self
                .actuator
                .apply(&mut self.server, knob, to, signals.sample.unix_ms)
                .await;
            self.finish_change(knob, from, to, notes, &d, signals, result, Via::Sampling)?;
            if self.caps.is_none() {
                // The connection was lost: nothing more this tick.
                return Ok(());
            }
        }
        Ok(())
    }

    /// Audits a change's outcome and updates what innopilot expects in effect.
    /// `via`: where the SET ran ([`Via`]).
    #[allow(clippy::too_many_arguments)]
    fn finish_change(
        &mut self,
        knob: Knob,
        from: u64,
        to: u64,
        notes: Vec<String>,
        d: &crate::policy::arbiter::Decision,
        signals: &Signals,
        result: Result<Applied, ActuatorError>,
        via: Via,
    ) -> Result<(), ControlError> {
        match result {
            Ok(applied) => {
                self.guard.record_applied(signals.t_ms, knob, from);
                self.expected.insert(knob, applied.readback);
                let outcome = if self.opts.dry_run {
                    Outcome::DryRun
                } else {
                    self.stats.sets_applied += 1;
                    Outcome::Applied
                };
                let ev = decision_event(
                    d,
                    from,
                    to,
                    !self.opts.dry_run,
                    (!self.opts.dry_run).then_some(applied.readback),
                    outcome,
                    d.winner.reason.clone(),
                    notes,
                    signals,
                );
                self.emit(via.stamp(ev));
                let base = self.baseline().get(&knob).copied();
                if let (false, Some(msg)) = (
                    self.opts.dry_run,
                    base.and_then(|b| redo_grown_advice(knob, b, applied.readback)),
                ) {
                    tracing::warn!("{msg}");
                    self.emit(Event::Warning { message: msg });
                }
                Ok(())
            }
            Err(ActuatorError::State { source, .. }) => {
                let reason = format!("state file not writable: {source}");
                self.emit(failed_event(d, from, to, reason, notes, signals));
                self.telemetry.count_error("state_file");
                Err(ControlError::State(source))
            }
            Err(ActuatorError::Server(e)) => {
                self.stats.sets_failed += 1;
                self.telemetry.count_server_error(&e);
                // The SET may or may not have happened: the next sample's value
                // decides, before any further decision on this knob.
                self.uncertain.insert(knob, (from, to));
                self.expected.insert(knob, from);
                let reason = format!("{}: {e}", d.winner.reason);
                self.emit(via.stamp(failed_event(d, from, to, reason, notes, signals)));
                if matches!(via, Via::Sampling) && e.is_connection_lost() {
                    return self.connection_lost(e);
                }
                Ok(())
            }
        }
    }

    /// Starts a blocking SET (a redo resize) on a session of its own and goes on: the
    /// loop samples and decides while the server works, and a later tick audits the
    /// outcome ([`Controller::settle_in_flight`]). A SET that is over at once (the
    /// simulator, a refused connection) is audited now.
    async fn start_blocking(
        &mut self,
        knob: Knob,
        from: u64,
        to: u64,
        notes: Vec<String>,
        d: crate::policy::arbiter::Decision,
        signals: &Signals,
    ) -> Result<(), ControlError> {
        if self.in_flight.is_some() {
            // One at a time; the knob's own dwell normally sees to it.
            return Ok(());
        }
        let started = self
            .actuator
            .start(&mut self.server, knob, to, signals.sample.unix_ms)
            .await;
        let mut pending = match started {
            Ok(Some(p)) => p,
            Ok(None) => return Ok(()),
            Err(e) => {
                return self.finish_change(
                    knob,
                    from,
                    to,
                    notes,
                    &d,
                    signals,
                    Err(e),
                    Via::Sampling,
                )
            }
        };
        if let Some(result) = poll_now(&mut pending.set) {
            let result = result
                .map_err(ActuatorError::Server)
                .and_then(|rb| self.actuator.settle(knob, to, rb, unix_ms_now()));
            return self.finish_change(knob, from, to, notes, &d, signals, result, Via::AtOnce);
        }
        // Under way: the dwell counts from now, and the policies see the value asked
        // for, so that they do not ask again.
        self.guard.record_applied(signals.t_ms, knob, from);
        self.expected.insert(knob, to);
        tracing::info!(%knob, from, to, "started on a session of its own; sampling goes on meanwhile");
        self.in_flight = Some(InFlight {
            knob,
            from,
            to,
            notes,
            decision: d,
            signals: signals.clone(),
            sent_unix_ms: self.event_unix_ms(),
            session_id: pending.session_id,
            task: tokio::spawn(pending.set),
        });
        Ok(())
    }

    /// Audits a blocking SET that has ended; with `wait`, waits that long for it first.
    async fn settle_in_flight(&mut self, wait: Option<Duration>) -> Result<(), ControlError> {
        let Some(f) = self.in_flight.as_mut() else {
            return Ok(());
        };
        if wait.is_none() && !f.task.is_finished() {
            // Let it run: a loop whose server answers at once (the simulator) never
            // waits, and a single-threaded runtime would otherwise never poll it.
            tokio::task::yield_now().await;
        }
        let joined = match wait {
            None if !f.task.is_finished() => return Ok(()),
            None => (&mut f.task).await,
            Some(w) => match tokio::time::timeout(w, &mut f.task).await {
                Ok(j) => j,
                Err(_) => return Ok(()),
            },
        };
        let Some(f) = self.in_flight.take() else {
            return Ok(());
        };
        let result = match joined {
            // MariaDB answers a resize it abandoned (the statement stopped by `KILL
            // QUERY` or by its max_statement_time) with OK and the old size
            // (tests/redo_resize.rs).
            Ok(Ok(readback)) if readback == f.from && f.to != f.from => {
                Err(ActuatorError::Server(ServerError::Query {
                    what: "resizing the redo log",
                    message: format!(
                        "the server ended it with {} still {readback}: abandoned (stopped, \
                         or past server.resize_timeout)",
                        f.knob
                    ),
                }))
            }
            Ok(Ok(readback)) => self.actuator.settle(f.knob, f.to, readback, unix_ms_now()),
            Ok(Err(e)) => Err(ActuatorError::Server(e)),
            Err(e) => Err(ActuatorError::Server(ServerError::Unexpected {
                what: "a redo resize",
                detail: e.to_string(),
            })),
        };
        self.finish_change(
            f.knob,
            f.from,
            f.to,
            f.notes,
            &f.decision,
            &f.signals,
            result,
            Via::Session {
                sent_unix_ms: f.sent_unix_ms,
            },
        )
    }
}

/// Operations hooks: the snapshot behind `/metrics` and the health endpoints, and
/// configuration reload (SIGHUP).
impl<S: Server> Controller<S> {
    /// Publishes a [`Snapshot`] to `tx` now and after every tick from now on.
    pub fn publish_to(&mut self, tx: watch::Sender<Arc<Snapshot>>) {
        self.publisher = Some(tx);
        self.publish(Phase::Running);
    }

    fn publish(&mut self, phase: Phase) {
        if let Some(c) = &self.caps {
            self.server_label = Some(format!("{} {}", c.identity.flavor, c.identity.version));
        }
        let Some(tx) = &self.publisher else {
            return;
        };
        let connected = self.caps.is_some() && self.lost_since.is_none();
        let snapshot = Snapshot {
            phase,
            dry_run: self.opts.dry_run,
            connected,
            last_sample: self.last_sample_at,
            last_tick: self.last_tick_at,
            server: self.server_label.clone(),
            // Signals from before a lost connection describe a server that is gone.
            signals: if connected {
                self.last_signals.clone()
            } else {
                None
            },
            knobs: self.expected.clone(),
            baseline: self.actuator.baseline().clone(),
            managed: Knob::ALL
                .into_iter()
                .filter(|k| self.cfg.limits(*k).manage)
                .collect(),
            operator_owned: self.guard.operator_owned().map(|(k, _)| k).collect(),
            ticks: self.stats.ticks,
            samples_ok: self.stats.samples_ok,
            sample_errors: self.stats.sample_errors,
            sets_applied: self.stats.sets_applied,
            sets_failed: self.stats.sets_failed,
            telemetry: self.telemetry.clone(),
            interval: self.cfg.sampler.interval,
        };
        tx.send_replace(Arc::new(snapshot));
    }

    fn count_event(&mut self, event: &Event) {
        if let Event::Decision {
            policy,
            knob,
            outcome,
            ..
        } = event
        {
            self.telemetry
                .count_decision(policy, *knob, outcome.as_str());
        }
        self.telemetry.count_event(event.name());
    }

    /// Applies a new, validated configuration between ticks: guard limits, policies
    /// (rebuilt, so their state starts over, only when `[policy.*]` changed), the
    /// sampler's interval and window. What only a restart can change (`[server]`,
    /// `[audit]`, `[http]`, `control.state_file`, `control.dry_run`) keeps its running
    /// value and is named in the log. Returns those notes.
    pub fn reload(&mut self, new: Config, source: &str) -> Vec<String> {
        let old = &self.cfg;
        let mut notes = Vec::new();
        let mut fixed = |changed: bool, what: &str| {
            if changed {
                notes.push(format!("{what} changed: takes effect at the next restart"));
            }
        };
        fixed(new.server != old.server, "[server]");
        fixed(new.audit != old.audit, "[audit]");
        fixed(new.http != old.http, "[http]");
        fixed(
            new.control.state_file != old.control.state_file,
            "control.state_file",
        );
        fixed(
            new.control.dry_run != old.control.dry_run,
            "control.dry_run",
        );
        let mut cfg = new;
        cfg.server = old.server.clone();
        cfg.audit = old.audit.clone();
        cfg.http = old.http.clone();
        cfg.control.state_file = old.control.state_file.clone();
        cfg.control.dry_run = old.control.dry_run;
        for knob in Knob::ALL {
            if old.limits(knob).manage && !cfg.limits(knob).manage {
                if let Some(v) = self.actuator.last_set().get(&knob) {
                    notes.push(format!(
                        "{knob} is no longer managed: it keeps {v} until innopilot exits and restores its baseline"
                    ));
                }
            }
        }
        self.guard
            .set_limits(cfg.knobs.clone(), cfg.control.max_sets_per_minute);
        if cfg.policy != old.policy {
            // New policies, the same machine: what the old ones measured carries over.
            let learned = crate::policy::learned(&self.policies);
            self.policies = crate::policy::build(&cfg.policy);
            crate::policy::recall(&mut self.policies, &learned);
        }
        if cfg.sampler.window != old.sampler.window {
            self.window = SignalWindow::new(cfg.sampler.window);
        }
        self.cfg = cfg;
        self.telemetry.reloads_ok += 1;
        self.telemetry.last_reload_ok = true;
        tracing::info!(source, "configuration reloaded");
        for n in &notes {
            tracing::warn!("{n}");
        }
        notes
    }

    /// Records a reload that was refused (unreadable or invalid file): the running
    /// configuration stays; the log and the audit log say why.
    pub fn reload_rejected(&mut self, source: &str, error: &str) {
        self.telemetry.reloads_failed += 1;
        self.telemetry.last_reload_ok = false;
        let message = format!(
            "configuration reload from {source} refused, the running configuration stays: {error}"
        );
        tracing::error!("{message}");
        self.emit(Event::Warning { message });
    }

    /// The configuration in effect.
    pub fn config(&self) -> &Config {
        &self.cfg
    }
}

/// What `saved` remembers of the machine, when it was written for the server connected
/// now: a device measured behind another server's data directory says nothing here.
fn recallable<S: Server>(
    saved: Option<&StateFile>,
    server: &S,
    target: &str,
) -> Option<crate::control::state::Remembered> {
    saved
        .filter(|s| recovery::same_server(s, server, target))
        .and_then(|s| s.learned)
}

fn quote_account(account: &str) -> String {
    match account.split_once('@') {
        Some((u, h)) => format!("'{u}'@'{h}'"),
        None => format!("'{account}'"),
    }
}

/// Writes one audit record; false (after logging why) when it could not be written.
fn emit(audit: &mut AuditLog, mode: Mode, unix_ms: u64, event: Event) -> bool {
    let rec = Record::new(unix_ms, mode, event);
    if let Err(e) = audit.write(&rec) {
        tracing::warn!("audit log: {e}");
        return false;
    }
    true
}

/// What the operator is told once a redo grow is in effect: it lasts only until
/// innopilot puts the baseline back (at an exit while users write little; after quiet
/// time too with `[policy.flush] redo_shrink`) or the server restarts, and
/// a burst that finds the smaller log stalls whatever innopilot does then, because a
/// grow sent during a burst is adopted only once the checkpoint passes its LSN, after
/// the burst's hot set has been written once (docs/policies.md, "What a resize at
/// 100 % fill does"). Only the server's own configuration removes that first stall.
/// `None` for any other change. Built from the knob's name and integers only.
fn redo_grown_advice(knob: Knob, baseline: u64, now: u64) -> Option<String> {
    if !knob.is_blocking() || now <= baseline {
        return None;
    }
    const MIB: u64 = 1 << 20;
    let size = |b: u64| {
        if b % MIB == 0 {
            format!("{}M", b / MIB)
        } else {
            b.to_string()
        }
    };
    Some(format!(
        "{knob} is now {} against the server's own {}, grown because the fill reached \
         the maximum checkpoint age. innopilot puts {} back when it exits while users \
         write little (after quiet time too with [policy.flush] redo_shrink), and a \
         restart brings it back too; \
         the first burst that finds the smaller log \
         stalls until its pages are written once, since a grow sent during a burst is \
         adopted only after that. Where such bursts recur, set {knob} = {} under \
         [mysqld] in the server's option file, and agree the disk and recovery time \
         it costs.",
        size(now),
        size(baseline),
        size(baseline),
        size(now),
    ))
}

/// A decision whose SET was not made or failed.
fn failed_event(
    d: &crate::policy::arbiter::Decision,
    from: u64,
    to: u64,
    reason: String,
    notes: Vec<String>,
    signals: &Signals,
) -> Event {
    decision_event(
        d,
        from,
        to,
        false,
        None,
        Outcome::Failed,
        reason,
        notes,
        signals,
    )
}

#[allow(clippy::too_many_arguments)]
fn decision_event(
    d: &crate::policy::arbiter::Decision,
    from: u64,
    to: u64,
    applied: bool,
    readback: Option<u64>,
    outcome: Outcome,
    reason: String,
    guard_notes: Vec<String>,
    signals: &Signals,
) -> Event {
    Event::Decision {
        policy: d.winner.policy.name().to_string(),
        knob: d.winner.knob,
        from,
        to,
        proposed: d.winner.value,
        applied,
        readback,
        outcome,
        reason,
        guard_notes,
        lost_to: d.lost_to(),
        held_by: held_by(d),
        signals: compact_signals(signals),
        sent_unix_ms: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grown_redo_is_worth_keeping_in_the_option_file() {
        let msg = redo_grown_advice(Knob::LogFileSize, 128 << 20, 1152 << 20).unwrap();
        assert!(
            msg.starts_with("innodb_log_file_size is now 1152M against the server's own 128M"),
            "{msg}"
        );
        assert!(
            msg.contains("set innodb_log_file_size = 1152M under [mysqld]"),
            "{msg}"
        );
        // A size that is not whole MiB is written in bytes, which the option file takes.
        let msg = redo_grown_advice(Knob::RedoLogCapacity, 100 << 20, (200 << 20) + 4096).unwrap();
        assert!(
            msg.contains(&format!(
                "set innodb_redo_log_capacity = {} under",
                (200u64 << 20) + 4096
            )),
            "{msg}"
        );
    }

    #[test]
    fn only_a_grow_of_the_redo_gets_the_advice() {
        assert_eq!(
            redo_grown_advice(Knob::LogFileSize, 1 << 30, 128 << 20),
            None
        );
        assert_eq!(redo_grown_advice(Knob::LogFileSize, 1 << 30, 1 << 30), None);
        assert_eq!(redo_grown_advice(Knob::IoCapacityMax, 200, 2000), None);
    }
}
