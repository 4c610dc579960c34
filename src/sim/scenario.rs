//! Named, seeded scenarios: the server (flavor, hardware, startup configuration), the
//! workload (per-transaction costs, a load curve, surges), read views, device events
//! and restarts. Each scenario is tied to the seed article whose finding it reproduces
//! (shared/seeds/NNN_*.txt); `docs/simulator.md` explains each one's numbers.
//!
//! A scenario is a plain description; [`Scenario::realize`] turns its random parts
//! (the day's read views and surges) into concrete ones for one seed.

use serde::Serialize;

use crate::server::{Knob, KnobValues};

use super::{Rng, SimError};

/// The server flavors the model knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum SimFlavor {
    /// MariaDB 10.11: purge threads dynamic, innodb_log_file_size resizable, DML delay
    /// only while purge handles pages, undo truncation off by default.
    #[serde(rename = "mariadb1011")]
    MariaDb1011,
    /// MySQL 8.0.30+: purge threads read-only, innodb_redo_log_capacity, DML delay by
    /// history size alone, undo truncation on at 1 GiB by default.
    #[serde(rename = "mysql80")]
    MySql80,
}

impl SimFlavor {
    pub fn name(self) -> &'static str {
        match self {
            SimFlavor::MariaDb1011 => "mariadb-10.11",
            SimFlavor::MySql80 => "mysql-8.0",
        }
    }

    /// The knob values this flavor starts with when nothing is configured
    /// (REFERENCE.md's knob table).
    pub fn defaults(self) -> KnobValues {
        let mib = 1u64 << 20;
        match self {
            SimFlavor::MariaDb1011 => KnobValues::from([
                (Knob::PurgeThreads, 4),
                (Knob::PurgeBatchSize, 127),
                (Knob::MaxPurgeLag, 0),
                (Knob::MaxPurgeLagDelay, 0),
                (Knob::IoCapacity, 200),
                (Knob::IoCapacityMax, 2000),
                (Knob::LogFileSize, 96 * mib),
                (Knob::UndoLogTruncate, 0),
                (Knob::MaxUndoLogSize, 10 * mib),
                (Knob::FlushNeighbors, 1),
                (Knob::LruScanDepth, 1536),
            ]),
            SimFlavor::MySql80 => KnobValues::from([
                (Knob::PurgeThreads, 4),
                (Knob::PurgeBatchSize, 300),
                (Knob::MaxPurgeLag, 0),
                (Knob::MaxPurgeLagDelay, 0),
                (Knob::IoCapacity, 200),
                (Knob::IoCapacityMax, 2000),
                // Exists but read-only on 8.0.30+: innodb_redo_log_capacity rules.
                (Knob::LogFileSize, 48 * mib),
                (Knob::RedoLogCapacity, 100 * mib),
                (Knob::UndoLogTruncate, 1),
                (Knob::MaxUndoLogSize, 1 << 30),
                (Knob::FlushNeighbors, 0),
            ]),
        }
    }

    /// The knob that sizes the redo log.
    pub fn redo_knob(self) -> Knob {
        match self {
            SimFlavor::MariaDb1011 => Knob::LogFileSize,
            SimFlavor::MySql80 => Knob::RedoLogCapacity,
        }
    }
}

/// The machine.
#[derive(Debug, Clone, Serialize)]
pub struct Hardware {
    /// CPU cores shared by the foreground and purge threads.
    pub cores: f64,
    /// Buffer pool size in 16 KiB pages (reported as Innodb_buffer_pool_pages_total).
    pub buffer_pool_pages: f64,
    /// Device throughput in 16 KiB page I/Os per second, reads and writes together.
    pub device_iops: f64,
    /// Reads the device serves per second at most, apart from the writes (a cgroup's
    /// blkio `read_iops`, as the real benchmark's e sets): reads then queue on this
    /// alone and the page cleaner's writes on `device_iops`. 0 = no separate limit.
    pub read_iops: f64,
    /// Latency of one random read on an idle device, ms.
    pub read_latency_ms: f64,
    /// The server takes the data files' device for a spinning one, so
    /// innodb_flush_neighbors applies (MariaDB asks the kernel's `queue/rotational`;
    /// virtual disks often say 1). MySQL applies the variable on any device.
    pub rotational: bool,
}

