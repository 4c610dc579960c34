//! The redo-resize actuator against the real server: what the flush policy's redo
//! headroom assumes about `SET GLOBAL innodb_log_file_size` (MariaDB ≥ 10.9) is what a
//! private MariaDB 10.11 does.
//!
//! The policy (`policy::flush`, "What a resize at 100 % fill does", from
//! `log_t::resize_start()` and `log_t::write_checkpoint()` in log0log.cc) relies on
//! three things:
//!
//! 1. The larger maximum checkpoint age is adopted only once the checkpoint has passed
//!    the LSN at which the SET began: every page changed before it is flushed first,
//!    so a resize started at a high fill brings relief only after the whole age is
//!    written, and the checkpoint age right after it is at most the redo written
//!    during the resize.
//! 2. Only the session running the SET waits: users keep writing meanwhile (the
//!    actuator runs it on a connection of its own, `Knob::is_blocking`, bounded by
//!    `resize_timeout`).
//! 3. The maximum checkpoint age is the same share of the file after the resize as
//!    before: the recovery-time bound turns the largest safe age into a file size by
//!    dividing by that share (`Flush::recovery_bound`).
//!
//! The resize goes through innopilot's own actuator (`LiveServer::set_knob`) while an
//! update load keeps the checkpoint age above half its maximum and a second connection
//! polls the status counters. Fails (never skips) when the server cannot start.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::run::unix_ms;
use common::MariaDb;
use innopilot::config::Config;
use innopilot::control::audit::{AuditLog, Mode};
use innopilot::control::recover;
use innopilot::control::state::StateFile;
use innopilot::server::dsn::parse_dsn;
use innopilot::server::mysql::{LiveOptions, LiveServer};
use innopilot::server::{Knob, Server, ServerError};

const MIB: u64 = 1 << 20;

/// One poll of the redo counters on a connection of its own.
#[derive(Debug, Clone, Copy)]
struct Poll {
    at: Duration,
    max_age: u64,
    checkpoint_lsn: u64,
    lsn: u64,
    updates: u64,
}

async fn poll(db: &MariaDb, t0: Instant, updates: u64) -> Poll {
    let rows = db
        .query_rows(
            "SHOW GLOBAL STATUS WHERE Variable_name IN ('Innodb_checkpoint_max_age', \
             'Innodb_lsn_last_checkpoint', 'Innodb_lsn_current')",
        )
        .await;
    let get = |name: &str| -> u64 {
        rows.iter()
            .find(|r| r.first().cloned().flatten().as_deref() == Some(name))
            .and_then(|r| r.get(1).cloned().flatten())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("status {name} missing or not an integer: {rows:?}"))
    };
    Poll {
        at: t0.elapsed(),
        max_age: get("Innodb_checkpoint_max_age"),
        checkpoint_lsn: get("Innodb_lsn_last_checkpoint"),
        lsn: get("Innodb_lsn_current"),
        updates,
    }
}

/// sync point / capacity as innopilot's sampler reads them.
async fn share(server: &mut LiveServer) -> (u64, u64) {
    let s = server.sample().await.expect("a sample");
    let sync = s.redo.sync_point.expect("the sampler read the sync point");
    let cap = s.redo.capacity.expect("the sampler read the redo capacity");
    (sync, cap)
}

