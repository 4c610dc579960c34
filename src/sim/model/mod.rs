//! The InnoDB model: discrete time (a scenario's step, 100 ms by default), driven one
//! sample interval (1 s of virtual time) per [`Server::sample`] call, so the real
//! [`Controller`](crate::control::Controller) ticking in a loop drives virtual time and
//! nothing ever sleeps.
//!
//! What one step does, in order (docs/simulator.md has the equations and constants;
//! `Model::step` calls one function a stage):
//!
//! 1. arrivals: open loop, `peak_tps × load(t)`, Poisson-like noise;
//! 2. the DML delay of the flavor (MySQL: by history size; MariaDB: only while purge
//!    handles pages) lengthens every write; a transaction's reads are its scenario's
//!    at the default free list, scaled by the misses of the pages the free list the
//!    page cleaner keeps now leaves to caching (MariaDB, innodb_lru_scan_depth);
//! 3. purge's wish: per-thread rate (batch-size efficiency), its CPU then its reads
//!    a record (its index reads scaled as the users'), read-bound on cold undo, never
//!    past the oldest read view;
//! 4. the read cap and the CPU: a read cap is shared by how fast each side asks, then
//!    foreground and purge share `cores`; when both want more than there is, purge
//!    gets its fair share by thread count (purge threads vs. runnable clients);
//! 5. flushing: by redo fill region (background, adaptive from the low-water mark by
//!    the page cleaner's io_capacity_max · F^1.5 / 750, batches of io_capacity_max past
//!    the async point, the whole device past the sync point),
//!    limited by the device after reads; the oldest dirty pages first (the flush
//!    list), so the checkpoint is the oldest modification left; a MariaDB redo resize
//!    flushes toward its LSN and is adopted once the checkpoint passes it;
//! 6. sync flush: work that would push checkpoint age past the sync point waits
//!    (MariaDB: throttled to the pace flushing frees redo; MySQL: stalled until age is
//!    back at the async point);
//! 7. undo tablespaces grow with live undo and, with truncation on, one at a time is set
//!    aside above `innodb_max_undo_log_size` and truncated once purge has emptied it.
//!
//! The model records its own truth once per virtual second ([`Second`]), whatever the
//! controller sees.
//!
//! This file owns the state and the step. The rest reads or changes it from outside the
//! step: `surface` (what `SHOW GLOBAL STATUS`, the variables and the processlist say),
//! `knobs` (a `SET GLOBAL`, and the redo resize it starts), `server` ([`SimServer`], the
//! `Server` trait), `tests`.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Poll, Waker};
use std::time::Duration;

use serde::Serialize;

use crate::server::flavor::{
    build_knob_caps, signal_sources, ReplicaSource, ServerIdentity, UndoSource, VariableMeta,
};
use crate::server::sample::{build_sample, MetricRows, RowKind, Sample, TrxInfo};
use crate::server::{
    Capabilities, Globals, HistoryWait, Knob, KnobValues, PendingSet, Server, ServerError,
    SessionInfo,
};

use super::scenario::{Hardware, Scenario, SimFlavor, Workload};
use super::Rng;

/// The flush list's length before neighbouring entries merge.
const FLUSH_LIST_ENTRIES: usize = 8_192;

/// `buf_pool.read_ahead_area` for 16 KiB pages: the area innodb_flush_neighbors = 1
/// writes dirty neighbours from (buf0flu.cc `buf_flush_try_neighbors()`).
const NEIGHBOR_AREA_PAGES: f64 = 64.0;

/// MariaDB's default innodb_lru_scan_depth, the free list `Workload::reads_per_trx`
/// is measured at.
const LRU_SCAN_DEPTH_DEFAULT: f64 = 1536.0;

/// The server's minimum innodb_lru_scan_depth.
const LRU_SCAN_DEPTH_MIN: f64 = 100.0;

/// Virtual wall clock at t = 0 (2024-01-01T00:00:00Z), so audit records of a simulated
/// run carry deterministic timestamps.
pub const EPOCH_UNIX_MS: u64 = 1_704_067_200_000;

/// Per-batch overhead in undo pages: efficiency = batch / (batch + this). Own
/// assumption (coordination and latching per batch).
pub const PURGE_BATCH_OVERHEAD: f64 = 30.0;
/// TPS loss while one undo tablespace is set aside for truncation, divided among the
/// undo tablespaces: seed 002 measured 15 % with 2 and ~3 % with 8 tablespaces.
pub const TRUNCATE_PENALTY: f64 = 0.30;
/// Foreground stall when an undo tablespace is truncated (file operation plus the
/// flush of its pages). Own assumption; WL#6965 calls it "a millisecond operation".
pub const TRUNCATE_STALL_S: f64 = 0.1;
/// Size an undo tablespace starts at and is truncated back to.
pub const UNDO_INITIAL_BYTES: f64 = 10.0 * 1_048_576.0;
/// ln(100): the 99th percentile of an exponential distribution is 4.6 × its mean.
const P99_OF_MEAN: f64 = 4.605;
/// Seconds of arrivals a foreground queue holds before clients give up.
const BACKLOG_LIMIT_S: f64 = 60.0;
/// Device utilisation above which queueing no longer grows read latency (cap 10×).
const MAX_DEVICE_UTIL: f64 = 0.9;

/// Process-list ids of the simulated sessions: the scenario's read views (one each,
/// from `VIEW_SESSION_BASE`), the application's connection, and the sessions opened
/// for purge waits.
const VIEW_SESSION_BASE: u64 = 1000;
const APP_SESSION: u64 = 10;
const WAIT_SESSION_BASE: u64 = 2000;
/// What a held read view runs, as the process list shows it.
const VIEW_STATEMENT: &str =
    "SELECT customer_id, SUM(amount) FROM orders GROUP BY customer_id /* nightly report */";
const APP_STATEMENT: &str = "UPDATE sbtest1 SET k = k + 1 WHERE id = 5021";
/// How often a server-side purge wait looks at the history (MariaDB: every 100 ms).
const WAIT_CHECK: Duration = Duration::from_millis(100);

/// The model's own record of one virtual second.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Second {
    /// End of the second, seconds since the start of the run.
    pub t_s: u64,
    /// Transactions that arrived.
    pub offered_tps: f64,
    /// Transactions completed.
    pub throughput_tps: f64,
    /// p99 latency proxy, ms (worst step of the second; see docs/simulator.md).
    pub latency_p99_ms: f64,
    /// Transactions waiting for a connection at the end of the second.
    pub backlog: f64,
    /// Transactions whose clients gave up (waited past 60 s).
    pub dropped: f64,
    pub history: f64,
    /// History older than the oldest read view: what purge could remove now.
    pub purgeable: f64,
    /// Records purged.
    pub purge_rate: f64,
    pub undo_bytes: f64,
    /// Checkpoint age / sync point (1.0 = users wait for flushing).
    pub redo_fill: f64,
    pub dirty_pages: f64,
    /// Pages flushed.
    pub flush_rate: f64,
    /// Seconds of this second the foreground waited for sync flushing or truncation.
    pub stalled_s: f64,
    /// DML delay in effect at the end of the second, µs per row.
    pub dml_delay_us: f64,
    pub replica_lag_s: f64,
    /// Cores purge used (average).
    pub purge_cores: f64,
    pub knobs: KnobValues,
}