/// What one foreground transaction costs and does.
#[derive(Debug, Clone, Serialize)]
pub struct Workload {
    /// Arrival rate at load level 1.0, transactions per second (open loop).
    pub peak_tps: f64,
    /// Foreground concurrency limit (connections doing work at once).
    pub clients: f64,
    /// CPU time per transaction, µs.
    pub cpu_us_per_trx: f64,
    /// Rows updated or deleted per transaction; each leaves one history record.
    pub writes_per_trx: f64,
    /// Redo bytes written per transaction.
    pub redo_bytes_per_trx: f64,
    /// Pages a transaction modifies (they become dirty unless already dirty).
    pub pages_per_trx: f64,
    /// Synchronous device reads per transaction (buffer pool misses), at the free
    /// list MariaDB keeps by default (innodb_lru_scan_depth 1 536).
    pub reads_per_trx: f64,
    /// The pages users' reads fall on, uniformly, as far as the pool's size decides
    /// their misses: a read misses with probability 1 − cached / `read_set_pages`, and
    /// `Model::read_scale` scales `reads_per_trx` (and purge's index reads) by that
    /// when the free list the page cleaner keeps changes. 0: no such model, the
    /// reads a transaction are fixed.
    pub read_set_pages: f64,
    /// Pages the writes spread over: dirty pages saturate there.
    pub working_set_pages: f64,
    /// CPU time per purged history record, µs.
    pub purge_cpu_us_per_record: f64,
    /// Records one purge thread handles per second on warm undo at full batch
    /// efficiency (32 k for sysbench's non-index update, calibrated on REFERENCE.md).
    pub purge_records_per_thread_s: f64,
    /// Redo bytes written per purged record.
    pub purge_redo_bytes_per_record: f64,
    /// Pages a purged record modifies (index pages it cleans).
    pub purge_pages_per_record: f64,
    /// Device reads a purged record costs: the index pages it cleans that the pool
    /// does not hold. A purge thread looks the old entry up in each secondary index
    /// the update changed (`row_purge_upd_exist_or_extern()` →
    /// `row_purge_remove_sec_if_poss()`, row0purge.cc) and waits for each leaf read it
    /// needs, so a thread purges at most one record per `purge_reads_per_record` ×
    /// read latency, and its reads share the device with the users'. 0 where the pool
    /// holds the indexes.
    pub purge_reads_per_record: f64,
    /// Undo bytes per history record.
    pub undo_bytes_per_record: f64,
    /// Tables the writes spread over. MariaDB gives every undo record of one table in
    /// a purge batch to the same task (`trx_purge_attach_undo_recs()`, trx0purge.cc:
    /// one work item per table, then `min(n_work, n_tasks) − 1` workers beside the
    /// coordinator), so at most this many purge threads work at once. Measured in the
    /// fortieth real-server run: with 4 sysbench tables 8 threads purged no faster
    /// than 4 (docs/benchmarks.md).
    pub tables: f64,
}

impl Workload {
    /// Users read pages the pool cannot hold, so every read needs a free page and the
    /// pool evicts: MariaDB's page cleaner then runs `buf_flush_LRU()` instead of a
    /// flush-list batch while `need_LRU_eviction()` (buf0flu.cc), and every page it
    /// writes is the LRU's (the real e_purge_behind: all of them from the first minute;
    /// `tests/page_cleaner.rs`: 129 729 LRU pages against 124 adaptive in 10 s).
    pub fn evicts(&self, hw: &Hardware) -> bool {
        self.reads_per_trx > 0.0 && self.working_set_pages > hw.buffer_pool_pages
    }
}

/// A consistent read view held from `start_s` to `end_s` (e.g. mysqldump, a report):
/// history committed after `start_s` cannot be purged while it is open.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ReadView {
    pub start_s: f64,
    pub end_s: f64,
}

/// A change of the device for a while (a backup reading the disk, a RAID rebuild).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeviceEvent {
    pub label: String,
    pub start_s: f64,
    pub end_s: f64,
    /// Multiplies the device's throughput.
    pub iops_factor: f64,
    /// Multiplies the idle read latency.
    pub latency_factor: f64,
}

/// The load multiplied by `factor` from `start_s` to `end_s`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Surge {
    pub start_s: f64,
    pub end_s: f64,
    pub factor: f64,
}

/// A closed loop on top of the open load from `start_s` to `end_s`: sessions that
/// would run `level × peak_tps` a second if nothing held them, and that wait instead
/// of queueing more when something does (sysbench's threads without `--rate`, as the
/// benchmark's g and h bursts run). What they could not run in a step is not carried
/// over, where the open load's arrivals queue.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ClosedLoop {
    pub start_s: f64,
    pub end_s: f64,
    pub level: f64,
}

/// Random read views for one seed: `count` views with durations log-uniform in
/// `[min_s, max_s]`, starting uniformly in the run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RandomViews {
    pub count: usize,
    pub min_s: f64,
    pub max_s: f64,
}

/// Random surges for one seed.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RandomSurges {
    pub count: usize,
    pub min_s: f64,
    pub max_s: f64,
    pub min_factor: f64,
    pub max_factor: f64,
}