/// A private MariaDB with a 32 MiB redo, 200 000 rows and slow background flushing,
/// so the checkpoint age grows under the load and a resize has a large age to flush
/// before it can be adopted; and innopilot's live server on it, probed.
async fn slow_flushing_server() -> (MariaDb, LiveServer) {
    let db = MariaDb::builder()
        .buffer_pool_size("128M")
        .log_file_size("32M")
        .args([
            "--innodb-io-capacity=100",
            "--innodb-io-capacity-max=100",
            "--innodb-max-dirty-pages-pct=90",
        ])
        .start();
    db.prepare_table(200_000).await;
    let target = parse_dsn(&db.dsn()).unwrap();
    let mut server = LiveServer::new(target, LiveOptions::default());
    server.probe().await.expect("probe");
    (db, server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resize_is_adopted_once_the_checkpoint_passes_it_and_blocks_only_its_session() {
    const FROM: u64 = 32 * MIB;
    const TO: u64 = 64 * MIB;
    let (db, mut server) = slow_flushing_server().await;
    let (sync0, cap0) = share(&mut server).await;
    assert_eq!(
        cap0, FROM,
        "the sampler's redo capacity is innodb_log_file_size"
    );

    let load = db.spawn_update_load(4);
    let t0 = Instant::now();
    let mut before = poll(&db, t0, load.updates()).await;
    while before.lsn - before.checkpoint_lsn < before.max_age / 2 {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the checkpoint age did not reach half its maximum in 60 s: {before:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        before = poll(&db, t0, load.updates()).await;
    }
    let age_before = before.lsn - before.checkpoint_lsn;

    // Poll on another connection while the actuator's SET runs.
    let polls = Arc::new(Mutex::new(Vec::new()));
    let done = Arc::new(AtomicBool::new(false));
    let set_started = t0.elapsed();
    let lsn_at_set = poll(&db, t0, load.updates()).await.lsn;
    let resized = {
        let (polls, done) = (polls.clone(), done.clone());
        let watcher = async {
            while !done.load(Ordering::Relaxed) {
                let p = poll(&db, t0, load.updates()).await;
                polls.lock().unwrap().push(p);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        };
        let set = async {
            let r = server.set_knob(Knob::LogFileSize, TO).await;
            done.store(true, Ordering::Relaxed);
            r
        };
        tokio::join!(set, watcher).0
    };
    let set_took = t0.elapsed() - set_started;
    let after = poll(&db, t0, load.updates()).await;
    let stats = load.stop().await;
    assert_eq!(
        resized.expect("the actuator's resize"),
        TO,
        "read back after the SET"
    );
    let polls = polls.lock().unwrap().clone();
    let (sync1, cap1) = share(&mut server).await;

    // Users wrote while the SET ran: only its session waited.
    let during = polls
        .last()
        .map_or(0, |p| p.updates)
        .saturating_sub(before.updates);
    eprintln!(
        "redo resize {} → {} MiB at a checkpoint age of {} MiB (max {} MiB): the SET took \
         {set_took:?}, {} updates meanwhile, {} polls; max age {} → {} MiB; sync/capacity \
         {:.4} → {:.4}; load: {} updates, {} errors",
        FROM / MIB,
        TO / MIB,
        age_before / MIB,
        before.max_age / MIB,
        during,
        polls.len(),
        before.max_age / MIB,
        after.max_age / MIB,
        sync0 as f64 / cap0 as f64,
        sync1 as f64 / cap1 as f64,
        stats.updates,
        stats.errors,
    );
    assert!(
        polls.len() >= 2,
        "the SET took {set_took:?}: too short to watch (age {} MiB); the test needs a \
         larger age or slower flushing",
        age_before / MIB
    );
    assert!(
        during > 0,
        "no update completed during the {set_took:?} the SET ran: users were blocked"
    );
    assert_eq!(stats.errors, 0, "the load failed: {:?}", stats.last_error);

    // 1. Adopted only once the checkpoint passed the SET's LSN.
    for p in &polls {
        if p.max_age > before.max_age {
            assert!(
                p.checkpoint_lsn >= lsn_at_set,
                "the larger maximum age was in effect at {:?} with the checkpoint at {} \
                 before the SET's LSN {lsn_at_set}: {p:?}",
                p.at,
                p.checkpoint_lsn
            );
        }
    }
    assert!(
        after.checkpoint_lsn >= lsn_at_set,
        "the SET returned with the checkpoint at {} before its LSN {lsn_at_set}: the age \
         right after a resize is not bounded by the redo written while it ran",
        after.checkpoint_lsn
    );
    // 3. The maximum age is the same share of the file before and after.
    assert_eq!(cap1, TO, "the sampler's capacity after the resize");
    let (r0, r1) = (sync0 as f64 / cap0 as f64, sync1 as f64 / cap1 as f64);
    assert!(
        (r1 / r0 - 1.0).abs() <= 0.02,
        "the maximum checkpoint age is {r0:.4} of the file before the resize and {r1:.4} \
         after: the recovery bound's size conversion does not hold"
    );
    assert!(
        (after.max_age as f64 / before.max_age as f64 - 2.0).abs() <= 0.04,
        "doubling the file took the maximum age {} → {}",
        before.max_age,
        after.max_age
    );
}

/// Waits until the checkpoint age is above half its maximum under the load.
async fn age_above_half(db: &MariaDb, t0: Instant, load: &common::LoadHandle) -> Poll {
    let mut p = poll(db, t0, load.updates()).await;
    while p.lsn - p.checkpoint_lsn < p.max_age / 2 {
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "the checkpoint age did not reach half its maximum in 120 s: {p:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        p = poll(db, t0, load.updates()).await;
    }
    p
}

/// [`slow_flushing_server`] under an update load, once the checkpoint age is above
/// half its maximum (a resize then has a large age to flush); the load's start time.
async fn resizable_under_load() -> (MariaDb, LiveServer, common::LoadHandle, Instant) {
    let (db, server) = slow_flushing_server().await;
    let load = db.spawn_update_load(4);
    let t0 = Instant::now();
    age_above_half(&db, t0, &load).await;
    (db, server, load, t0)
}

/// The seam the control loop relies on so that a resize does not stop it
/// (`Server::start_set`, `Controller::settle_in_flight`): the SET runs on a session of
/// its own and `start_set` returns before the server is done, the sampling connection
/// keeps answering meanwhile, and the returned future finishes with the size read back.
/// And what innopilot does when it stops during a resize (`Controller::stop_in_flight`):
/// `KILL QUERY` on that session makes MariaDB abandon the resize
/// (`innodb_log_file_size_update()` in ha_innodb.cc calls `log_t::resize_abort()` when
/// the statement is killed): the SET answers OK with the old size read back, the size
/// stays and `ib_logfile101` is gone. The loop audits such an answer as failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_started_resize_leaves_sampling_free_and_stops_with_kill_query() {
    const FROM: u64 = 32 * MIB;
    const TO: u64 = 64 * MIB;
    const ABANDONED: u64 = 96 * MIB;
    let (db, mut server, load, t0) = resizable_under_load().await;

    // 1. Started, not finished: the sampling connection answers meanwhile.
    let asked = Instant::now();
    let pending = server
        .start_set(Knob::LogFileSize, TO)
        .await
        .expect("the resize starts");
    let returned_after = asked.elapsed();
    assert!(
        pending.session_id.is_some(),
        "the resize's session is known, to stop it"
    );
    let task = tokio::spawn(pending.set);
    let mut samples_during = 0;
    let mut adopted = false;
    while !task.is_finished() {
        let s = server
            .sample()
            .await
            .expect("a sample while the resize runs");
        // The server adopts the new file a moment before the SET's answer arrives: a
        // sample in between sees the new size, and from then on only that.
        match s.redo.capacity {
            Some(FROM) if !adopted => {
                if !task.is_finished() {
                    samples_during += 1;
                }
            }
            Some(TO) => adopted = true,
            other => panic!(
                "while the resize ran the sampler read {other:?}: neither the size before \
                 it ({FROM}) nor, once adopted, the new one ({TO})"
            ),
        }
        assert!(
            t0.elapsed() < Duration::from_secs(240),
            "the resize did not end in 240 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let readback = task.await.expect("the task").expect("the resize");
    let finished_after = asked.elapsed();
    eprintln!(
        "start_set returned after {returned_after:?}; the resize ended after \
         {finished_after:?}; {samples_during} samples on the sampling connection meanwhile"
    );
    assert_eq!(readback, TO, "read back on the resize's own session");
    assert!(
        samples_during >= 2,
        "the resize took {finished_after:?}: too short to show sampling during it"
    );
    assert!(
        returned_after < finished_after / 2,
        "start_set returned after {returned_after:?} of a {finished_after:?} resize: it \
         waited for the server"
    );

    // 2. Stopped with KILL QUERY: abandoned.
    age_above_half(&db, t0, &load).await;
    let pending = server
        .start_set(Knob::LogFileSize, ABANDONED)
        .await
        .expect("the second resize starts");
    let id = pending.session_id.expect("its session");
    let task = tokio::spawn(pending.set);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !task.is_finished(),
        "the second resize ended within 0.5 s: nothing left to stop"
    );
    server.kill_query(id).await.expect("KILL QUERY");
    let outcome = tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .expect("the killed resize returns within 30 s")
        .expect("the task");
    let stats = load.stop().await;
    // MariaDB answers it with OK: the statement ends, the size read back is the old one.
    assert_eq!(
        outcome.expect("the killed resize's answer"),
        TO,
        "the killed resize read back another size than the one before it"
    );
    let s = server.sample().await.expect("a sample after the kill");
    ended_at(&db, s.redo.capacity, TO, "the abandoned resize", &stats);
}

/// After a resize has ended (`what`): the size in effect is `want`, no
/// `ib_logfile101` is left, and the load ran without an error.
fn ended_at(db: &MariaDb, capacity: Option<u64>, want: u64, what: &str, stats: &common::LoadStats) {
    assert_eq!(capacity, Some(want), "{what}: another size in effect");
    assert!(
        !db.datadir().join("ib_logfile101").exists(),
        "{what} left ib_logfile101 behind"
    );
    assert_eq!(stats.errors, 0, "the load failed: {:?}", stats.last_error);
}

/// What the server does with a resize whose client is gone, and what crash recovery
/// does about it. innopilot drops such a SET with its connection in two ways: at exit
/// a redo shrink that outlasts `control.restore_timeout` is handed over to the server
/// (`Controller::restore_resize`), and a run that dies mid-resize takes its
/// connection with it. MariaDB's `innodb_log_file_size_update()` stops waiting only
/// when the statement is killed (`thd_kill_level()`); a closed socket does not kill
/// it, so the resize goes on and the server adopts the size asked for once the
/// checkpoint passes the SET's LSN. Until then the old size reads as in effect and the
/// server refuses another resize ("change is already in progress"), so crash recovery
/// (`control::recover`, the next start or `innopilot restore`) waits for it first
/// (`Server::resizes_under_way`): here a run died while growing 32 → 48 MiB, and
/// recovery finds the grow under way, waits for it to land and then puts the 32 MiB
/// baseline back. Read at once, the size would have been taken for the baseline and
/// the grow left behind. A recovery whose wait ends first leaves the size alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resize_whose_client_is_gone_is_finished_by_the_server_and_waited_for() {
    const FROM: u64 = 32 * MIB;
    const TO: u64 = 48 * MIB;
    let (db, mut server, load, _) = resizable_under_load().await;
    // Written now, after the server's start: a state older than the server's start
    // is one whose SETs a restart undid (`LeaveReason::ServerRestarted`).
    let now_ms = unix_ms();
    let mut state = StateFile::new(
        1,
        "the test's server".into(),
        now_ms,
        [(Knob::LogFileSize, FROM)].into(),
    );
    state.instance = server.instance();
    state.record_set(Knob::LogFileSize, TO, now_ms);
    let pending = server
        .start_set(Knob::LogFileSize, TO)
        .await
        .expect("the resize starts");
    let task = tokio::spawn(pending.set);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !task.is_finished(),
        "the resize ended within 0.5 s: nothing left to drop"
    );
    // As a run that dies does: the future, and with it the connection, is dropped.
    task.abort();
    let _ = task.await;
    let dropped = Instant::now();
    let under_way = server.resizes_under_way().await.expect("the process list");
    assert_eq!(
        under_way.len(),
        1,
        "the dropped resize still runs: {under_way:?}"
    );
    // Another size is refused while it runs (ER_WRONG_USAGE, 1221), told apart by the
    // error's number, not its text: recovery waits that out instead of failing.
    let refused = server.set_knob(Knob::LogFileSize, 40 * MIB).await;
    assert!(
        matches!(
            refused,
            Err(ServerError::ResizeUnderWay {
                knob: Knob::LogFileSize,
                ..
            })
        ),
        "a second resize is refused as one under way: {refused:?}"
    );
    let mut cfg = Config::default();
    // The test's redo is smaller than the shipped lower bound (64 MiB).
    cfg.knobs.get_mut(&Knob::LogFileSize).unwrap().min = FROM;
    // A wait that ends first (the hundred-and-fourteenth benchmark run's restart: a
    // shrink handed over at exit outlasted the 2 min): the size is left to the
    // resize, not SET over it, which the server refuses ("already in progress") and
    // which failed that start.
    // Its state asks to put 16 MiB back from the 32 MiB in effect (as a shrink handed
    // over at exit leaves it: the grown size reads until the server adopts the new).
    cfg.server.resize_timeout = Duration::from_secs(1);
    cfg.knobs.get_mut(&Knob::LogFileSize).unwrap().min = 16 * MIB;
    let mut behind = StateFile::new(
        1,
        "the test's server".into(),
        now_ms,
        [(Knob::LogFileSize, 16 * MIB)].into(),
    );
    behind.instance = server.instance();
    behind.record_set(Knob::LogFileSize, FROM, now_ms);
    let short = recover(
        &mut server,
        &behind,
        &cfg,
        "the test's server",
        &mut AuditLog::discard(),
        Mode::Live,
        false,
    )
    .await
    .expect("recovery with a short wait");
    assert_eq!(
        (short.left.as_slice(), short.failed.as_slice()),
        ([Knob::LogFileSize].as_slice(), [].as_slice()),
        "left to the resize under way: {short:?}"
    );
    assert_eq!(short.incomplete(), None, "the start goes on: {short:?}");
    let stats = load.stop().await;
    cfg.server.resize_timeout = Duration::from_secs(180);
    cfg.knobs.get_mut(&Knob::LogFileSize).unwrap().min = FROM;
    let mut audit = AuditLog::discard();
    let report = recover(
        &mut server,
        &state,
        &cfg,
        "the test's server",
        &mut audit,
        Mode::Live,
        false,
    )
    .await
    .expect("recovery");
    let s = server.sample().await.expect("a sample after recovery");
    eprintln!(
        "recovery ended after {:?}: {report:?}, capacity {:?}",
        dropped.elapsed(),
        s.redo.capacity
    );
    assert_eq!(
        (
            report.restored.as_slice(),
            report.already.as_slice(),
            report.failed.as_slice()
        ),
        ([Knob::LogFileSize].as_slice(), [].as_slice(), [].as_slice()),
        "recovery waited for the grow, then put the baseline back: {report:?}"
    );
    ended_at(
        &db,
        s.redo.capacity,
        FROM,
        "recovery after the dropped grow",
        &stats,
    );
}

/// The audit records of one event in the log at `path`.
fn events(path: &std::path::Path, name: &str) -> Vec<serde_json::Value> {
    common::run::read_jsonl(path)
        .into_iter()
        .filter(|r| r["event"] == name)
        .collect()
}

/// A controller on `db` with the state file `state` and the test's redo bounds,
/// started (crash recovery done), its audit log at `audit`.
async fn controller(
    db: &MariaDb,
    state: &std::path::Path,
    audit: &std::path::Path,
) -> innopilot::control::Controller<LiveServer> {
    let target = parse_dsn(&db.dsn()).unwrap();
    let server = LiveServer::new(target, LiveOptions::default());
    let mut cfg = Config::default();
    cfg.control.state_file = state.to_path_buf();
    // Room for the shrink at a quiet exit to land within the test.
    cfg.control.restore_timeout = Duration::from_secs(60);
    // The test's redo is smaller than the shipped lower bound (64 MiB).
    cfg.knobs.get_mut(&Knob::LogFileSize).unwrap().min = 32 * MIB;
    cfg.audit.path = audit.to_path_buf();
    let audit = AuditLog::open(&cfg.audit).expect("the audit log");
    let opts = innopilot::control::RunOptions {
        dry_run: false,
        config_path: None,
        target: "the test's server".into(),
    };
    innopilot::control::Controller::start(server, cfg, opts, audit)
        .await
        .expect("the controller starts")
}

/// The exit restore against the real server (`control::restore`,
/// `exit_keeps_grown_redo`): a redo log innopilot grew is kept while users write,
/// because a shrink is adopted only once the checkpoint passes the LSN of its SET and
/// lands what users write meanwhile in the smaller log; and shrunk back when they
/// write little (under `redo_shrink_fill_pct`, 25 %, of the baseline log's maximum
/// checkpoint age a minute: the prediction is that the shrink then lands under that
/// share). Here a previous run grew 32 → 64 MiB and kept it (its state file says so).
/// The next start carries it on instead of shrinking it at start; its exit under the
/// update load keeps it; a start and exit once the load has stopped put the 32 MiB
/// back, although the idle server still holds its checkpoint age (the page cleaner
/// does not flush under `innodb_max_dirty_pages_pct`), and the shrink lands with
/// the age written meanwhile, under 25 % of the 32 MiB log's maximum.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grown_redo_is_kept_at_a_busy_exit_and_shrunk_at_a_quiet_one() {
    const BASE: u64 = 32 * MIB;
    const GROWN: u64 = 64 * MIB;
    let (db, mut server) = slow_flushing_server().await;
    let dir = tempfile::tempdir().unwrap();
    let state_path = dir.path().join("state.json");
    // What a run that grew the log and kept it at exit leaves, written now: a state
    // older than the server's start would be a server that restarted since, whose
    // size is its own (`LeaveReason::ServerRestarted`; checked at the end).
    let readback = server
        .set_knob(Knob::LogFileSize, GROWN)
        .await
        .expect("grow");
    assert_eq!(readback, GROWN);
    let now_ms = unix_ms();
    let mut saved = StateFile::new(
        1,
        "the test's server".into(),
        now_ms,
        [(Knob::LogFileSize, BASE)].into(),
    );
    saved.instance = server.instance();
    saved.record_set(Knob::LogFileSize, GROWN, now_ms);
    saved.kept = vec![Knob::LogFileSize];
    let store = innopilot::control::state::StateStore::new(&state_path);
    store.save(&saved).unwrap();
    drop(server);

    // 1. Under load: carried on at start, kept at exit.
    let load = db.spawn_update_load(4);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let busy_audit = dir.path().join("busy.audit.jsonl");
    let mut ctl = controller(&db, &state_path, &busy_audit).await;
    assert_eq!(
        ctl.baseline().get(&Knob::LogFileSize),
        Some(&BASE),
        "the carried log's baseline is the saved one, not its grown size"
    );
    assert_eq!(current_size(&db).await, GROWN, "not shrunk at start");
    for _ in 0..4 {
        ctl.tick().await.expect("a tick");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(ctl.shutdown("test: busy").await, "keeping is not a failure");
    let kept = events(&busy_audit, "kept");
    eprintln!("busy exit: {kept:?}");
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert_eq!(
        (&kept[0]["value"], &kept[0]["baseline"]),
        (&GROWN.into(), &BASE.into())
    );
    assert_eq!(current_size(&db).await, GROWN, "kept at exit");
    let st = store.load().unwrap().unwrap();
    assert!(!st.clean && st.kept == [Knob::LogFileSize], "{st:?}");
    assert_eq!(st.baseline.get(&Knob::LogFileSize), Some(&BASE));
    drop(ctl);
    let stats = load.stop().await;
    assert_eq!(stats.errors, 0, "the load failed: {:?}", stats.last_error);

    // 2. Quiet: carried on again, and shrunk back at exit.
    let age = db.status_u64("Innodb_checkpoint_age").await;
    let quiet_audit = dir.path().join("quiet.audit.jsonl");
    let mut ctl = controller(&db, &state_path, &quiet_audit).await;
    assert_eq!(ctl.baseline().get(&Knob::LogFileSize), Some(&BASE));
    for _ in 0..4 {
        ctl.tick().await.expect("a tick");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let rate = ctl.last_signals().and_then(|s| s.lsn_rate);
    let asked = Instant::now();
    assert!(ctl.shutdown("test: quiet").await, "the exit restores");
    let took = asked.elapsed();
    let landed_age = db.status_u64("Innodb_checkpoint_age").await;
    let max = db.status_u64("Innodb_checkpoint_max_age").await;
    eprintln!(
        "quiet exit: {age} bytes of checkpoint age at start, users writing {rate:?} B/s; \
         the shrink took {took:?} and landed at {landed_age} of {max} ({:.1} %); {:?}",
        landed_age as f64 / max as f64 * 100.0,
        events(&quiet_audit, "restore")
    );
    assert!(events(&quiet_audit, "kept").is_empty());
    assert_eq!(current_size(&db).await, BASE, "shrunk back at a quiet exit");
    assert!(
        (landed_age as f64) < max as f64 * 0.25,
        "the shrink landed at {landed_age} of {max}: the prediction was under 25 %"
    );
    let st = store.load().unwrap().unwrap();
    assert!(st.clean && st.kept.is_empty(), "{st:?}");
    assert!(!db.datadir().join("ib_logfile101").exists());

    // 3. The same kept state as if written before the server last started (here: a
    // second after the epoch): the size in effect is the server's own, left alone,
    // and so is any other knob at what innopilot had set (the server's option files
    // could say the same).
    let target = parse_dsn(&db.dsn()).unwrap();
    let mut server = LiveServer::new(target, LiveOptions::default());
    server.probe().await.expect("probe");
    server
        .set_knob(Knob::LogFileSize, GROWN)
        .await
        .expect("grow");
    server
        .set_knob(Knob::IoCapacity, 1_234)
        .await
        .expect("io_capacity");
    let mut before_start = saved.clone();
    before_start.baseline.insert(Knob::IoCapacity, 200);
    before_start.record_set(Knob::IoCapacity, 1_234, 1_000);
    before_start.updated_unix_ms = 1_000;
    let mut cfg = Config::default();
    cfg.knobs.get_mut(&Knob::LogFileSize).unwrap().min = BASE;
    let report = recover(
        &mut server,
        &before_start,
        &cfg,
        "the test's server",
        &mut AuditLog::discard(),
        Mode::Live,
        true,
    )
    .await
    .expect("recovery");
    let mut left = report.left.clone();
    left.sort();
    let mut want = vec![Knob::LogFileSize, Knob::IoCapacity];
    want.sort();
    assert_eq!(
        (left, report.carried.as_slice(), report.restored.as_slice()),
        (want, [].as_slice(), [].as_slice()),
        "{report:?}"
    );
    assert_eq!(current_size(&db).await, GROWN);
    let rows = db.query_rows("SELECT @@GLOBAL.innodb_io_capacity").await;
    assert_eq!(rows[0][0].as_deref(), Some("1234"));
}

/// `@@innodb_log_file_size` as the server reports it now.
async fn current_size(db: &MariaDb) -> u64 {
    let rows = db.query_rows("SELECT @@GLOBAL.innodb_log_file_size").await;
    rows[0][0].as_deref().unwrap().parse().unwrap()
}