/// History committed in one interval: purged from the front, in commit order.
#[derive(Debug, Clone)]
struct Bucket {
    /// Commit time (start of the step), seconds.
    t_s: f64,
    /// Records ever added up to and including this bucket (for O(log n) purgeable).
    cum_end: f64,
    left: f64,
    /// Undo tablespaces its records were spread over (bit i = tablespace i).
    mask: u32,
}

#[derive(Debug, Clone)]
struct UndoSpace {
    size: f64,
    /// Live undo records in it.
    live: f64,
    /// Set aside for truncation since (s): takes no new undo.
    marked_since: Option<f64>,
}

/// Per-second accumulators.
#[derive(Debug, Clone, Default)]
struct Acc {
    offered: f64,
    dropped: f64,
    done: f64,
    purged: f64,
    flushed: f64,
    stalled_s: f64,
    worst_latency_s: f64,
    purge_core_s: f64,
}

/// The simulated server.
#[derive(Debug, Clone)]
pub struct Model {
    sc: Scenario,
    flavor: SimFlavor,
    caps: Capabilities,
    /// Values the server starts with (and comes back with after a restart).
    startup: KnobValues,
    knobs: KnobValues,
    noise: Rng,
    step_s: f64,
    t_ms: u64,
    /// Uptime at the last restart origin: uptime = t − since.
    up_since_ms: u64,
    /// Uptime before the run started (the server was up before the scenario).
    uptime_offset_s: u64,
    restarts_done: usize,
    // Redo and flushing.
    lsn: f64,
    ckpt_age: f64,
    /// Dirty pages: the flush list's pages summed, kept for the step's arithmetic.
    dirty: f64,
    /// The flush list: dirty pages by the LSN of their first modification, oldest
    /// first (`(lsn, pages)`, one entry a step). Flushing takes the oldest, and the
    /// checkpoint is the oldest modification left, as `buf_pool.flush_list` and
    /// `log_checkpoint()` have it.
    flush_list: VecDeque<(f64, f64)>,
    pages_flushed: f64,
    dirty_rate_ema: f64,
    /// MySQL: waiting until checkpoint age is back at the async point.
    hard_stall: bool,
    /// Users waited for redo space in the last step (`log_free_check()`).
    held_last_step: bool,
    stall_run_s: f64,
    // Foreground.
    backlog: f64,
    rows_updated: f64,
    commits: f64,
    threads_running: f64,
    level_noise: f64,
    // Purge and undo.
    history: VecDeque<Bucket>,
    added_total: f64,
    purged_total: f64,
    cold: f64,
    purged_last_step: f64,
    spaces: Vec<UndoSpace>,
    system_undo: f64,
    truncations: u64,
    pending_truncate_stall_s: f64,
    // Device.
    reads_last_step: f64,
    /// Pages read since start (`Innodb_buffer_pool_reads`).
    pages_read: f64,
    util_prev: f64,
    dml_delay_us: f64,
    acc: Acc,
    log: Vec<Second>,
    // Sessions innopilot opened for a purge wait ([`Server::wait_for_history_at_most`]);
    // one that is no longer here was stopped by `kill_query`.
    wait_sessions: BTreeSet<u64>,
    /// The id of the next session innopilot opens (a purge wait or a redo resize).
    next_session: u64,
    /// A MariaDB redo resize under way ([`Model::start_resize`]).
    resize: Option<Resize>,
    /// How each resize session ended: the size read back, or the error its client saw.
    resize_outcomes: BTreeMap<u64, Result<u64, String>>,
}

/// The device as a step finds it.
struct DeviceNow {
    /// Every I/O a second, reads and writes.
    iops: f64,
    /// Reads a second capped apart from the writes (a cgroup's read_iops), if any.
    read_cap: Option<f64>,
    /// A read's latency, s.
    latency_s: f64,
}

/// What users ask of a step, before the read cap and the CPU split.
struct UserDemand {
    /// The offered rate, transactions a second.
    lambda: f64,
    /// Transactions that arrived this step.
    arrivals: f64,
    /// What the closed loops' sessions would run this step if nothing held them
    /// (`Scenario::closed_loops`): never queued.
    closed: f64,
    /// Transactions waiting to run: the backlog, the arrivals and the closed loops'.
    queued: f64,
    /// CPU a transaction, s.
    cpu_s: f64,
    /// A transaction's time with the device to itself, s.
    s_wall: f64,
    /// What the clients can carry at that time, transactions a second.
    x_conc: f64,
    /// The rate users ask at, transactions a second.
    rate: f64,
    /// Device reads a transaction, at the free list kept now (`Model::read_scale`).
    reads_per: f64,
}

/// What purge asks of a step at full CPU.
struct PurgeDemand {
    /// Records its threads would remove.
    want: f64,
    /// Reads a record costs (index pages, and cold undo pages for the cold share).
    reads_per: f64,
    /// Threads that can work at once.
    threads: f64,
    /// CPU a record, s.
    cpu_s: f64,
}

/// What the read cap and the cores let through in a step.
struct Served {
    /// Transactions users may finish, before the redo has its say.
    fg_want: f64,
    /// Records purge may remove, likewise.
    purge_want: f64,
    /// The rate users are served at, transactions a second.
    mu: f64,
    /// A transaction's time, its wait at the read cap included, s.
    s_wall: f64,
    /// Cores users take.
    cpu_f: f64,
}

/// What the page cleaner did in a step.
struct Flush {
    pages: f64,
    /// The checkpoint age once they were written.
    age_after: f64,
    async_pt: f64,
    sync_pt: f64,
}