/// One scenario. Times are seconds from the start of the run.
#[derive(Debug, Clone, Serialize)]
pub struct Scenario {
    pub name: String,
    /// One line for tables and plot titles.
    pub title: String,
    /// The seed article it reproduces (shared/seeds/NNN_*.txt).
    pub seed_ref: String,
    pub duration_s: f64,
    /// Model step. 100 ms resolves stalls; the day runs at 1 s to stay fast.
    pub step_ms: u64,
    /// The flavor peers that do not name one run on.
    pub flavor: SimFlavor,
    pub hardware: Hardware,
    pub workload: Workload,
    /// Load level (fraction of `peak_tps`) at times; linear in between, flat outside.
    pub load: Vec<(f64, f64)>,
    /// Relative noise of the load level (standard deviation), on top of Poisson noise.
    pub load_noise: f64,
    pub surges: Vec<Surge>,
    /// Closed loops on top of the open load (a burst of sessions, not of arrivals).
    pub closed_loops: Vec<ClosedLoop>,
    pub random_surges: Option<RandomSurges>,
    pub views: Vec<ReadView>,
    pub random_views: Option<RandomViews>,
    pub device_events: Vec<DeviceEvent>,
    /// Server restarts (instantaneous; knobs back to the startup configuration, history
    /// kept on disk but cold, buffer pool empty of dirty pages).
    pub restarts: Vec<f64>,
    /// A replica: the foreground is the replication applier, and lag is reported.
    pub replica: bool,
    /// The server's startup configuration on top of the flavor's defaults (my.cnf).
    pub server_config: KnobValues,
    /// Undo tablespaces (0: undo in the system tablespace, never truncated).
    pub undo_tablespaces: u32,
    /// History (undo logs) present at the start (debt from before the run).
    pub initial_history: f64,
    /// Of which cold (not in the buffer pool): e.g. just after a restart.
    pub initial_cold: f64,
    /// Undo records per 16 KiB undo page, for purge's reads when undo is cold.
    pub undo_records_per_page: f64,
    /// Undo records the buffer pool keeps cached; older history is evicted (cold).
    pub undo_cache_records: f64,
    /// The INNODB_METRICS purge counters are enabled (`innodb_monitor_enable =
    /// module_purge`; off by default on both servers): the twin reports the records
    /// purge handled ([`crate::server::sample::Sample::purge_records`]).
    pub purge_counters: bool,
}

/// Names of the built-in scenarios, in table order.
pub const NAMES: &[&str] = &[
    "long_read_view",
    "redo_pressure",
    "flush_bound",
    "cold_undo_restart",
    "backup_replica",
    "day",
    "undo_truncation",
    "purge_behind",
    "cold_view",
    "checkpoint_stall",
    "repeated_bursts",
];

const MIB: f64 = 1_048_576.0;

/// The 2-core sysbench oltp_update_non_index box of REFERENCE.md's measurements:
/// ~31 k TPS with purge idle, ~29 k with purge keeping up, ~24 k while 4 purge threads
/// drain a backlog. Derivation in docs/simulator.md.
fn sysbench_update_2core() -> (Hardware, Workload) {
    (
        Hardware {
            cores: 2.0,
            // 256 MiB buffer pool.
            buffer_pool_pages: 16_384.0,
            device_iops: 20_000.0,
            read_iops: 0.0,
            read_latency_ms: 0.2,
            rotational: false,
        },
        Workload {
            peak_tps: 29_000.0,
            clients: 32.0,
            cpu_us_per_trx: 64.5,
            writes_per_trx: 1.0,
            redo_bytes_per_trx: 400.0,
            pages_per_trx: 1.0,
            reads_per_trx: 0.0,
            read_set_pages: 0.0,
            // 4 × 200 k rows ≈ 10 k leaf pages.
            working_set_pages: 10_000.0,
            purge_cpu_us_per_record: 4.35,
            purge_records_per_thread_s: 32_000.0,
            purge_redo_bytes_per_record: 120.0,
            purge_pages_per_record: 1.0,
            purge_reads_per_record: 0.0,
            undo_bytes_per_record: 128.0,
            tables: 4.0,
        },
    )
}

fn base(name: &str, title: &str, seed_ref: &str, duration_s: f64, flavor: SimFlavor) -> Scenario {
    let (hardware, workload) = sysbench_update_2core();
    Scenario {
        name: name.into(),
        title: title.into(),
        seed_ref: seed_ref.into(),
        duration_s,
        step_ms: 100,
        flavor,
        hardware,
        workload,
        load: vec![(0.0, 1.0)],
        load_noise: 0.02,
        surges: vec![],
        closed_loops: vec![],
        random_surges: None,
        views: vec![],
        random_views: None,
        device_events: vec![],
        restarts: vec![],
        replica: false,
        server_config: KnobValues::new(),
        undo_tablespaces: 2,
        initial_history: 0.0,
        initial_cold: 0.0,
        undo_records_per_page: 40.0,
        undo_cache_records: 5_000_000.0,
        purge_counters: false,
    }
}

impl Scenario {
    /// The same scenario on a device whose reads are capped at `reads_per_s` instead of
    /// its own cap: the twin of a benchmark run made with `bench.py --read-iops`. Only a
    /// scenario whose device caps reads apart from the writes has a cap to change.
    pub fn with_read_iops(mut self, reads_per_s: u32) -> Result<Scenario, SimError> {
        if self.hardware.read_iops <= 0.0 || reads_per_s == 0 {
            let capped: Vec<&str> = NAMES
                .iter()
                .copied()
                .filter(|n| Scenario::named(n).is_some_and(|s| s.hardware.read_iops > 0.0))
                .collect();
            return Err(SimError::NoReadCap {
                scenario: self.name,
                reads_per_s,
                capped: capped.join(", "),
            });
        }
        self.hardware.read_iops = f64::from(reads_per_s);
        Ok(self)
    }

