//! `promtool check metrics` (Prometheus' own linter: naming, units, types, help) on a
//! live scrape of `innopilot run` against a private MariaDB. promtool comes from
//! Debian's `prometheus` package (scripts/setup.sh); the test fails without it.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::configs::TestConfig;
use common::run::{http_get, signal, wait_exit, Run};
use common::{eventually, free_port, required_binary, MariaDb};

fn scrape(port: u16) -> Option<String> {
    http_get(port, "/metrics").map(|(_, body)| body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_scrape_passes_promtool_check_metrics() {
    let promtool = required_binary("promtool");
    let db = MariaDb::new();
    db.prepare_table(5_000).await;
    let run = Run::with_config(&TestConfig::new().restore_timeout("10s").build());
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let child = run.spawn(&db.dsn(), &["--dry-run", "--listen", &listen]);
    // A scrape with signals and with decisions counted (the families that have labels).
    let load = db.spawn_update_load(2);
    let body = eventually(
        "a scrape with signals",
        Duration::from_secs(60),
        Duration::from_millis(250),
        || async { scrape(port).filter(|b| b.contains("innopilot_innodb_history_list_length")) },
    )
    .await;
    load.stop().await;

    let mut check = Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running promtool");
    check
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let out = check.wait_with_output().unwrap();
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && report.trim().is_empty(),
        "promtool check metrics:\n{report}\n--- scrape ---\n{body}"
    );

    signal(&child, "TERM");
    let (code, err) = wait_exit(child, Duration::from_secs(30));
    assert_eq!(code, Some(0), "{err}");
}