/// Stage 4, the read cap and the CPU split: what users and purge may do this step.
///
/// A read cap (a cgroup's read_iops) is a hard limit shared by how fast each side asks
/// (`Model::device_now`): when users and purge ask for more reads than it serves, each
/// gets the share of it its demand asks for, so a purge thread more takes reads from
/// users and a DML delay, which slows the users' asking, gives their reads to purge
/// (the hundredth run: users 4 258 → 3 019 reads/s, the server's threads
/// 1 737 → 2 988, the cap full in both). The share applies before the CPU split: the
/// cores are shared by the work the cap lets through. When both want more CPU than
/// there is, purge gets its fair share by thread count (purge threads against
/// runnable clients).
fn serve(
    users: &UserDemand,
    purge: &PurgeDemand,
    dt: f64,
    w: &Workload,
    cores: f64,
    read_cap: Option<f64>,
) -> Served {
    let read_demand = users.rate * users.reads_per + purge.want / dt * purge.reads_per;
    let read_share = match read_cap {
        Some(cap) if read_demand > cap => cap / read_demand,
        _ => 1.0,
    };
    let (fg_rate, purge_want) = (users.rate * read_share, purge.want * read_share);
    // What a transaction takes, its wait at the cap included (Little's law).
    let (s_wall, x_conc) = (users.s_wall / read_share, users.x_conc * read_share);
    let cpu_p_demand = purge_want * purge.cpu_s / dt;
    let cpu_f_demand = fg_rate * users.cpu_s;
    let (cpu_f, cpu_p) = if cpu_f_demand + cpu_p_demand <= cores {
        (cpu_f_demand, cpu_p_demand)
    } else {
        // Runnable client threads: all of them when the foreground alone would fill
        // the CPU, proportionally fewer below.
        let runnable = (w.clients * (cpu_f_demand / cores).min(1.0)).clamp(1.0, w.clients);
        let fair = cores * purge.threads / (purge.threads + runnable);
        let p = cpu_p_demand.min(fair.max(cores - cpu_f_demand));
        (cpu_f_demand.min(cores - p), p)
    };
    let purge_frac = if cpu_p_demand > 0.0 {
        cpu_p / cpu_p_demand
    } else {
        1.0
    };
    let mu = x_conc.min(cpu_f / users.cpu_s.max(1e-12)).max(0.0);
    Served {
        fg_want: users.queued.min(mu * dt),
        purge_want: purge_want * purge_frac,
        mu,
        s_wall,
        cpu_f,
    }
}

/// A `SET GLOBAL innodb_log_file_size` under way on MariaDB ≥ 10.9:
/// `log_t::resize_start()` noted the LSN it began at and asked the page cleaner to
/// flush every page modified before it (`buf_flush_ahead(lsn, false)`, batches of
/// io_capacity_max); `log_t::write_checkpoint()` adopts the new size once the
/// checkpoint has passed that LSN, and only then does the statement return.
#[derive(Debug, Clone)]
struct Resize {
    session: u64,
    to: u64,
    lsn: f64,
    started_ms: u64,
    /// The statement's waiters (the session's future), woken when it ends.
    wakers: Vec<Waker>,
}

/// What [`Model::start_resize`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResizeStart {
    /// Nothing to wait for: the size read back (the same size, or an idle server).
    Done(u64),
    /// Under way on this session.
    Started(u64),
}

/// (async point, sync point) in bytes of checkpoint age for a redo of `capacity` bytes.
/// The arithmetic is `build_sample`'s, so the model stalls exactly where the sampled
/// fill says 1.0.
pub fn flush_points(flavor: SimFlavor, capacity: u64) -> (u64, u64) {
    match flavor {
        // Innodb_checkpoint_max_age ≈ 0.8 × innodb_log_file_size (measured 53 640 439
        // of 64 MiB); async flush-ahead from 7/8 of it.
        SimFlavor::MariaDb1011 => {
            let sync = (capacity as f64 * 0.7993) as u64;
            (sync / 8 * 7, sync)
        }
        // 7/8 and 15/16 of the soft capacity ≈ 0.78 and 0.83 of the capacity.
        SimFlavor::MySql80 => (capacity / 100 * 78, capacity / 100 * 83),
    }
}

/// The DML delay in µs per row operation, by flavor (REFERENCE.md "DML delay
/// formulas"). `handled_pages`: the last purge batch did work (MariaDB only).
pub fn dml_delay_us(
    flavor: SimFlavor,
    knobs: &KnobValues,
    history: f64,
    handled_pages: bool,
) -> f64 {
    let k = |knob| knobs.get(&knob).copied().unwrap_or(0) as f64;
    let (lag, cap) = (k(Knob::MaxPurgeLag), k(Knob::MaxPurgeLagDelay));
    if lag <= 0.0 {
        return 0.0;
    }
    match flavor {
        SimFlavor::MySql80 => {
            // trx_purge_dml_delay (8.0.14+): size only, purgeable or not.
            if history <= k(Knob::PurgeThreads) * k(Knob::PurgeBatchSize) {
                return 0.0;
            }
            let ratio = history / lag;
            if ratio > 1.0 {
                ((ratio - 0.9995) * 10_000.0).min(cap)
            } else {
                0.0
            }
        }
        SimFlavor::MariaDb1011 => {
            // trx_purge: set only when the batch handled pages.
            if !handled_pages || history <= lag {
                return 0.0;
            }
            (10_000.0 * history / lag - 5_000.0).clamp(0.0, cap)
        }
    }
}

fn meta(name: &str, read_only: Option<bool>, min: Option<u64>, max: Option<u64>) -> VariableMeta {
    VariableMeta {
        name: name.to_string(),
        value: None,
        read_only,
        min,
        max,
    }
}

/// The capability table a server of this flavor would produce at probe time.
pub fn capabilities(flavor: SimFlavor, replica: bool, undo_tablespaces: u32) -> Capabilities {
    let (version, comment) = match flavor {
        SimFlavor::MariaDb1011 => ("10.11.19-MariaDB-sim", "innopilot simulator"),
        SimFlavor::MySql80 => ("8.0.36-sim", "innopilot simulator (MySQL Community Server)"),
    };
    let identity = ServerIdentity::parse(version, comment).expect("valid version");
    let rows: Vec<VariableMeta> = match flavor {
        // MariaDB's information_schema.SYSTEM_VARIABLES reports READ_ONLY and ranges.
        SimFlavor::MariaDb1011 => vec![
            meta("innodb_purge_threads", Some(false), Some(1), Some(32)),
            meta("innodb_purge_batch_size", Some(false), Some(1), Some(5000)),
            meta(
                "innodb_max_purge_lag",
                Some(false),
                Some(0),
                Some(u32::MAX as u64),
            ),
            meta(
                "innodb_max_purge_lag_delay",
                Some(false),
                Some(0),
                Some(10_000_000),
            ),
            meta(
                "innodb_io_capacity",
                Some(false),
                Some(100),
                Some(u32::MAX as u64),
            ),
            meta(
                "innodb_io_capacity_max",
                Some(false),
                Some(100),
                Some(u32::MAX as u64),
            ),
            meta(
                "innodb_log_file_size",
                Some(false),
                Some(4 << 20),
                Some(512 << 30),
            ),
            meta("innodb_undo_log_truncate", Some(false), Some(0), Some(1)),
            meta(
                "innodb_max_undo_log_size",
                Some(false),
                Some(10 << 20),
                Some(u64::MAX),
            ),
            meta(
                "innodb_max_dirty_pages_pct_lwm",
                Some(false),
                Some(0),
                Some(99),
            ),
            meta("innodb_flush_neighbors", Some(false), Some(0), Some(2)),
            meta("innodb_lru_scan_depth", Some(false), Some(100), None),
        ],
        // MySQL reports neither: innopilot's table and the documented ranges apply.
        SimFlavor::MySql80 => Knob::ALL
            .iter()
            .map(|k| meta(k.var_name(), None, None, None))
            .collect(),
    };
    let knobs = build_knob_caps(&identity, &rows);
    let undo = match flavor {
        SimFlavor::MySql80 => UndoSource::InfoSchema,
        SimFlavor::MariaDb1011 => UndoSource::LocalFiles {
            paths: undo_file_names(undo_tablespaces)
                .into_iter()
                .map(|n| format!("(simulated)/{n}").into())
                .collect(),
        },
    };
    let replica = if replica {
        ReplicaSource::ShowReplicaStatus
    } else {
        ReplicaSource::NotReplica
    };
    Capabilities {
        signals: signal_sources(&identity, undo, replica),
        identity,
        knobs,
        can_set_global: true,
        account: "sim@localhost".into(),
    }
}