    /// A built-in scenario by name.
    pub fn named(name: &str) -> Option<Scenario> {
        let s = match name {
            "long_read_view" => {
                // Seed 000: a consistent-snapshot query on top of an OLTP load at 50 %
                // of peak; threshold throttling slows every DML while purge cannot move.
                let mut s = base(
                    name,
                    "50 % update load, a read view held from 15 % to 40 % of the run",
                    "000",
                    400.0,
                    SimFlavor::MySql80,
                );
                s.load = vec![(0.0, 0.5)];
                s.views = vec![ReadView {
                    start_s: 60.0,
                    end_s: 160.0,
                }];
                s
            }
            "redo_pressure" => {
                // Seed 003: oltp-update-index, 35 GB data on a 350 MB/s disk: purge of a
                // secondary-index update writes much redo; rounds of load with 20 s gaps.
                let mut s = base(
                    name,
                    "heavy index updates in rounds; purge's redo pushes toward sync flush",
                    "003",
                    520.0,
                    SimFlavor::MariaDb1011,
                );
                s.hardware = Hardware {
                    cores: 8.0,
                    buffer_pool_pages: 1_500_000.0,
                    device_iops: 4_500.0,
                    read_iops: 0.0,
                    read_latency_ms: 0.2,
                    rotational: false,
                };
                s.workload = Workload {
                    peak_tps: 30_000.0,
                    clients: 128.0,
                    cpu_us_per_trx: 180.0,
                    writes_per_trx: 1.0,
                    redo_bytes_per_trx: 300.0,
                    pages_per_trx: 1.0,
                    reads_per_trx: 0.0,
                    read_set_pages: 0.0,
                    // The hot part of 35 GB under a uniform update: dirty pages saturate.
                    working_set_pages: 80_000.0,
                    purge_cpu_us_per_record: 12.0,
                    // Secondary-index purge: one lookup and removal per index.
                    purge_records_per_thread_s: 15_000.0,
                    purge_redo_bytes_per_record: 700.0,
                    purge_pages_per_record: 2.0,
                    purge_reads_per_record: 0.0,
                    undo_bytes_per_record: 160.0,
                    // The seed does not say over how many tables its 35 GB spread:
                    // no cap below innodb_purge_threads' maximum.
                    tables: 32.0,
                };
                s.load = rounds(4, 110.0, 20.0, 1.0);
                s.server_config = KnobValues::from([
                    (Knob::LogFileSize, 512 << 20),
                    (Knob::IoCapacity, 2000),
                    (Knob::IoCapacityMax, 4500),
                ]);
                s
            }
            "flush_bound" => {
                // Seed 001: a buffer pool much larger than the device can flush; InnoDB
                // runs, then stalls for minutes in sync flushing.
                let mut s = base(
                    name,
                    "large buffer pool, slow device: sync-flush stalls",
                    "001",
                    600.0,
                    SimFlavor::MySql80,
                );
                s.hardware = Hardware {
                    cores: 8.0,
                    // 52 GB of buffer pool over 58 GB of data, as in the seed.
                    buffer_pool_pages: 3_300_000.0,
                    device_iops: 6_000.0,
                    read_iops: 0.0,
                    read_latency_ms: 2.0,
                    rotational: false,
                };
                s.workload = Workload {
                    peak_tps: 6_000.0,
                    clients: 64.0,
                    cpu_us_per_trx: 400.0,
                    writes_per_trx: 1.0,
                    redo_bytes_per_trx: 1_500.0,
                    pages_per_trx: 1.5,
                    reads_per_trx: 0.0,
                    read_set_pages: 0.0,
                    working_set_pages: 3_000_000.0,
                    purge_cpu_us_per_record: 8.0,
                    purge_records_per_thread_s: 20_000.0,
                    purge_redo_bytes_per_record: 120.0,
                    purge_pages_per_record: 0.2,
                    purge_reads_per_record: 0.0,
                    undo_bytes_per_record: 200.0,
                    // Not said in the seed; 32 leaves the threads the limit.
                    tables: 32.0,
                };
                s.load = vec![(0.0, 0.8)];
                s.server_config = KnobValues::from([(Knob::RedoLogCapacity, 1 << 30)]);
                s
            }
            "cold_undo_restart" => {
                // Seed 000: after a restart undo is no longer cached, purge becomes
                // I/O-bound and settles below the rate it needs to keep up.
                let mut s = base(
                    name,
                    "restart with 3 M undo logs of cold history under a 50 % load",
                    "000",
                    400.0,
                    SimFlavor::MariaDb1011,
                );
                s.hardware.read_latency_ms = 1.0;
                s.hardware.device_iops = 5_000.0;
                s.load = vec![(0.0, 0.5)];
                // A long report left 3 M undo logs of history; the server restarts at
                // 20 s (a maintenance window) and none of that undo is cached after.
                s.initial_history = 3_000_000.0;
                s.restarts = vec![20.0];
                s.undo_records_per_page = 20.0;
                s.undo_cache_records = 1_000_000.0;
                s
            }
            "backup_replica" => {
                // Seed 004: one applier thread, I/O-bound; a backup halves the device
                // and replication lag grows.
                let mut s = base(
                    name,
                    "replica applying writes; a backup halves device throughput",
                    "004",
                    900.0,
                    SimFlavor::MySql80,
                );
                s.replica = true;
                s.hardware = Hardware {
                    cores: 4.0,
                    buffer_pool_pages: 262_144.0,
                    device_iops: 4_000.0,
                    read_iops: 0.0,
                    read_latency_ms: 0.5,
                    rotational: false,
                };
                s.workload = Workload {
                    peak_tps: 300.0,
                    clients: 1.0,
                    cpu_us_per_trx: 300.0,
                    writes_per_trx: 20.0,
                    redo_bytes_per_trx: 8_000.0,
                    pages_per_trx: 12.0,
                    reads_per_trx: 4.0,
                    read_set_pages: 0.0,
                    working_set_pages: 1_300_000.0,
                    purge_cpu_us_per_record: 6.0,
                    purge_records_per_thread_s: 20_000.0,
                    purge_redo_bytes_per_record: 150.0,
                    purge_pages_per_record: 0.5,
                    purge_reads_per_record: 0.0,
                    undo_bytes_per_record: 200.0,
                    tables: 32.0,
                };
                s.load = vec![(0.0, 0.7)];
                s.device_events = vec![DeviceEvent {
                    label: "backup".into(),
                    start_s: 200.0,
                    end_s: 650.0,
                    iops_factor: 0.5,
                    latency_factor: 2.0,
                }];
                s.server_config = KnobValues::from([
                    (Knob::IoCapacity, 1000),
                    (Knob::IoCapacityMax, 2000),
                    (Knob::RedoLogCapacity, 512 << 20),
                ]);
                s
            }
            "day" => {
                // James Day's comment on seed 000: load varies through the day, with
                // surges, and read views of tens to thousands of seconds are routine.
                let mut s = base(
                    name,
                    "a day: load curve, surges, read views of 10–1000 s",
                    "000",
                    86_400.0,
                    SimFlavor::MariaDb1011,
                );
                s.step_ms = 1000;
                let h = 3600.0;
                s.load = vec![
                    (0.0, 0.15),
                    (6.0 * h, 0.15),
                    (9.0 * h, 0.6),
                    (12.0 * h, 0.7),
                    (14.0 * h, 0.55),
                    (17.0 * h, 0.75),
                    (21.0 * h, 0.35),
                    (24.0 * h, 0.15),
                ];
                s.load_noise = 0.05;
                s.random_surges = Some(RandomSurges {
                    count: 12,
                    min_s: 60.0,
                    max_s: 900.0,
                    min_factor: 1.2,
                    max_factor: 1.5,
                });
                s.random_views = Some(RandomViews {
                    count: 60,
                    min_s: 10.0,
                    max_s: 1000.0,
                });
                s
            }
            "undo_truncation" => {
                // Seed 002 (WL#6965): 2 undo tablespaces truncated at 10 MiB; while one
                // is set aside for truncation TPS drops 6–15 %.
                let mut s = base(
                    name,
                    "undo truncation at 10 MiB with 2 undo tablespaces under full load",
                    "002",
                    300.0,
                    SimFlavor::MySql80,
                );
                s.load = vec![(0.0, 1.1)];
                s.views = vec![ReadView {
                    start_s: 150.0,
                    end_s: 180.0,
                }];
                s.server_config = KnobValues::from([
                    (Knob::UndoLogTruncate, 1),
                    (Knob::MaxUndoLogSize, 10 << 20),
                ]);
                s
            }
            // The real benchmark's scenarios (bench/bench.py, docs/benchmarks.md) on this
            // 2-core box, with their sizes; each workload's rates are calibrated on the
            // real defaults arm (docs/simulator.md, "Twins of the real benchmark").
            "purge_behind" => {
                // e_purge_behind: oltp_update_index, 8 x 250 k rows (~480 MiB) in a
                // 128 MiB buffer pool, 16 sessions in a closed loop (modelled as arrivals
                // above capacity), reads limited to 6000 IOPS, a view from 10 s to 40 s.
                // Purge must visit secondary-index pages that are mostly not cached,
                // and users and purge share the 6 000 reads/s by how fast each asks.
                // Each side's reads measured apart (the users' threads' read bytes,
                // purge's records; runs 98-100's defaults, 45-178 s): users 1.11-1.15
                // pages a transaction, purge 1.22-1.27 an undo log (1.09-1.11 under a
                // delay, which the twin does not follow). With the defaults: ~3.8 k
                // TPS, purge removes ~1.3-1.4 k/s, history +2.5 k/s.
                let mut s = base(
                    name,
                    "twin of e_purge_behind: index updates on data 4x the buffer pool, purge falls behind",
                    "000",
                    180.0,
                    SimFlavor::MariaDb1011,
                );
                // As the real benchmark runs it: the counters say purge handles about a
                // third of the rows users change, so all growth stays debt.
                s.purge_counters = true;
                s.hardware = Hardware {
                    cores: 2.0,
                    buffer_pool_pages: 8_192.0,
                    // The page cleaner's writes: about 4 500 pages/s measured with
                    // the defaults (eighty-third run), beside the reads.
                    device_iops: 20_000.0,
                    read_iops: 6_000.0,
                    read_latency_ms: 0.3,
                    rotational: false,
                };
                s.workload = Workload {
                    peak_tps: 6_000.0,
                    clients: 16.0,
                    cpu_us_per_trx: 330.0,
                    writes_per_trx: 1.0,
                    redo_bytes_per_trx: 700.0,
                    // The clustered page and the secondary index's old and new entries.
                    pages_per_trx: 3.0,
                    reads_per_trx: 1.13,
                    // Fitted to the hundred-and-fifth run's probe (bench/probe.py on e): users'
                    // TPS at the same read rate 1.14-1.16 x at innodb_lru_scan_depth 256 and
                    // 0.83-0.84 x at 4 096 against 1 536 give 13.7 k and 16.1 k pages.
                    read_set_pages: 15_000.0,
                    working_set_pages: 30_000.0,
                    purge_cpu_us_per_record: 60.0,
                    // Its CPU alone (60 µs a record): the reads bound it below.
                    purge_records_per_thread_s: 16_000.0,
                    purge_redo_bytes_per_record: 400.0,
                    purge_pages_per_record: 2.0,
                    purge_reads_per_record: 1.24,
                    undo_bytes_per_record: 150.0,
                    tables: 8.0,
                };
                s.load = vec![(0.0, 1.0)];
                s.views = vec![ReadView {
                    start_s: 10.0,
                    end_s: 40.0,
                }];
                s.server_config = KnobValues::from([(Knob::LogFileSize, 96 << 20)]);
                s.undo_records_per_page = 20.0;
                s.undo_cache_records = 100_000.0;
                s
            }
            "cold_view" => {
                // f_cold_view: oltp_update_non_index on 4 x 100 k hot rows at 50 % of the
                // measured peak (open loop), a snapshot from 30 s to 120 s while a report
                // scans a 1.5 M-row cold table (its pages displace the undo), reads
                // limited to 1500 IOPS, a 256 MiB buffer pool.
                let mut s = base(
                    name,
                    "twin of f_cold_view: 50 % load, a 90 s view while a scan evicts the undo",
                    "000",
                    180.0,
                    SimFlavor::MariaDb1011,
                );
                s.hardware.device_iops = 1_500.0;
                s.hardware.read_latency_ms = 0.5;
                // Measured: 54 k TPS closed loop with 16 sessions on this box, so about
                // 37 µs of CPU a transaction on 2 cores.
                s.workload.peak_tps = 54_000.0;
                s.workload.clients = 16.0;
                s.workload.cpu_us_per_trx = 36.0;
                s.workload.working_set_pages = 2_500.0;
                s.load = vec![(0.0, 0.5)];
                s.views = vec![ReadView {
                    start_s: 30.0,
                    end_s: 120.0,
                }];
                s.server_config = KnobValues::from([(Knob::LogFileSize, 96 << 20)]);
                // What the scan leaves of the pool for undo.
                s.undo_cache_records = 300_000.0;
                s
            }
            "checkpoint_stall" => {
                // g_checkpoint_stall: 8 x 250 k rows (~480 MiB, all hot) in a 1 GiB
                // buffer pool, 128 MiB of redo, data-page writes limited to 16 MiB/s
                // (512 pages/s, doublewritten); uniform non-index updates at 40 % of
                // peak, a closed-loop burst of 16 sessions from 50 s to 120 s, then 40 %
                // again.
                let mut s = base(
                    name,
                    "twin of g_checkpoint_stall: 40 % load, a burst at 50-120 s, writes limited to 16 MiB/s",
                    "001",
                    180.0,
                    SimFlavor::MariaDb1011,
                );
                s.hardware = Hardware {
                    cores: 2.0,
                    buffer_pool_pages: 65_536.0,
                    // 16 MiB/s is 512 data pages a second: every page is written
                    // twice, to the doublewrite buffer and in place (the real g held
                    // users while the device wrote 500–538 pages/s, the hundred-and-
                    // twelfth run; its limit learned at 425–570).
                    device_iops: 512.0,
                    read_iops: 0.0,
                    read_latency_ms: 0.2,
                    // The benchmark machine's virtio disk says rotational.
                    rotational: true,
                };
                // Measured (the hundred-and-twelfth run): 6.6 k TPS at peak (16
                // sessions, closed loop, 20 s) under the write limit, so the base load
                // is 2.65 k TPS; on a log large enough the burst's 16 sessions ran 25 k
                // TPS on average (18–34 k) at the CPU, and the LSN grew 380 bytes a
                // transaction, purge's included.
                s.workload.peak_tps = 6_600.0;
                s.workload.cpu_us_per_trx = 72.0;
                s.workload.redo_bytes_per_trx = 380.0 - s.workload.purge_redo_bytes_per_record;
                s.workload.clients = 16.0;
                s.workload.tables = 8.0;
                s.workload.working_set_pages = 30_000.0;
                s.load = vec![(0.0, 0.4)];
                // 16 sessions that ask more than the CPU runs.
                s.closed_loops = vec![ClosedLoop {
                    start_s: 50.0,
                    end_s: 120.0,
                    level: 5.0,
                }];
                s.server_config = KnobValues::from([(Knob::LogFileSize, 128 << 20)]);
                s
            }
            "repeated_bursts" => {
                // h_repeated_bursts: g's server, data and device, the 40 % load for
                // 270 s with two bursts, 40-90 s and 170-220 s. A redo grown in the
                // first can only show in the second.
                let mut s = Scenario::named("checkpoint_stall")?;
                s.name = name.into();
                s.title =
                    "twin of h_repeated_bursts: g's server, 40 % load, bursts at 40-90 s and \
                           170-220 s"
                        .into();
                s.duration_s = 270.0;
                s.closed_loops = vec![
                    ClosedLoop {
                        start_s: 40.0,
                        end_s: 90.0,
                        level: 5.0,
                    },
                    ClosedLoop {
                        start_s: 170.0,
                        end_s: 220.0,
                        level: 5.0,
                    },
                ];
                s
            }
            _ => return None,
        };
        Some(s)
    }

