//! Black-box tests of `innopilot run` against a private MariaDB: dry-run changes
//! nothing, live mode moves purge threads within bounds and restores the baseline on
//! SIGTERM, a SIGKILLed run is cleaned up by the next start, an operator's SET is never
//! reverted, and an account without SET privileges is refused with exit code 3.

mod common;

use std::process::{Child, Command};
use std::time::Duration;

use common::configs;
use common::run::{
    events, globals, is, kill, knob, stop, succeeded, wait_exit, wait_for_applied, wait_for_event,
    wait_for_record, wait_knob_moved, Run,
};
use common::{eventually, innopilot_bin, loaded_server, LoadHandle, MariaDb, ReadViewHandle};

/// The watermark config: purge threads move within seconds under a small load.
fn config() -> String {
    configs::watermark().build()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_decides_but_changes_nothing() {
    let (db, load) = loaded_server().await;
    let before = globals(&db).await;
    let run = Run::with_config(&config());
    let child = run.spawn(&db.dsn(), &["--dry-run"]);
    wait_for_event(&run, "decision", 1, Duration::from_secs(40)).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    stop(child, Duration::from_secs(20));
    drop(load);
    let after = globals(&db).await;
    assert_eq!(before, after, "dry-run changed a server variable");
    let recs = run.records();
    assert!(
        recs.iter().all(|r| r["mode"] == "dry_run"),
        "every record is dry_run"
    );
    let decisions = events(&recs, "decision");
    assert!(decisions
        .iter()
        .any(|d| d["outcome"] == "dry_run" && d["knob"] == "innodb_purge_threads"));
    assert!(decisions.iter().all(|d| d["applied"] == false));
    assert!(
        decisions[0]["reason"]
            .as_str()
            .unwrap()
            .contains("redo fill"),
        "{}",
        decisions[0]
    );
    assert!(
        !run.state().exists()
            || !std::fs::read_to_string(run.state())
                .unwrap()
                .contains("\"last_set\": {\n"),
        "dry-run needs no state"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_run_moves_purge_threads_within_bounds_and_sigterm_restores() {
    let (db, load) = loaded_server().await;
    let before = globals(&db).await;
    let run = Run::with_config(&config());
    let (view, child, first) = applied_run(&db, &run, &[]).await;
    let to = first["to"].as_u64().unwrap();
    assert!((1..=4).contains(&to), "{first}");
    assert_eq!(first["readback"], first["to"]);
    // The change is really in effect (until innopilot moves it again).
    let live = knob(&db, "innodb_purge_threads").await;
    assert!((1..=4).contains(&live));
    tokio::time::sleep(Duration::from_secs(4)).await;
    stop(child, Duration::from_secs(20));
    view.release().await;
    drop(load);
    let recs = run.records();
    for d in events(&recs, "decision")
        .iter()
        .filter(|d| d["knob"] == "innodb_purge_threads")
    {
        let v = d["to"].as_u64().unwrap();
        assert!((1..=4).contains(&v), "out of bounds: {d}");
        let step = (v as i64 - d["from"].as_i64().unwrap()).abs();
        assert!(step <= 1, "step above max_step: {d}");
    }
    let stop = events(&recs, "stop");
    assert_eq!(stop.len(), 1);
    assert_eq!(stop[0]["restored"], true);
    assert!(!events(&recs, "restore").is_empty(), "restore records");
    let after = globals(&db).await;
    assert_eq!(before, after, "baseline not restored after SIGTERM");
}

/// Holds a read view (so history keeps growing), then starts a live run with `extra`
/// arguments; returns once it has applied a purge-thread decision, with that decision.
async fn applied_run(
    db: &MariaDb,
    run: &Run,
    extra: &[&str],
) -> (ReadViewHandle, Child, serde_json::Value) {
    let view = db.hold_read_view().await;
    let child = run.spawn(&db.dsn(), extra);
    let first = wait_for_applied(run, "innodb_purge_threads", Duration::from_secs(40)).await;
    (view, child, first)
}

/// A live run on a loaded server (read view held, a purge-thread decision applied),
/// then an operator's `SET GLOBAL innodb_purge_threads = value`; returns once the run
/// noticed it.
async fn operator_took_purge_threads(
    value: u64,
) -> (MariaDb, LoadHandle, Run, ReadViewHandle, Child) {
    let (db, load) = loaded_server().await;
    let run = Run::with_config(&config());
    let (view, child, _) = applied_run(&db, &run, &[]).await;
    db.exec(&format!("SET GLOBAL innodb_purge_threads = {value}"))
        .await;
    wait_for_record(
        &run,
        "operator_override in the audit log",
        Duration::from_secs(10),
        |r| is(r, "operator_override", "innodb_purge_threads"),
    )
    .await;
    (db, load, run, view, child)
}

/// Starts a live run, waits until it has moved purge threads away from `baseline`,
/// then SIGKILLs it: a crash that leaves the knob changed.
async fn kill_once_moved(db: &MariaDb, run: &Run, baseline: u64) {
    let child = run.spawn(&db.dsn(), &[]);
    wait_knob_moved(
        db,
        "innodb_purge_threads",
        baseline,
        Duration::from_secs(40),
    )
    .await;
    kill(child);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_then_next_start_restores_the_baseline() {
    let (db, load) = loaded_server().await;
    let baseline = knob(&db, "innodb_purge_threads").await;
    let run = Run::with_config(&config());
    kill_once_moved(&db, &run, baseline).await;
    drop(load);
    let left = knob(&db, "innodb_purge_threads").await;
    assert_ne!(
        left, baseline,
        "precondition: the killed run left the knob changed"
    );
    let state = std::fs::read_to_string(run.state()).unwrap();
    assert!(state.contains("\"clean\": false"), "{state}");
    // `status` reads the lock, not only the file: the killed run is not running.
    let status = run.status_json(&db.dsn());
    assert_eq!(
        (
            &status["controller"]["state"],
            &status["controller"]["running"]
        ),
        (&"unrestored".into(), &false.into()),
        "{status}"
    );

    // A new start cleans up before anything else: the crashed run's value goes back to
    // the baseline, and the new run's own baseline is the original one, not the value
    // the crashed run left.
    let child = run.spawn(&db.dsn(), &[]);
    wait_for_event(&run, "start", 2, Duration::from_secs(20)).await;
    let recs = run.records();
    let second_start = recs.iter().rposition(|r| r["event"] == "start").unwrap();
    assert!(
        recs[..second_start].iter().any(|r| r["event"] == "restore"
            && r["trigger"] == "crash_recovery"
            && r["knob"] == "innodb_purge_threads"
            && r["to"] == baseline
            && r["readback"] == baseline),
        "no crash_recovery restore before the second start"
    );
    assert_eq!(
        recs[second_start]["baseline"]["innodb_purge_threads"],
        baseline
    );
    stop(child, Duration::from_secs(20));
    assert_eq!(knob(&db, "innodb_purge_threads").await, baseline);

    // The same after another kill, with `innopilot restore` instead of a new run.
    let load = db.spawn_update_load(4);
    kill_once_moved(&db, &run, baseline).await;
    drop(load);
    succeeded(run.restore(&db.dsn()));
    assert_eq!(knob(&db, "innodb_purge_threads").await, baseline);
    let state = std::fs::read_to_string(run.state()).unwrap();
    assert!(state.contains("\"clean\": true"), "{state}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_set_is_never_reverted() {
    // An operator picks a value innopilot would never choose (above its max of 4).
    let (db, load, run, view, child) = operator_took_purge_threads(7).await;
    // `status` shows the knob as operator-owned.
    let status = run.status_json(&db.dsn());
    assert_eq!(
        status["controller"]["operator_owned"]["innodb_purge_threads"], 7,
        "{status}"
    );
    assert_eq!(status["controller"]["running"], true);
    assert_eq!(status["controller"]["state"], "running");
    // Redo fill keeps moving under the load; innopilot must leave the knob alone.
    for _ in 0..12 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(
            knob(&db, "innodb_purge_threads").await,
            7,
            "innopilot reverted the operator"
        );
    }
    stop(child, Duration::from_secs(20));
    view.release().await;
    drop(load);
    // Not even the exit restore touches it.
    assert_eq!(knob(&db, "innodb_purge_threads").await, 7);
    let recs = run.records();
    let override_at = recs
        .iter()
        .position(|r| r["event"] == "operator_override")
        .unwrap();
    assert!(
        recs[override_at..]
            .iter()
            .all(|r| !(r["knob"] == "innodb_purge_threads"
                && (r["event"] == "decision" && r["applied"] == true || r["event"] == "restore"))),
        "innopilot touched the knob after the override"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_set_privilege_live_exits_3_and_dry_run_works() {
    let db = MariaDb::new();
    let dsn = db
        .create_user(
            "observer",
            "obs-pw-9",
            &["PROCESS ON *.*", "REPLICATION CLIENT ON *.*"],
        )
        .await;
    let run = Run::with_config(&config());
    let child = run.spawn(&dsn, &[]);
    let (code, err) = wait_exit(child, Duration::from_secs(20));
    assert_eq!(code, Some(3), "stderr: {err}");
    assert!(
        err.contains("GRANT SUPER ON *.* TO 'observer'@'127.0.0.1'"),
        "{err}"
    );
    assert!(err.contains("--dry-run"), "{err}");
    assert!(!err.contains("obs-pw-9"), "password leaked: {err}");

    let child = run.spawn(&dsn, &["--dry-run"]);
    wait_for_event(&run, "start", 1, Duration::from_secs(20)).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop(child, Duration::from_secs(20));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_of_a_recorded_live_run_makes_the_same_decisions() {
    let (db, load) = loaded_server().await;
    let run = Run::with_config(&config());
    let recording = run.dir.path().join("recording.jsonl");
    let (view, child, _) = applied_run(&db, &run, &["--record", recording.to_str().unwrap()]).await;
    tokio::time::sleep(Duration::from_secs(6)).await;
    stop(child, Duration::from_secs(20));
    view.release().await;
    drop(load);

    let applied = |outcome: &serde_json::Value| outcome == "applied" || outcome == "clipped";
    let live: Vec<(String, u64, u64)> = events(&run.records(), "decision")
        .iter()
        .filter(|d| applied(&d["outcome"]))
        .map(|d| knob_move(d))
        .collect();
    assert!(
        live.len() >= 2,
        "the live run made too few decisions to compare: {live:?}"
    );

    let out = succeeded(
        Command::new(innopilot_bin())
            .args(["replay", "--json", "--config"])
            .arg(run.config())
            .arg(&recording)
            .output()
            .unwrap(),
    );
    let replayed: Vec<(String, u64, u64)> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .flat_map(|step| step["decisions"].as_array().cloned().unwrap_or_default())
        .filter(|d| applied(&d["outcome"]))
        .map(|d| knob_move(&d))
        .collect();
    assert_eq!(
        replayed, live,
        "the replay decided differently from the live run"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_hands_an_operator_owned_knob_back() {
    // Above innopilot's max of 4, so it can never be mistaken for innopilot's own value.
    let (db, load, run, view, child) = operator_took_purge_threads(6).await;
    succeeded(
        Command::new(innopilot_bin())
            .args(["release", "innodb_purge_threads", "--config"])
            .arg(run.config())
            .output()
            .unwrap(),
    );
    let released_at = eventually(
        "a released record",
        Duration::from_secs(10),
        Duration::from_millis(100),
        || async {
            let recs = run.records();
            recs.iter()
                .position(|r| r["event"] == "released" && r["knob"] == "innodb_purge_threads")
        },
    )
    .await;
    // Handed back: innopilot manages it again (redo fill keeps moving under the load)…
    eventually(
        "a decision on the released knob",
        Duration::from_secs(30),
        Duration::from_millis(200),
        || async {
            let recs = run.records();
            recs[released_at..]
                .iter()
                .any(|r| {
                    r["event"] == "decision"
                        && r["knob"] == "innodb_purge_threads"
                        && r["applied"] == true
                })
                .then_some(())
        },
    )
    .await;
    // …and `status` no longer lists it as operator-owned.
    let status = run.status_json(&db.dsn());
    assert!(
        status["controller"]["operator_owned"]
            .get("innodb_purge_threads")
            .is_none(),
        "{}",
        status["controller"]
    );
    stop(child, Duration::from_secs(20));
    view.release().await;
    drop(load);
    // The operator's 6 became the knob's baseline: that is what the exit restored.
    assert_eq!(knob(&db, "innodb_purge_threads").await, 6);
}

/// A decision as (knob, from, to), the part a replay must repeat.
fn knob_move(d: &serde_json::Value) -> (String, u64, u64) {
    (
        d["knob"].as_str().unwrap().to_string(),
        d["from"].as_u64().unwrap(),
        d["to"].as_u64().unwrap(),
    )
}