fn undo_file_names(n: u32) -> Vec<String> {
    if n == 0 {
        vec!["ibdata1".into()]
    } else {
        (1..=n).map(|i| format!("undo{i:03}")).collect()
    }
}

impl Model {
    /// A server of `flavor` running `scenario` (already realized for a seed), starting
    /// with `startup` knob values, with noise drawn from `seed`.
    pub fn new(scenario: &Scenario, flavor: SimFlavor, startup: KnobValues, seed: u64) -> Model {
        let sc = scenario.clone();
        let caps = capabilities(flavor, sc.replica, sc.undo_tablespaces);
        let spaces = (0..sc.undo_tablespaces)
            .map(|_| UndoSpace {
                size: UNDO_INITIAL_BYTES,
                live: 0.0,
                marked_since: None,
            })
            .collect();
        let mut m = Model {
            step_s: sc.step_ms.max(1) as f64 / 1000.0,
            flavor,
            caps,
            knobs: startup.clone(),
            startup,
            noise: Rng::derive(seed, &format!("noise/{}", sc.name)),
            t_ms: 0,
            up_since_ms: 0,
            uptime_offset_s: 86_400,
            restarts_done: 0,
            lsn: 1_000_000_000.0,
            ckpt_age: 0.0,
            dirty: 0.0,
            flush_list: VecDeque::new(),
            pages_flushed: 0.0,
            dirty_rate_ema: 0.0,
            hard_stall: false,
            held_last_step: false,
            stall_run_s: 0.0,
            backlog: 0.0,
            rows_updated: 0.0,
            commits: 0.0,
            threads_running: 0.0,
            level_noise: 0.0,
            history: VecDeque::new(),
            added_total: 0.0,
            purged_total: 0.0,
            cold: 0.0,
            purged_last_step: 0.0,
            spaces,
            system_undo: UNDO_INITIAL_BYTES,
            truncations: 0,
            pending_truncate_stall_s: 0.0,
            reads_last_step: 0.0,
            pages_read: 0.0,
            util_prev: 0.0,
            dml_delay_us: 0.0,
            acc: Acc::default(),
            log: Vec::new(),
            wait_sessions: BTreeSet::new(),
            next_session: WAIT_SESSION_BASE,
            resize: None,
            resize_outcomes: BTreeMap::new(),
            sc,
        };
        if m.sc.initial_history > 0.0 {
            m.add_history(m.sc.initial_history, -1.0);
            m.cold = m.sc.initial_cold.min(m.sc.initial_history);
            // That much undo was written before: the files are that big already.
            let bytes = m.sc.initial_history * m.sc.workload.undo_bytes_per_record;
            let n = m.spaces.len().max(1) as f64;
            for s in &mut m.spaces {
                s.size = s.size.max(bytes / n);
            }
            m.system_undo = m.system_undo.max(bytes);
        }
        m
    }

    pub fn flavor(&self) -> SimFlavor {
        self.flavor
    }

    pub fn scenario(&self) -> &Scenario {
        &self.sc
    }

    pub fn t_ms(&self) -> u64 {
        self.t_ms
    }

    pub fn knobs(&self) -> &KnobValues {
        &self.knobs
    }

    pub fn capabilities(&self) -> &Capabilities {
        &self.caps
    }

    /// The per-second record so far.
    pub fn seconds(&self) -> &[Second] {
        &self.log
    }

    pub fn take_seconds(&mut self) -> Vec<Second> {
        std::mem::take(&mut self.log)
    }

    /// Whether the scenario's duration has been simulated.
    pub fn finished(&self) -> bool {
        self.t_ms as f64 >= self.sc.duration_s * 1000.0
    }

    fn knob(&self, k: Knob) -> f64 {
        self.knobs.get(&k).copied().unwrap_or(0) as f64
    }

    /// Pages on the free list: while the pool evicts, MariaDB ≥ 10.5's page cleaner
    /// refills it to innodb_lru_scan_depth D once it falls under D/2
    /// (`buf_pool_t::need_LRU_eviction()`, `buf_flush_LRU_list_batch()`, buf0flu.cc),
    /// so it holds about 3/4 D (the hundred-and-fifth run: medians 0.61–0.90 D at
    /// 1 536, 1.0 D at 256, 0.70–0.72 D at 4 096); a pool that does not evict keeps
    /// what its working set leaves.
    fn free_list_pages(&self) -> f64 {
        let (w, hw) = (&self.sc.workload, &self.sc.hardware);
        if w.evicts(hw) && self.flavor == SimFlavor::MariaDb1011 {
            0.75 * self.knob(Knob::LruScanDepth).max(LRU_SCAN_DEPTH_MIN)
        } else {
            (hw.buffer_pool_pages - w.working_set_pages).max(0.0)
        }
    }

    /// Reads a transaction (and a purged record's index reads) at the free list kept
    /// now, against the one `reads_per_trx` was measured at (the default D): pages
    /// held free cache nothing, and a read on `read_set_pages` misses with probability
    /// 1 − cached / read_set. 1 where the scenario has no read set or the pool does
    /// not evict.
    fn read_scale(&self) -> f64 {
        let (w, hw) = (&self.sc.workload, &self.sc.hardware);
        if w.read_set_pages <= 0.0 || !w.evicts(hw) || self.flavor != SimFlavor::MariaDb1011 {
            return 1.0;
        }
        let miss = |free: f64| (1.0 - (hw.buffer_pool_pages - free) / w.read_set_pages).max(0.0);
        let at_default = miss(0.75 * LRU_SCAN_DEPTH_DEFAULT);
        if at_default <= 0.0 {
            return 1.0;
        }
        miss(self.free_list_pages()) / at_default
    }

    fn capacity(&self) -> u64 {
        self.knobs
            .get(&self.flavor.redo_knob())
            .copied()
            .unwrap_or(96 << 20)
    }