    /// Every built-in scenario, in table order.
    pub fn all() -> Vec<Scenario> {
        NAMES.iter().filter_map(|n| Scenario::named(n)).collect()
    }

    /// The same scenario compressed in time by `factor` (0.25 = a quarter as long):
    /// every time is scaled, rates are not. For fast tests; the findings hold as long as
    /// the views stay long compared with the control loop's dwell times.
    pub fn scaled(mut self, factor: f64) -> Scenario {
        let f = factor.clamp(0.001, 1.0);
        self.duration_s *= f;
        for p in &mut self.load {
            p.0 *= f;
        }
        for s in &mut self.surges {
            s.start_s *= f;
            s.end_s *= f;
        }
        for v in &mut self.views {
            v.start_s *= f;
            v.end_s *= f;
        }
        for d in &mut self.device_events {
            d.start_s *= f;
            d.end_s *= f;
        }
        for r in &mut self.restarts {
            *r *= f;
        }
        if let Some(r) = &mut self.random_views {
            r.count = ((r.count as f64 * f).ceil() as usize).max(1);
        }
        if let Some(r) = &mut self.random_surges {
            r.count = ((r.count as f64 * f).ceil() as usize).max(1);
        }
        self.initial_history *= f;
        self.initial_cold *= f;
        self
    }

