//! `/check` (freno-compatible) during a live run: 429 with the reason while a held
//! read view keeps the history above `check.max_history_undo_logs`, 200 once it ends
//! and purge catches up.

mod common;

use std::time::Duration;

use common::configs::TestConfig;
use common::run::{http_get, signal, wait_exit, Run};
use common::{eventually, free_port, MariaDb};

async fn wait_check(port: u16, want: u16, limit: Duration) -> serde_json::Value {
    let body = eventually(
        &format!("GET /check answering {want}"),
        limit,
        Duration::from_millis(250),
        || async {
            http_get(port, "/check/gh-ost/mysql/main")
                .filter(|(s, _)| *s == want)
                .map(|(_, b)| b)
        },
    )
    .await;
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("/check body is not JSON: {e}: {body}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_throttles_under_a_held_read_view_and_clears_after() {
    let db = MariaDb::new();
    db.prepare_table(20_000).await;
    let config = TestConfig::new()
        .restore_timeout("10s")
        .section("[http]\nstale_after = \"2s\"")
        .section("[check]\nmax_history_undo_logs = 3000")
        .build();
    let run = Run::with_config(&config);
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let child = run.spawn(&db.dsn(), &["--dry-run", "--listen", &listen]);

    let ok = wait_check(port, 200, Duration::from_secs(60)).await;
    assert_eq!(ok["StatusCode"], 200, "{ok}");

    // A read view plus updates: history grows past the limit and stays there.
    let view = db.hold_read_view().await;
    let load = db.spawn_update_load(2);
    let throttled = wait_check(port, 429, Duration::from_secs(90)).await;
    assert_eq!(throttled["StatusCode"], 429, "{throttled}");
    assert_eq!(throttled["Threshold"], 3000.0, "{throttled}");
    assert!(
        throttled["Value"].as_f64().is_some_and(|v| v > 3000.0),
        "{throttled}"
    );
    assert!(
        throttled["Message"]
            .as_str()
            .is_some_and(|m| m.contains("purge debt") && m.contains("max_history_undo_logs")),
        "{throttled}"
    );

    // The view ends: purge catches up and background work may proceed again.
    load.stop().await;
    view.release().await;
    let ok = wait_check(port, 200, Duration::from_secs(120)).await;
    assert!(
        ok["reasons"].as_array().is_some_and(|r| r.is_empty()),
        "{ok}"
    );

    signal(&child, "TERM");
    let (code, err) = wait_exit(child, Duration::from_secs(30));
    assert_eq!(code, Some(0), "{err}");
}