    pub fn history_len(&self) -> f64 {
        self.added_total - self.purged_total
    }

    /// Records committed before `limit_s` and not purged yet.
    fn purgeable_before(&self, limit_s: Option<f64>) -> f64 {
        let Some(limit) = limit_s else {
            return self.history_len();
        };
        let idx = self.history.partition_point(|b| b.t_s < limit);
        if idx == 0 {
            return 0.0;
        }
        (self.history[idx - 1].cum_end - self.purged_total).max(0.0)
    }

    fn active_mask(&self) -> u32 {
        let mut mask = 0;
        for (i, s) in self.spaces.iter().enumerate() {
            if s.marked_since.is_none() {
                mask |= 1 << i;
            }
        }
        mask
    }

    fn add_history(&mut self, n: f64, t_s: f64) {
        if n <= 0.0 {
            return;
        }
        self.added_total += n;
        let mask = self.active_mask();
        let k = mask.count_ones().max(1) as f64;
        for (i, s) in self.spaces.iter_mut().enumerate() {
            if mask & (1 << i) != 0 {
                s.live += n / k;
            }
        }
        // One bucket per virtual second keeps the queue short on long runs.
        if let Some(b) = self.history.back_mut() {
            if b.t_s.floor() == t_s.floor() && b.mask == mask {
                b.left += n;
                b.cum_end = self.added_total;
                return;
            }
        }
        self.history.push_back(Bucket {
            t_s,
            cum_end: self.added_total,
            left: n,
            mask,
        });
    }

    /// Purges up to `n` records committed before `limit_s`, oldest first.
    fn remove_history(&mut self, mut n: f64, limit_s: Option<f64>) -> f64 {
        let mut done = 0.0;
        while n > 1e-9 {
            let Some(front) = self.history.front_mut() else {
                break;
            };
            if limit_s.is_some_and(|l| front.t_s >= l) {
                break;
            }
            let take = n.min(front.left);
            front.left -= take;
            n -= take;
            done += take;
            let mask = front.mask;
            let k = mask.count_ones().max(1) as f64;
            if front.left <= 1e-9 {
                self.history.pop_front();
            }
            for (i, s) in self.spaces.iter_mut().enumerate() {
                if mask & (1 << i) != 0 {
                    s.live = (s.live - take / k).max(0.0);
                }
            }
        }
        self.purged_total += done;
        self.cold = (self.cold - done).max(0.0);
        done
    }

    fn undo_bytes(&self) -> f64 {
        if self.spaces.is_empty() {
            self.system_undo
        } else {
            self.spaces.iter().map(|s| s.size).sum()
        }
    }

    /// Flushes `pages` of the oldest dirty pages off the flush list and returns the
    /// checkpoint age that leaves: up to the oldest modification still dirty, or the
    /// whole age when nothing is left dirty.
    /// The share of a flush-list batch that is pages taken from its old end. With
    /// innodb_flush_neighbors on, on a device the server takes for rotational (MariaDB
    /// checks `space->is_rotational()`; MySQL does not), `buf_flush_try_neighbors()`
    /// (buf0flu.cc) writes with each such page the dirty pages of its area
    /// (`buf_pool.read_ahead_area`, 64 pages): under uniform updates, with a share d of
    /// the working set dirty, 1 + 63 · d pages per page the checkpoint waits for.
    /// Measured in tests/flush_neighbors.rs: with one row per page updated in random
    /// order, 32 % of the dirty pages written retired 0.4 % of the checkpoint age with
    /// neighbours, 21 % without.
    fn in_order_share(&self, hw: &Hardware, w: &Workload) -> f64 {
        let applies = match self.flavor {
            SimFlavor::MariaDb1011 => hw.rotational,
            SimFlavor::MySql80 => true,
        };
        if !applies || self.knob(Knob::FlushNeighbors) == 0.0 {
            return 1.0;
        }
        let ws = w.working_set_pages.min(hw.buffer_pool_pages).max(1.0);
        let d = (self.dirty / ws).clamp(0.0, 1.0);
        1.0 / (1.0 + (NEIGHBOR_AREA_PAGES - 1.0) * d)
    }

    /// Neighbours written with the oldest pages: taken evenly from the whole flush
    /// list, so they leave it without moving the checkpoint.
    fn flush_spread(&mut self, pages: f64) {
        let total: f64 = self.flush_list.iter().map(|c| c.1).sum();
        if pages <= 0.0 || total <= 0.0 {
            return;
        }
        let keep = (1.0 - pages / total).max(0.0);
        for c in self.flush_list.iter_mut() {
            c.1 *= keep;
        }
        self.flush_list.retain(|c| c.1 > 1e-9);
    }

    fn flush_oldest(&mut self, pages: f64) -> f64 {
        let mut left = pages;
        while left > 0.0 {
            let Some(front) = self.flush_list.front_mut() else {
                break;
            };
            if front.1 > left {
                front.1 -= left;
                break;
            }
            left -= front.1;
            self.flush_list.pop_front();
        }
        match self.flush_list.front() {
            Some(&(oldest, _)) => (self.lsn - oldest).max(0.0),
            None => 0.0,
        }
    }

    fn restart(&mut self) {
        if let Some(r) = self.resize.take() {
            self.end_resize(r, Err("Lost connection to server during query".into()));
        }
        self.up_since_ms = self.t_ms;
        self.uptime_offset_s = 0;
        self.knobs = self.startup.clone();
        self.ckpt_age = 0.0;
        self.dirty = 0.0;
        self.flush_list.clear();
        self.pages_flushed = 0.0;
        self.rows_updated = 0.0;
        self.commits = 0.0;
        self.backlog = 0.0;
        self.hard_stall = false;
        self.held_last_step = false;
        self.stall_run_s = 0.0;
        // History survives on disk, but none of its undo pages are cached any more.
        self.cold = self.history_len();
        self.dml_delay_us = 0.0;
        self.purged_last_step = 0.0;
    }