    /// Draws the random parts for `seed`: the result has only concrete views and
    /// surges.
    pub fn realize(&self, seed: u64) -> Scenario {
        let mut s = self.clone();
        if let Some(rv) = s.random_views.take() {
            let mut rng = Rng::derive(seed, "views");
            for _ in 0..rv.count {
                let len = (rv.min_s.ln() + rng.uniform() * (rv.max_s.ln() - rv.min_s.ln())).exp();
                let start = rng.range(0.0, (s.duration_s - len).max(0.0));
                s.views.push(ReadView {
                    start_s: start.floor(),
                    end_s: (start + len).floor(),
                });
            }
        }
        if let Some(rs) = s.random_surges.take() {
            let mut rng = Rng::derive(seed, "surges");
            for _ in 0..rs.count {
                let len = rng.range(rs.min_s, rs.max_s);
                let start = rng.range(0.0, (s.duration_s - len).max(0.0));
                s.surges.push(Surge {
                    start_s: start.floor(),
                    end_s: (start + len).floor(),
                    factor: rng.range(rs.min_factor, rs.max_factor),
                });
            }
        }
        s.views.sort_by(|a, b| {
            a.start_s
                .total_cmp(&b.start_s)
                .then(a.end_s.total_cmp(&b.end_s))
        });
        s
    }

