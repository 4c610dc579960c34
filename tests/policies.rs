//! The control policies on a live private MariaDB: while a read view blocks purge,
//! innopilot adds no DML delay and names the culprit (audit log and `status`); after
//! the view ends, history drains with a bounded DML delay and purge threads do not
//! flap; the audit log says why at every step.

mod common;

use std::time::Duration;

use common::configs::TestConfig;
use common::run::{events, knob_values, stop, wait_for_event, Run};
use common::{eventually, MariaDb};

/// A small purgeable-history budget so the purge-rate policy has work to do within
/// seconds on this machine; blocking counts after 2 s.
fn config() -> String {
    TestConfig::new()
        .max_sets_per_minute(120)
        .section(
            "[policy.purge_rate]\nbudget_undo_logs = 5000\ndrain_horizon = \"20s\"\n\
             min_view_age = \"2s\"\nmax_delay_us = 5000",
        )
        .build()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocked_history_gets_no_delay_then_drains_with_a_bounded_delay() {
    let db = MariaDb::new();
    db.prepare_table(20_000).await;
    let startup = knob_values(&db).await;
    let load = db.spawn_update_load(4);
    let run = Run::with_config(&config());
    let child = run.spawn(&db.dsn(), &[]);
    let view = db.hold_read_view().await;
    let culprit_thread = view.connection_id();

    // The view blocks purge: innopilot says so and who it is.
    let blocked = wait_for_event(&run, "purge_blocked", 1, Duration::from_secs(30)).await;
    assert_eq!(blocked["thread_id"], culprit_thread, "{blocked}");
    assert!(blocked["blocked"].as_u64().unwrap() > 0, "{blocked}");
    // Let history pile up well beyond the budget while the view is held.
    eventually(
        "history far beyond the budget",
        Duration::from_secs(30),
        Duration::from_millis(200),
        || async { (db.history_list_length().await > 50_000).then_some(()) },
    )
    .await;
    let out = run.command(&db.dsn(), &["status", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let by = status["signals"]["history_blocked_by"]["value"].to_string();
    assert!(
        by.contains(&format!("thread {culprit_thread}")),
        "status: {}",
        status["signals"]
    );
    assert!(
        status["signals"]["history_blocked"]["value"]
            .as_u64()
            .unwrap()
            > 0
    );
    // No DML delay while the view is held: the server's delay stays at its baseline.
    assert_eq!(
        db.global_variable("innodb_max_purge_lag_delay")
            .await
            .as_deref(),
        startup["innodb_max_purge_lag_delay"].as_deref()
    );
    let released_at = common::run::unix_ms();
    let peak = db.history_list_length().await;
    view.release().await;

    // Purge can work now: innopilot notices, and history drains.
    wait_for_event(&run, "purge_unblocked", 1, Duration::from_secs(20)).await;
    eventually(
        "history drained to 10 % of its peak",
        Duration::from_secs(60),
        Duration::from_millis(250),
        || async { (db.history_list_length().await <= peak / 10).then_some(()) },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop(child, Duration::from_secs(20));
    drop(load);

    let recs = run.records();
    let decisions = events(&recs, "decision");
    for d in &decisions {
        let at = d["unix_ms"].as_u64().unwrap();
        // Every decision explains itself.
        assert!(!d["reason"].as_str().unwrap_or("").is_empty(), "{d}");
        if d["knob"] == "innodb_max_purge_lag_delay" && d["applied"] == true {
            let to = d["to"].as_u64().unwrap();
            // Bounded: never above the configured maximum.
            assert!(to <= 5000, "delay {to} µs above max_delay_us: {d}");
            // And none while the view was held.
            if at < released_at {
                assert!(to == 0, "a DML delay while purge was blocked: {d}");
            }
        }
    }
    // No purge-thread flapping: no change reversed within 5 s.
    let threads: Vec<(u64, u64, u64)> = decisions
        .iter()
        .filter(|d| d["knob"] == "innodb_purge_threads" && d["applied"] == true)
        .map(|d| {
            (
                d["unix_ms"].as_u64().unwrap(),
                d["from"].as_u64().unwrap(),
                d["to"].as_u64().unwrap(),
            )
        })
        .collect();
    let reasons: Vec<String> = decisions
        .iter()
        .filter(|d| d["knob"] == "innodb_purge_threads" && d["applied"] == true)
        .map(|d| format!("{}: {}", d["policy"], d["reason"]))
        .collect();
    for w in threads.windows(2) {
        let ((t1, f1, to1), (t2, f2, to2)) = (w[0], w[1]);
        let reversed = to1 != f1 && f2 == to1 && to2 == f1;
        // Records carry the wall-clock time of the SET itself, so two SETs five
        // sampling seconds apart may be stamped a few milliseconds less apart.
        assert!(
            !(reversed && t2 - t1 < 4_900),
            "purge threads flapped: {threads:?}\n{}",
            reasons.join("\n")
        );
    }
    // SIGTERM put everything back.
    assert_eq!(knob_values(&db).await, startup);
}