    /// Advances by one model step.
    /// One step: what users and purge ask for, what the read cap and the cores let
    /// through, what the page cleaner flushes, what the redo lets finish, and the
    /// bookkeeping of the work done (the module doc lists the order).
    fn step(&mut self) {
        let dt = self.step_s;
        let t = self.t_ms as f64 / 1000.0;
        if let Some(&r) = self.sc.restarts.get(self.restarts_done) {
            if t >= r {
                self.restarts_done += 1;
                self.restart();
            }
        }
        let w = self.sc.workload.clone();
        let hw = self.sc.hardware.clone();

        let device = self.device_now(t);
        let users = self.user_demand(t, dt, &w, device.latency_s);
        let limit = self.sc.oldest_view_at(t);
        let purge = self.purge_demand(dt, &w, device.latency_s, limit);
        let served = serve(&users, &purge, dt, &w, hw.cores, device.read_cap);

        let flush = self.flush_step(dt, &hw, &w, &device, served.cpu_f);

        // Stage 6, sync flush: work waits for redo space.
        let redo_want = served.fg_want * w.redo_bytes_per_trx
            + served.purge_want * w.purge_redo_bytes_per_record;
        let headroom = flush.sync_pt - flush.age_after;
        let mut f = if self.hard_stall {
            0.0
        } else if redo_want <= headroom {
            1.0
        } else {
            (headroom.max(0.0) / redo_want).clamp(0.0, 1.0)
        };
        // A truncation stalls the foreground for a moment.
        let mut stall_s = 0.0;
        if self.pending_truncate_stall_s > 0.0 {
            let s = self.pending_truncate_stall_s.min(dt);
            self.pending_truncate_stall_s -= s;
            stall_s += s;
        }
        let fg_f = f * (1.0 - stall_s / dt);
        self.held_last_step = f < 1.0;
        let done = served.fg_want * fg_f;
        let purged = self.remove_history(served.purge_want * f, limit);
        self.purged_last_step = purged;

        // Foreground bookkeeping. The open load's transactions queue and the closed
        // loops' sessions wait. Running free, the few open-loop sessions are served as
        // they come and the closed loops take the rest of the CPU (the real g's open
        // loop queued nothing through its burst on a log large enough: `redo_static`,
        // the hundred-and-twelfth run, p99.9 9.6 ms); held at the maximum checkpoint
        // age every session waits its turn in `log_free_check()`, so what gets through
        // is shared by what each side asks.
        let open = self.backlog + users.arrivals;
        let done_open = if users.closed <= 0.0 || users.queued <= 0.0 {
            done
        } else if fg_f < 1.0 {
            done * open / users.queued
        } else {
            done.min(open)
        };
        self.backlog = (open - done_open).max(0.0);
        if !self.sc.replica {
            let limit_q = w.peak_tps * BACKLOG_LIMIT_S;
            if self.backlog > limit_q {
                self.acc.dropped += self.backlog - limit_q;
                self.backlog = limit_q;
            }
        }
        self.rows_updated += done * w.writes_per_trx;
        self.commits += done;
        self.add_history(done * w.writes_per_trx, t);
        self.dirty_pages(done, purged, flush.age_after, &w, &hw);
        if self.flavor == SimFlavor::MySql80 {
            if f < 1.0 && !self.hard_stall && served.fg_want + served.purge_want > 0.0 {
                self.hard_stall = true;
            } else if self.hard_stall && self.ckpt_age <= flush.async_pt {
                self.hard_stall = false;
            }
        }
        if self.hard_stall {
            f = 0.0;
        }

        // Device utilisation, for the next step's read latency and flush room (both
        // read only where reads are not capped apart: a cap's share is in `serve`).
        let reads = done * users.reads_per + purged * purge.reads_per;
        self.reads_last_step = reads;
        self.pages_read += reads;
        self.util_prev = ((reads + flush.pages) / (device.iops * dt).max(1e-9)).min(1.0);

        // Cold undo: whatever the cache cannot hold is evicted, oldest first.
        let total = self.history_len();
        self.cold = self.cold.max(total - self.sc.undo_cache_records).min(total);

        // Stage 7, undo tablespaces.
        self.undo_step(t + dt);

        let waited = if served.fg_want > 0.0 || self.backlog > 0.0 {
            (1.0 - f) * dt + stall_s
        } else {
            0.0
        };
        let latency = self.latency_proxy(dt, waited, users.lambda, &served);
        self.threads_running = if self.backlog > 1.0 {
            w.clients
        } else {
            (done / dt * served.s_wall).min(w.clients)
        };

        // Accumulate.
        // A closed loop offers what it runs.
        self.acc.offered += users.arrivals + (done - done_open).max(0.0);
        self.acc.done += done;
        self.acc.purged += purged;
        self.acc.flushed += flush.pages;
        self.acc.stalled_s += waited.min(dt);
        self.acc.worst_latency_s = self.acc.worst_latency_s.max(latency);
        self.acc.purge_core_s += purged * purge.cpu_s;

        self.t_ms += self.sc.step_ms.max(1);
        if self.t_ms % 1000 == 0 {
            self.close_second(flush.sync_pt, users.lambda);
        }
    }

    /// The device now: its I/O rate, a read cap apart from the writes, and a read's
    /// latency.
    fn device_now(&self, t: f64) -> DeviceNow {
        let hw = &self.sc.hardware;
        let (iops_f, lat_f) = self.sc.device_at(t);
        // Reads capped apart from the writes (a cgroup's read_iops). Such a cap does not
        // slow each read: cgroup v1's blk-throttle hands out its budget per 100 ms slice,
        // reads pass at the device's own latency until the slice's budget is spent, and
        // whoever asks after that waits for the next slice (traced per read in the
        // hundredth real-server run: p50 0.3-0.5 ms, long waits of ~60 ms released
        // together every 100 ms, reads issued at the same moment waiting alike). So
        // under a cap both sides ask at the device's latency and the cap is shared
        // by how fast each asks (`serve`); a thread asleep elsewhere (a DML delay, an
        // idle purge worker) loses no read by it.
        let read_cap = (hw.read_iops > 0.0).then_some(hw.read_iops * iops_f);
        let latency_s = match read_cap {
            Some(_) => hw.read_latency_ms / 1000.0 * lat_f,
            None => {
                hw.read_latency_ms / 1000.0 * lat_f / (1.0 - self.util_prev.min(MAX_DEVICE_UTIL))
            }
        };
        DeviceNow {
            iops: hw.device_iops * iops_f,
            read_cap,
            latency_s,
        }
    }

    /// Stages 1 and 2, what users ask of the step: arrivals (open loop, `peak_tps × load(t)` with
    /// a slowly wandering level and Poisson-like noise), and what a transaction takes —
    /// its CPU, its reads at the device's latency, and the flavor's DML delay on each
    /// row, from the state at the start of the step — so the rate the clients can ask at.
    fn user_demand(&mut self, t: f64, dt: f64, w: &Workload, latency_s: f64) -> UserDemand {
        self.level_noise =
            0.9 * self.level_noise + 0.1 * self.sc.load_noise * self.noise.normal() * 4.36;
        let level = (self.sc.load_at(t) * (1.0 + self.level_noise)).max(0.0);
        let lambda = w.peak_tps * level;
        let mean = lambda * dt;
        let arrivals = (mean + mean.sqrt() * self.noise.normal()).max(0.0);

        self.dml_delay_us = dml_delay_us(
            self.flavor,
            &self.knobs,
            self.history_len(),
            self.purged_last_step > 0.0,
        );
        let delay_s = self.dml_delay_us * 1e-6 * w.writes_per_trx.max(1.0);
        // Undo truncation in progress costs throughput (seed 002).
        let marked = self.spaces.iter().any(|s| s.marked_since.is_some());
        let trunc_penalty = if marked {
            TRUNCATE_PENALTY / self.spaces.len().max(1) as f64
        } else {
            0.0
        };
        let cpu_s = w.cpu_us_per_trx * 1e-6 / (1.0 - trunc_penalty);
        let reads_per = w.reads_per_trx * self.read_scale();
        let s_wall = cpu_s + reads_per * latency_s + delay_s;
        let x_conc = w.clients / s_wall;
        let closed = w.peak_tps * self.sc.closed_at(t) * dt;
        let queued = self.backlog + arrivals + closed;
        UserDemand {
            lambda,
            arrivals,
            closed,
            queued,
            cpu_s,
            s_wall,
            x_conc,
            rate: (queued / dt).min(x_conc),
            reads_per,
        }
    }