    /// Load level (fraction of peak) at `t_s`, surges included, before noise.
    pub fn load_at(&self, t_s: f64) -> f64 {
        let mut level = interpolate(&self.load, t_s);
        for s in &self.surges {
            if t_s >= s.start_s && t_s < s.end_s {
                level *= s.factor;
            }
        }
        level
    }

    /// The closed loops' level (fraction of peak) at `t_s`.
    pub fn closed_at(&self, t_s: f64) -> f64 {
        self.closed_loops
            .iter()
            .filter(|c| t_s >= c.start_s && t_s < c.end_s)
            .map(|c| c.level)
            .sum()
    }

    /// (throughput factor, latency factor) of the device at `t_s`.
    pub fn device_at(&self, t_s: f64) -> (f64, f64) {
        self.device_events
            .iter()
            .filter(|d| t_s >= d.start_s && t_s < d.end_s)
            .fold((1.0, 1.0), |(i, l), d| {
                (i * d.iops_factor, l * d.latency_factor)
            })
    }

    /// Start of the oldest read view open at `t_s`.
    pub fn oldest_view_at(&self, t_s: f64) -> Option<f64> {
        self.views
            .iter()
            .filter(|v| t_s >= v.start_s && t_s < v.end_s)
            .map(|v| v.start_s)
            .min_by(f64::total_cmp)
    }