    /// Stage 3, purge's wish at full CPU: the records its threads would remove this
    /// step, the reads a record costs, never past the oldest read view (`limit`).
    fn purge_demand(
        &self,
        dt: f64,
        w: &Workload,
        latency_s: f64,
        limit: Option<f64>,
    ) -> PurgeDemand {
        let purgeable = self.purgeable_before(limit);
        // Purge threads that can work at once. Both servers give every undo record of
        // one table in a batch to one task (`trx_purge_attach_undo_recs()`), so no more
        // than the tables written; the others wait idle and take no CPU. MySQL 8.0
        // (`Purge_groups_t::distribute_if_needed()`) spreads a batch's records evenly
        // over all threads, tables split, while innodb_max_purge_lag is set and
        // history exceeds it.
        let threads = self.knob(Knob::PurgeThreads).max(1.0);
        let lag = self.knob(Knob::MaxPurgeLag);
        let spread = match self.flavor {
            SimFlavor::MariaDb1011 => false,
            SimFlavor::MySql80 => lag > 0.0 && self.history_len() > lag,
        };
        let threads = if spread {
            threads
        } else {
            threads.min(w.tables.max(1.0))
        };
        let batch = self.knob(Knob::PurgeBatchSize).max(1.0);
        let r_cpu = w.purge_records_per_thread_s * batch / (batch + PURGE_BATCH_OVERHEAD);
        // A thread that reads index pages the pool does not hold waits for each read
        // after its work on the record (one synchronous pread64 a page, the hundredth
        // run's trace): its rate falls as the device's latency rises, whoever loads it.
        // The index pages it cleans miss as the users' do (`Model::read_scale`).
        let index_reads = w.purge_reads_per_record * self.read_scale();
        let r_warm = if index_reads > 0.0 {
            1.0 / (1.0 / r_cpu.max(1e-9) + index_reads * latency_s)
        } else {
            r_cpu
        };
        let r_cold = (self.sc.undo_records_per_page / latency_s.max(1e-6)).min(r_warm);
        let thread_s = threads * dt;
        let cold_avail = self.cold.min(purgeable);
        let cold_take = cold_avail.min(thread_s * r_cold);
        let warm_take = (purgeable - cold_take)
            .max(0.0)
            .min((thread_s - cold_take / r_cold).max(0.0) * r_warm);
        let want = cold_take + warm_take;
        let cold_share = if want > 0.0 { cold_take / want } else { 0.0 };
        PurgeDemand {
            want,
            reads_per: index_reads + cold_share / self.sc.undo_records_per_page.max(1.0),
            threads,
            cpu_s: w.purge_cpu_us_per_record * 1e-6,
        }
    }

    /// Stage 5, flushing, by the redo region at the start of the step; a resize whose
    /// LSN the checkpoint passes is adopted.
    fn flush_step(
        &mut self,
        dt: f64,
        hw: &Hardware,
        w: &Workload,
        device: &DeviceNow,
        cpu_f: f64,
    ) -> Flush {
        let cap = self.capacity();
        let (async_pt, sync_pt) = flush_points(self.flavor, cap);
        let (async_pt, sync_pt) = (async_pt as f64, sync_pt as f64);
        let lwm = cap as f64 * 0.10;
        let io_cap = self.knob(Knob::IoCapacity).max(100.0);
        let io_max = self.knob(Knob::IoCapacityMax).max(io_cap);
        let a0 = self.ckpt_age;
        // At the maximum, and past the async point while users wait at it, the page
        // cleaner flushes furiously: each waiting thread asks the checkpoint 1 MiB on
        // (`log_checkpoint_margin()` → `buf_flush_wait_flushed()`, log0log.cc), and
        // batches of io_capacity_max run back to back until it gets there
        // (`buf_flush_sync_for_checkpoint()`, buf0flu.cc): the device's rate, whatever
        // io_capacity_max is (the real g wrote 505–538 pages a second at 200).
        let target = if a0 >= sync_pt || self.hard_stall || (a0 >= async_pt && self.held_last_step)
        {
            f64::INFINITY
        } else if a0 >= async_pt {
            io_max
        } else if a0 >= lwm && self.knobs.get(&Knob::MaxDirtyPagesPctLwm) == Some(&0) {
            // innodb_max_dirty_pages_pct_lwm = 0 (MariaDB's default, when the scenario
            // sets it): the page cleaner sleeps below the async point unless dirty
            // pages pass innodb_max_dirty_pages_pct (tests/page_cleaner.rs). A scenario
            // that does not name the variable gets the adaptive range below.
            if self.dirty / hw.buffer_pool_pages.max(1.0) > 0.9 {
                io_max
            } else {
                0.0
            }
        } else if a0 >= lwm {
            // The page cleaner's redo term, io_capacity_max · F^1.5 / 750 (the flush
            // policy's model of buf0flu.cc, shared so both agree), or the pages the
            // recent dirtying needs (its avg_page_rate and pages_for_lsn terms), capped
            // at io_capacity_max; the device caps it below.
            let x = ((a0 - lwm) / (async_pt - lwm).max(1.0)).clamp(0.0, 1.0);
            crate::policy::flush::page_cleaner_pages(a0, async_pt, lwm, io_cap, io_max)
                .max(x * self.dirty_rate_ema)
                .min(io_max)
        } else {
            let idle = 1.0 - (cpu_f / hw.cores).min(1.0);
            let dirty_pct = self.dirty / hw.buffer_pool_pages.max(1.0);
            if dirty_pct > 0.9 {
                io_max
            } else {
                io_cap * idle
            }
        };
        // A resize under way: the page cleaner flushes toward its LSN a batch of
        // io_capacity_max a second, asleep or not, until the checkpoint passes it.
        let target = match &self.resize {
            Some(r) if self.lsn - a0 < r.lsn => target.max(io_max),
            _ => target,
        };
        let device_room = match device.read_cap {
            Some(_) => device.iops * dt,
            None => (device.iops * dt - self.reads_last_step).max(0.0),
        };
        let flushed = (target * dt).min(device_room).min(self.dirty).max(0.0);
        self.dirty -= flushed;
        self.pages_flushed += flushed;
        let in_order = self.in_order_share(hw, w);
        self.flush_spread(flushed * (1.0 - in_order));
        let age_after = self.flush_oldest(flushed * in_order);

        // The checkpoint this flush allows: a resize whose LSN it passes is adopted
        // (the new capacity, so the new flush points, from the next step).
        let checkpoint_lsn = self.lsn - age_after;
        if self
            .resize
            .as_ref()
            .is_some_and(|r| checkpoint_lsn >= r.lsn)
        {
            let r = self.resize.take().expect("checked");
            self.knobs.insert(self.flavor.redo_knob(), r.to);
            let to = r.to;
            self.end_resize(r, Ok(to));
        }
        Flush {
            pages: flushed,
            age_after,
            async_pt,
            sync_pt,
        }
    }

    /// The redo the step's work wrote and the pages it dirtied (first modified at the
    /// LSN the step began with), and the checkpoint age they leave.
    fn dirty_pages(
        &mut self,
        done: f64,
        purged: f64,
        age_after_flush: f64,
        w: &Workload,
        hw: &Hardware,
    ) {
        let redo = done * w.redo_bytes_per_trx + purged * w.purge_redo_bytes_per_record;
        self.lsn += redo;
        let ws = w.working_set_pages.min(hw.buffer_pool_pages);
        let clean_share = (1.0 - self.dirty / ws.max(1.0)).max(0.0);
        let newly_dirty = ((done * w.pages_per_trx + purged * w.purge_pages_per_record)
            * clean_share)
            .min((ws - self.dirty).max(0.0));
        self.dirty += newly_dirty;
        if newly_dirty > 0.0 {
            self.flush_list.push_back((self.lsn - redo, newly_dirty));
            if self.flush_list.len() > FLUSH_LIST_ENTRIES {
                // Coarser, not longer: neighbours merge at the older LSN (a day of
                // steps with nothing flushed would otherwise hold one entry each).
                let merged: VecDeque<(f64, f64)> = self
                    .flush_list
                    .iter()
                    .collect::<Vec<_>>()
                    .chunks(2)
                    .map(|c| (c[0].0, c.iter().map(|e| e.1).sum()))
                    .collect();
                self.flush_list = merged;
            }
        }
        // The checkpoint is the oldest modification still dirty; with nothing dirty it
        // stood at the LSN this step began with.
        self.ckpt_age = match self.flush_list.front() {
            Some(&(oldest, _)) => self.lsn - oldest,
            None => age_after_flush + redo,
        };
        let alpha = (self.step_s / 5.0).min(1.0);
        self.dirty_rate_ema += alpha * (newly_dirty / self.step_s - self.dirty_rate_ema);
    }

    /// The step's latency proxy, s: a transaction's time, the queueing in front of
    /// the clients (Erlang-C-like, at the p99 of an exponential), the backlog's wait,
    /// and any run of steps with (almost) no progress.
    fn latency_proxy(&mut self, dt: f64, waited: f64, lambda: f64, served: &Served) -> f64 {
        // A run of steps in which the foreground made (almost) no progress: requests
        // that arrived at its start have waited all of it. A throttled step (some
        // progress) ends the run; its slowness shows in the queue term.
        if waited > 0.95 * dt {
            self.stall_run_s += waited;
        } else {
            self.stall_run_s = waited;
        }
        let (mu, s_wall) = (served.mu, served.s_wall);
        let rho = if mu > 0.0 {
            (lambda / mu).min(0.99)
        } else {
            0.99
        };
        let servers = (mu * s_wall).max(1.0);
        let wq = s_wall * rho.powf((2.0 * (servers + 1.0)).sqrt() - 1.0) / (servers * (1.0 - rho));
        // Nobody waits longer than the clients do.
        let queue = if mu > 0.0 {
            (self.backlog / mu).min(BACKLOG_LIMIT_S)
        } else {
            0.0
        };
        s_wall + P99_OF_MEAN * wq + queue + self.stall_run_s
    }

    fn undo_step(&mut self, now_s: f64) {
        let bytes = self.sc.workload.undo_bytes_per_record;
        if self.spaces.is_empty() {
            self.system_undo = self.system_undo.max(self.history_len() * bytes);
            return;
        }
        for s in &mut self.spaces {
            s.size = s.size.max(s.live * bytes);
        }
        let truncate = self.knob(Knob::UndoLogTruncate) > 0.0;
        let max_size = self.knob(Knob::MaxUndoLogSize);
        // Truncate a set-aside tablespace once purge has emptied it.
        for s in &mut self.spaces {
            if s.marked_since.is_some() && s.live <= 1e-6 {
                s.marked_since = None;
                s.live = 0.0;
                s.size = UNDO_INITIAL_BYTES;
                self.truncations += 1;
                self.pending_truncate_stall_s += TRUNCATE_STALL_S;
            }
        }
        if truncate
            && self.spaces.len() >= 2
            && self.spaces.iter().all(|s| s.marked_since.is_none())
        {
            // One at a time, the largest over the threshold.
            let pick = self
                .spaces
                .iter()
                .enumerate()
                .filter(|(_, s)| s.size > max_size)
                .max_by(|a, b| a.1.size.total_cmp(&b.1.size))
                .map(|(i, _)| i);
            if let Some(i) = pick {
                self.spaces[i].marked_since = Some(now_s);
            }
        }
    }

    fn close_second(&mut self, sync_pt: f64, lambda: f64) {
        let acc = std::mem::take(&mut self.acc);
        let t = self.t_ms as f64 / 1000.0;
        let lag = if self.sc.replica {
            self.backlog / lambda.max(1.0)
        } else {
            0.0
        };
        self.log.push(Second {
            t_s: self.t_ms / 1000,
            offered_tps: acc.offered,
            throughput_tps: acc.done,
            latency_p99_ms: acc.worst_latency_s * 1000.0,
            backlog: self.backlog,
            dropped: acc.dropped,
            history: self.history_len(),
            purgeable: self.purgeable_before(self.sc.oldest_view_at(t)),
            purge_rate: acc.purged,
            undo_bytes: self.undo_bytes(),
            redo_fill: self.ckpt_age / sync_pt.max(1.0),
            dirty_pages: self.dirty,
            flush_rate: acc.flushed,
            stalled_s: acc.stalled_s,
            dml_delay_us: self.dml_delay_us,
            replica_lag_s: lag,
            purge_cores: acc.purge_core_s,
            knobs: self.knobs.clone(),
        });
    }

    /// Advances one sample interval (1 s of virtual time).
    pub fn advance_second(&mut self) {
        let target = (self.t_ms / 1000 + 1) * 1000;
        while self.t_ms < target {
            self.step();
        }
    }
}

mod knobs;
mod server;
mod surface;

pub use server::SimServer;
#[cfg(test)]
mod tests;