    /// The startup knob values of `flavor` with this scenario's configuration on top.
    pub fn startup_knobs(&self, flavor: SimFlavor) -> KnobValues {
        let mut k = flavor.defaults();
        for (knob, v) in &self.server_config {
            // A redo size given for the other flavor maps to this flavor's knob.
            let knob = match knob {
                Knob::LogFileSize | Knob::RedoLogCapacity => flavor.redo_knob(),
                other => *other,
            };
            k.insert(knob, *v);
        }
        k
    }

    /// Seconds in which the offered load is at least 10 % of the run's mean: the
    /// seconds where throughput and jitter are judged (a gap between rounds is not a
    /// throughput collapse).
    pub fn is_loaded(&self, t_s: f64) -> bool {
        let n = 200;
        let mean = (0..n)
            .map(|i| self.load_at(self.duration_s * (i as f64 + 0.5) / n as f64))
            .sum::<f64>()
            / n as f64;
        self.load_at(t_s) >= 0.1 * mean
    }
}

/// `n` rounds of `on_s` seconds at `level` separated by `gap_s` seconds idle.
fn rounds(n: usize, on_s: f64, gap_s: f64, level: f64) -> Vec<(f64, f64)> {
    let mut pts = Vec::new();
    let mut t = 0.0;
    for _ in 0..n {
        pts.push((t, level));
        pts.push((t + on_s - 0.001, level));
        pts.push((t + on_s, 0.0));
        pts.push((t + on_s + gap_s - 0.001, 0.0));
        t += on_s + gap_s;
    }
    pts.push((t, level));
    pts
}

fn interpolate(points: &[(f64, f64)], t: f64) -> f64 {
    match points {
        [] => 0.0,
        [(_, v)] => *v,
        _ => {
            if t <= points[0].0 {
                return points[0].1;
            }
            for w in points.windows(2) {
                let ((t0, v0), (t1, v1)) = (w[0], w[1]);
                if t >= t0 && t < t1 {
                    return v0 + (v1 - v0) * (t - t0) / (t1 - t0);
                }
            }
            points[points.len() - 1].1
        }
    }
}

#[allow(dead_code)]
fn mib(x: f64) -> f64 {
    x * MIB
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_scenario_that_caps_reads_takes_another_cap() {
        let e = Scenario::named("purge_behind").unwrap();
        assert_eq!(e.hardware.read_iops, 6_000.0);
        assert_eq!(e.with_read_iops(8_000).unwrap().hardware.read_iops, 8_000.0);
        let err = Scenario::named("purge_behind")
            .unwrap()
            .with_read_iops(0)
            .unwrap_err()
            .to_string();
        assert!(err.contains("positive"), "{err}");
        let err = Scenario::named("checkpoint_stall")
            .unwrap()
            .with_read_iops(8_000)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("checkpoint_stall") && err.contains("purge_behind"),
            "names the scenario and the ones that cap reads: {err}"
        );
    }

    #[test]
    fn every_name_builds_and_realizes_deterministically() {
        for name in NAMES {
            let s = Scenario::named(name).unwrap();
            assert_eq!(&s.name, name);
            let a = s.realize(7);
            let b = s.realize(7);
            assert_eq!(a.views, b.views);
            assert_eq!(a.surges, b.surges);
            assert!(a.random_views.is_none());
        }
        assert!(Scenario::named("nope").is_none());
        let day = Scenario::named("day").unwrap().realize(1);
        assert_eq!(day.views.len(), 60);
        assert!(day
            .views
            .iter()
            .all(|v| v.end_s - v.start_s >= 9.0 && v.end_s - v.start_s <= 1000.0));
        assert_ne!(Scenario::named("day").unwrap().realize(2).views, day.views);
    }

    #[test]
    fn load_curve_and_rounds() {
        let s = Scenario::named("redo_pressure").unwrap();
        assert_eq!(s.load_at(10.0), 1.0);
        assert_eq!(s.load_at(115.0), 0.0);
        assert_eq!(s.load_at(131.0), 1.0);
        assert!(!s.is_loaded(115.0));
        assert!(s.is_loaded(10.0));
        let l = Scenario::named("long_read_view").unwrap();
        assert_eq!(l.oldest_view_at(100.0), Some(60.0));
        assert_eq!(l.oldest_view_at(200.0), None);
        let half = l.clone().scaled(0.5);
        assert_eq!(half.duration_s, 200.0);
        assert_eq!(half.views[0].start_s, 30.0);
    }

    #[test]
    fn redo_size_follows_the_flavor() {
        let s = Scenario::named("redo_pressure").unwrap();
        let m = s.startup_knobs(SimFlavor::MySql80);
        assert_eq!(m[&Knob::RedoLogCapacity], 512 << 20);
        let r = s.startup_knobs(SimFlavor::MariaDb1011);
        assert_eq!(r[&Knob::LogFileSize], 512 << 20);
        assert!(!r.contains_key(&Knob::RedoLogCapacity));
    }
}
