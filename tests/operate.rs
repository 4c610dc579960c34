//! Operating innopilot: the HTTP endpoints during a live run (metrics with signals and
//! decision counters; /healthz following the server down and back), SIGHUP reload (a
//! bad file is refused, a good one applied), `drain` (times out while a read view
//! blocks purge, always restoring its boost; finishes with progress once it ends),
//! `diagnose --json` naming the transaction that blocks purge, and the deployment
//! files: the systemd unit (systemd-analyze verify), the Dockerfile (no step hides a
//! failure; the image's user and group exist and match the manifests), compose and
//! Kubernetes manifests (parsed and checked, including what the schemas cannot see:
//! restartPolicy, native-sidecar version, probe semantics), the man page and
//! completions. scripts/image.sh builds and runs the image itself.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use common::configs;
use common::run::{assert_took_less, events, http_get, innopilot_cmd, signal, stop, Run};
use common::{eventually, free_port, innopilot_bin, MariaDb};

/// The watermark config (purge threads move within seconds under a small update
/// load) with a short staleness limit.
fn live_config() -> String {
    configs::watermark()
        .section("[http]\nstale_after = \"2s\"")
        .build()
}

async fn wait_http(port: u16, path: &str, want: u16, limit: Duration) -> String {
    eventually(
        &format!("GET {path} answering {want}"),
        limit,
        Duration::from_millis(200),
        || async {
            http_get(port, path)
                .filter(|(s, _)| *s == want)
                .map(|(_, b)| b)
        },
    )
    .await
}

async fn wait_metrics(
    port: u16,
    what: &str,
    limit: Duration,
    pred: impl Fn(&str) -> bool,
) -> String {
    eventually(what, limit, Duration::from_millis(250), || async {
        http_get(port, "/metrics")
            .map(|(_, b)| b)
            .filter(|b| pred(b))
    })
    .await
}

/// The value of one sample line (`name{labels} value`) in a scrape.
fn metric(body: &str, series: &str) -> Option<f64> {
    body.lines().find_map(|l| {
        l.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_run_serves_metrics_and_health_follows_the_server() {
    let t0 = Instant::now();
    let mut db = MariaDb::new();
    db.prepare_table(20_000).await;
    let load = db.spawn_update_load(4);
    let run = Run::with_config(&live_config());
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let child = run.spawn(&db.dsn(), &["--listen", &listen]);

    let applied = "innopilot_decisions_total{knob=\"innodb_purge_threads\",outcome=\"applied\",policy=\"watermark\"}";
    let body = wait_metrics(
        port,
        "an applied watermark decision and rates in /metrics",
        Duration::from_secs(45),
        |b| {
            metric(b, applied).is_some_and(|v| v >= 1.0)
                && metric(b, "innopilot_samples_total").is_some_and(|v| v >= 3.0)
        },
    )
    .await;
    for want in [
        "innopilot_up 1",
        "innopilot_connected 1",
        "innopilot_dry_run 0",
        "# TYPE innopilot_innodb_history_list_length gauge",
        "innopilot_redo_fill_ratio ",
        "innopilot_redo_checkpoint_age_bytes ",
        "innopilot_innodb_rows_total{operation=\"updated\"} ",
        "innopilot_knob_threads{knob=\"innodb_purge_threads\"} ",
        "innopilot_knob_baseline_threads{knob=\"innodb_purge_threads\"} ",
        "innopilot_knob_operator_owned{knob=\"innodb_purge_threads\"} 0",
        "# TYPE innopilot_sample_duration_seconds histogram",
        "innopilot_sample_duration_seconds_bucket{le=\"+Inf\"} ",
        "innopilot_audit_events_total{event=\"decision\"} ",
        "innopilot_audit_events_total{event=\"start\"} 1",
        "# TYPE innopilot_errors_total counter",
    ] {
        assert!(body.contains(want), "missing {want:?} in\n{body}");
    }
    assert!(metric(&body, "innopilot_sample_duration_seconds_count").unwrap() >= 2.0);
    assert!(metric(&body, "innopilot_innodb_history_list_length").is_some());
    // The decision counter agrees with the audit log.
    let audited = events(&run.records(), "decision")
        .iter()
        .filter(|d| d["knob"] == "innodb_purge_threads" && d["outcome"] == "applied")
        .count();
    assert!(audited >= 1);
    assert_eq!(http_get(port, "/healthz").unwrap().0, 200);
    assert_eq!(http_get(port, "/readyz").unwrap().0, 200);
    assert_eq!(http_get(port, "/nope").unwrap().0, 404);

    // The server goes away: /healthz turns 503 (disconnected, then stale), /readyz
    // stays 200 (innopilot itself is fine, and waits).
    load.stop().await;
    db.stop();
    let why = wait_http(port, "/healthz", 503, Duration::from_secs(20)).await;
    assert!(
        why.contains("disconnected") || why.contains("stale"),
        "{why}"
    );
    assert_eq!(http_get(port, "/readyz").unwrap().0, 200);
    let body = http_get(port, "/metrics").unwrap().1;
    assert!(body.contains("innopilot_up 0"), "{body}");
    assert!(
        !body.contains("innopilot_innodb_history_list_length"),
        "no signals from a server that is gone"
    );
    assert!(
        metric(&body, "innopilot_errors_total{kind=\"connect\"}").is_some_and(|v| v >= 1.0)
            || metric(&body, "innopilot_errors_total{kind=\"lost\"}").is_some_and(|v| v >= 1.0),
        "{body}"
    );

    // And comes back: 200 again.
    db.start();
    wait_http(port, "/healthz", 200, Duration::from_secs(30)).await;

    stop(child, Duration::from_secs(30));
    assert_took_less(t0, Duration::from_secs(120));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_refuses_a_bad_config_and_applies_a_good_one() {
    let db = MariaDb::new();
    let run = Run::with_config(&configs::TestConfig::new().restore_timeout("5s").build());
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut child = run.spawn(&db.dsn(), &["--dry-run", "--listen", &listen]);
    wait_http(port, "/readyz", 200, Duration::from_secs(30)).await;
    let body = http_get(port, "/metrics").unwrap().1;
    assert_eq!(
        metric(&body, "innopilot_sampler_interval_seconds"),
        Some(0.5)
    );

    // A broken file: refused, innopilot keeps running with the old configuration.
    let good_text = std::fs::read_to_string(run.config()).unwrap();
    std::fs::write(run.config(), "[sampler]\ninterval = \"whenever\"\n").unwrap();
    let body = reload(&child, port, "rejected").await;
    assert_eq!(reload_gauges(&body), (Some(0.0), Some(0.5)));
    assert!(child.try_wait().unwrap().is_none(), "still running");
    let warnings = events(&run.records(), "warning")
        .into_iter()
        .map(|w| w["message"].as_str().unwrap_or("").to_string())
        .collect::<Vec<_>>();
    assert!(
        warnings
            .iter()
            .any(|m| m.contains("refused") && m.contains("sampler.interval")),
        "{warnings:?}"
    );

    // A good one: applied between ticks.
    let changed = good_text.replace("interval = \"500ms\"", "interval = \"250ms\"")
        + "\n[knobs.innodb_io_capacity]\nmanage = false\n";
    std::fs::write(run.config(), changed).unwrap();
    let body = reload(&child, port, "applied").await;
    assert_eq!(reload_gauges(&body), (Some(1.0), Some(0.25)));
    assert_eq!(
        metric(&body, "innopilot_knob_managed{knob=\"innodb_io_capacity\"}"),
        Some(0.0)
    );
    wait_http(port, "/healthz", 200, Duration::from_secs(10)).await;

    stop(child, Duration::from_secs(30));
}

/// Sends SIGHUP and waits until /metrics counts one reload with `result` (`applied` or
/// `rejected`); returns that scrape.
async fn reload(child: &Child, port: u16, result: &str) -> String {
    signal(child, "HUP");
    let series = format!("innopilot_config_reloads_total{{result=\"{result}\"}}");
    wait_metrics(
        port,
        &format!("a reload {result}"),
        Duration::from_secs(15),
        |b| metric(b, &series) == Some(1.0),
    )
    .await
}

/// What a reload changes in a scrape: (whether the last reload succeeded, the
/// sampler interval in seconds).
fn reload_gauges(body: &str) -> (Option<f64>, Option<f64>) {
    (
        metric(body, "innopilot_config_last_reload_successful"),
        metric(body, "innopilot_sampler_interval_seconds"),
    )
}

fn drain_cmd(dsn: &str, args: &[&str]) -> Command {
    let mut c = innopilot_cmd(&["drain"]);
    c.args(args).arg("--dsn").arg(dsn);
    c
}

async fn knob(db: &MariaDb, name: &str) -> String {
    db.global_variable(name).await.unwrap_or_default()
}

/// The knobs `drain --boost` raises, as the server has them now.
async fn boosted_knobs(db: &MariaDb) -> (String, String, String) {
    (
        knob(db, "innodb_purge_threads").await,
        knob(db, "innodb_io_capacity").await,
        knob(db, "innodb_io_capacity_max").await,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_times_out_while_blocked_then_finishes_with_progress() {
    let t0 = Instant::now();
    let db = MariaDb::new();
    db.prepare_table(20_000).await;
    let before = boosted_knobs(&db).await;
    // History that purge cannot remove while the read view is held.
    let view = db.hold_read_view().await;
    let view_opened = Instant::now();
    let load = db.spawn_update_load(4);
    eventually(
        "history >= 20000",
        Duration::from_secs(60),
        Duration::from_millis(250),
        || async { (db.history_list_length().await >= 20_000).then_some(()) },
    )
    .await;
    load.stop().await;
    let history = db.history_list_length().await;
    // drain names a blocker only once its view is 5 s old; a fast machine reaches the
    // history above sooner.
    if let Some(rest) = Duration::from_secs(5).checked_sub(view_opened.elapsed()) {
        tokio::time::sleep(rest).await;
    }

    // 1. Blocked: times out (exit 5), says who blocks, and puts the boost back.
    let out = drain_cmd(
        &db.dsn(),
        &[
            "--target",
            "100",
            "--timeout",
            "3s",
            "--boost",
            "--progress-interval",
            "250ms",
        ],
    )
    // The default filter (what a user sees), so a driver warning would show.
    .env("RUST_LOG", "innopilot=info,warn")
    .output()
    .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "stderr: {err}");
    assert!(err.contains("drain: boost innodb_purge_threads"), "{err}");
    assert!(
        err.contains("purge appears blocked, presumably by")
            && err.contains(&format!("connection {}", view.connection_id())),
        "{err}"
    );
    assert!(err.contains("restored innodb_purge_threads"), "{err}");
    assert!(err.contains("timed out after 3s"), "{err}");
    // The server-side wait is slow on purpose: no driver warning about it.
    assert!(!err.contains("slow statement"), "{err}");
    let after = boosted_knobs(&db).await;
    assert_eq!(before, after, "the boost is restored on timeout");
    // The server-side wait was stopped, not left behind.
    // (KILL QUERY is noticed within the server's 100 ms poll of the wait.)
    eventually(
        "no purge wait left running in the server",
        Duration::from_secs(3),
        Duration::from_millis(100),
        || async {
            db.query_rows("SELECT ID FROM information_schema.PROCESSLIST WHERE INFO LIKE '%innodb_max_purge_lag_wait%' AND ID <> CONNECTION_ID()")
                .await
                .is_empty()
                .then_some(())
        },
    )
    .await;

    // 2. Unblocked while it waits: finishes, with progress lines all along.
    let child = drain_cmd(
        &db.dsn(),
        &[
            "--target",
            "100",
            "--timeout",
            "60s",
            "--boost",
            "--progress-interval",
            "250ms",
        ],
    )
    .spawn()
    .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    view.release().await;
    let out = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "stderr: {err}");
    assert!(stdout.starts_with("drained: history "), "{stdout}");
    assert!(
        stdout.contains("innodb_max_purge_lag_wait"),
        "MariaDB waits server-side: {stdout}"
    );
    let progress: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("drain: history "))
        .collect();
    assert!(progress.len() >= 4, "progress lines: {err}");
    assert!(
        progress.iter().any(|l| l.contains('%') && l.contains("/s")),
        "{err}"
    );
    assert!(db.history_list_length().await <= 100 || history < 100);
    let after = boosted_knobs(&db).await;
    assert_eq!(before, after, "the boost is restored when done");
    assert_took_less(t0, Duration::from_secs(120));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn diagnose_json_names_the_transaction_that_blocks_purge() {
    let db = MariaDb::new();
    db.prepare_table(10_000).await;
    let view = db.hold_read_view().await;
    let load = db.spawn_update_load(2);
    // The rule wants a read view at least 10 s old while history grows.
    tokio::time::sleep(Duration::from_secs(11)).await;
    let dsn = db.dsn();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(innopilot_bin())
            .args([
                "diagnose",
                "--json",
                "--samples",
                "3",
                "--interval",
                "500ms",
                "--engine-status",
                "--dsn",
            ])
            .arg(dsn)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    load.stop().await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "stderr: {stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let findings = v["findings"].as_array().unwrap();
    let blocked = findings
        .iter()
        .find(|f| f["id"] == "purge_blocked")
        .unwrap_or_else(|| panic!("no purge_blocked finding in {v:#}"));
    let id = view.connection_id();
    assert_eq!(blocked["details"]["thread_id"], id, "{blocked:#}");
    assert_eq!(blocked["sql"][0], format!("KILL {id};"));
    assert!(["warning", "critical"].contains(&blocked["severity"].as_str().unwrap()));
    assert!(blocked["recommendation"].as_str().unwrap().len() > 20);
    assert_eq!(blocked["details"]["isolation"], "REPEATABLE READ");
    // Every finding has the fields an operator needs.
    for f in findings {
        for key in [
            "area",
            "id",
            "severity",
            "title",
            "explanation",
            "recommendation",
            "sql",
        ] {
            assert!(!f[key].is_null(), "{key} missing in {f:#}");
        }
    }
    assert!(findings.iter().any(|f| f["area"] == "flushing"));
    assert!(findings.iter().any(|f| f["area"] == "undo"));
    assert!(findings.iter().any(|f| f["area"] == "buffer_pool"));
    assert!(findings.iter().any(|f| f["id"] == "not_a_replica"));
    assert!(
        findings.iter().any(|f| f["area"] == "engine_status"),
        "--engine-status read once"
    );
    view.release().await;
}

/// `innopilot diagnose` (text, or JSON with `--json`) against `dsn`, with three samples
/// half a second apart; panics unless it exits 0.
async fn run_diagnose(dsn: String, json: bool) -> String {
    let out = tokio::task::spawn_blocking(move || {
        let mut c = Command::new(innopilot_bin());
        c.args(["diagnose", "--samples", "3", "--interval", "500ms"]);
        if json {
            c.arg("--json");
        }
        c.arg("--dsn").arg(dsn).output().unwrap()
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "stderr: {stderr}");
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn diagnose_names_the_read_view_holder_not_an_older_write_only_transaction() {
    let db = MariaDb::new();
    db.prepare_table(10_000).await;
    // A: the oldest transaction, idle after a write, without a read view (an UPDATE
    // reads the latest committed rows and opens no view). It writes a table of its
    // own: a row lock on test.t would stall the update load behind it.
    db.exec("CREATE TABLE test.a (id INT PRIMARY KEY, k INT) ENGINE=InnoDB; INSERT INTO test.a VALUES (1, 0)")
        .await;
    let mut a = db.connect().await;
    let a_id: u64 = common::scalar_string_on(&mut a, "SELECT CONNECTION_ID()")
        .await
        .unwrap()
        .unwrap()
        .parse()
        .unwrap();
    common::exec_on(&mut a, "START TRANSACTION").await.unwrap();
    common::exec_on(&mut a, "UPDATE test.a SET k = k + 1 WHERE id = 1")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    // B: younger, with a consistent snapshot; history made after it is blocked.
    let view = db.hold_read_view().await;
    let b_id = view.connection_id();
    let load = db.spawn_update_load(2);
    tokio::time::sleep(Duration::from_secs(11)).await;
    let text = run_diagnose(db.dsn(), false).await;
    let json = run_diagnose(db.dsn(), true).await;
    load.stop().await;
    assert!(db.history_list_length().await > 0, "the test needs history");
    assert!(text.contains(&format!("KILL {b_id};")), "{text}");
    assert!(!text.contains(&format!("KILL {a_id};")), "{text}");
    assert!(
        text.contains(&format!(
            "Purge is blocked by a read-only transaction (connection {b_id}, root@127.0.0.1:"
        )),
        "{text}"
    );
    assert!(!text.contains(&format!("connection {a_id}")), "{text}");
    assert!(!text.contains("unconfirmed"), "{text}");
    assert!(!text.contains("seed 0"), "{text}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let blocked = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == "purge_blocked")
        .unwrap_or_else(|| panic!("no purge_blocked finding in {v:#}"));
    assert_eq!(blocked["details"]["thread_id"], b_id, "{blocked:#}");
    assert_eq!(blocked["details"]["confirmed"], true, "{blocked:#}");
    // B has no transaction id (read-only): null, never a placeholder "0".
    assert!(blocked["details"]["trx_id"].is_null(), "{blocked:#}");
    common::exec_on(&mut a, "ROLLBACK").await.unwrap();
    view.release().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn diagnose_raises_no_alarm_over_an_empty_history() {
    let db = MariaDb::new();
    // The background statistics recalculation after the inserts writes
    // mysql.innodb_table_stats whenever it gets round to it: one undo log of history
    // that can land after the wait below (seen under load).
    db.exec("SET GLOBAL innodb_stats_auto_recalc = OFF").await;
    db.prepare_table(100).await;
    eventually(
        "the history purged to 0",
        Duration::from_secs(60),
        Duration::from_millis(200),
        || async { (db.history_list_length().await == 0).then_some(()) },
    )
    .await;
    let view = db.hold_read_view().await;
    tokio::time::sleep(Duration::from_secs(11)).await;
    let text = run_diagnose(db.dsn(), false).await;
    assert_eq!(
        db.history_list_length().await,
        0,
        "the test needs no history"
    );
    assert!(!text.contains("cannot remove the history"), "{text}");
    assert!(!text.contains("KILL"), "{text}");
    assert!(!text.contains("Purge is blocked"), "{text}");
    assert!(text.contains("nothing to purge"), "{text}");
    view.release().await;
}

/// `diagnose --json`'s `purge` object: history, purgeable, blocked, basis, holder.
async fn purge_split(db: &MariaDb) -> serde_json::Value {
    let json = run_diagnose(db.dsn(), true).await;
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    v["purge"].clone()
}

/// Runs the update load for `secs`: a burst of short transactions, each leaving one
/// undo log in the history.
async fn burst(db: &MariaDb, secs: u64) {
    let load = db.spawn_update_load(2);
    tokio::time::sleep(Duration::from_secs(secs)).await;
    let stats = load.stop().await;
    assert!(
        stats.updates > 100,
        "the burst made too few updates: {stats:?}"
    );
}

/// The purgeable / blocked split `diagnose` reports, against what the views make
/// true: a snapshot older than every change blocks all of the history; of two
/// overlapping views the older decides, and when it ends the younger blocks only what
/// came after it; a snapshot opened after a burst blocks none of the burst; an idle
/// write-only transaction blocks nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn diagnose_splits_history_by_where_the_views_began() {
    let db = MariaDb::new();
    db.prepare_table(10_000).await;
    // Slow purge down (one thread, one undo page a batch) so that what a test step
    // makes purgeable is still there when diagnose looks.
    db.exec("SET GLOBAL innodb_purge_batch_size = 1").await;
    db.exec("SET GLOBAL innodb_purge_threads = 1").await;
    eventually(
        "the history purged to 0",
        Duration::from_secs(120),
        Duration::from_millis(200),
        || async { (db.history_list_length().await == 0).then_some(()) },
    )
    .await;

    // 1. A snapshot opened before any change: all of the history is blocked.
    let v1 = db.hold_read_view().await;
    burst(&db, 3).await;
    let p = purge_split(&db).await;
    assert_eq!(p["basis"], "trx_numbers", "{p:#}");
    assert_eq!(p["holder_thread_id"], v1.connection_id(), "{p:#}");
    assert!(p["history"].as_u64().unwrap() > 100, "{p:#}");
    assert_eq!(p["purgeable"], 0, "{p:#}");
    assert_eq!(p["blocked"], p["history"], "{p:#}");

    // 2. A second view, a second burst: the older view still decides.
    let v2 = db.hold_read_view().await;
    burst(&db, 3).await;
    let p = purge_split(&db).await;
    assert_eq!(p["holder_thread_id"], v1.connection_id(), "{p:#}");
    assert_eq!(p["purgeable"], 0, "{p:#}");
    // The older one ends: the first burst becomes purgeable, the second stays
    // blocked by the younger view. Once purge has removed the first burst, all that
    // is left is blocked. The history length falls only when purge frees the undo
    // logs it has processed (trx_purge_truncate_history(), every few batches), which
    // can come a moment after its position has passed the view: wait for both.
    let h_both = db.history_list_length().await;
    v1.release().await;
    let p = eventually(
        "diagnose naming the younger view with nothing purgeable left and the history \
         shorter than before the release",
        Duration::from_secs(120),
        Duration::from_millis(500),
        || async {
            let p = purge_split(&db).await;
            (p["holder_thread_id"] == v2.connection_id()
                && p["purgeable"] == 0
                && p["history"].as_u64().is_some_and(|h| h < h_both))
            .then_some(p)
        },
    )
    .await;
    let h2 = p["history"].as_u64().unwrap();
    assert!(
        h2 > 100,
        "the second burst, blocked by the younger view, is gone: history {h2}, before \
         the release {h_both}: {p:#}"
    );
    assert_eq!(p["blocked"], p["history"], "{p:#}");

    // 3. A snapshot opened after the second burst, then the view that held the burst
    // ends: the burst is purgeable, so purge removes it while the new view is still
    // open, and the split calls (next to) none of it blocked.
    let v3 = db.hold_read_view().await;
    v2.release().await;
    let p = eventually(
        "purge removing the burst while the newer view is open",
        Duration::from_secs(60),
        Duration::from_millis(500),
        || async {
            let p = purge_split(&db).await;
            (p["history"].as_u64().unwrap() * 10 < h2).then_some(p)
        },
    )
    .await;
    assert_eq!(p["holder_thread_id"], v3.connection_id(), "{p:#}");
    // Background work (persistent statistics) may take a transaction number or two
    // after the view: at most 1 % of the burst counts as blocked.
    assert!(p["blocked"].as_u64().unwrap() * 100 <= h2, "{p:#}");
    let text = run_diagnose(db.dsn(), false).await;
    assert!(!text.contains("Purge is blocked"), "{text}");
    assert!(!text.contains("KILL"), "{text}");
    v3.release().await;

    // 4. An idle write-only transaction holds no view: it blocks nothing.
    db.exec("CREATE TABLE test.w (id INT PRIMARY KEY, k INT) ENGINE=InnoDB; INSERT INTO test.w VALUES (1, 0)")
        .await;
    let mut w = db.connect().await;
    common::exec_on(&mut w, "START TRANSACTION").await.unwrap();
    common::exec_on(&mut w, "UPDATE test.w SET k = k + 1 WHERE id = 1")
        .await
        .unwrap();
    burst(&db, 3).await;
    let p = purge_split(&db).await;
    assert_eq!(p["basis"], "no_blocking_view", "{p:#}");
    assert_eq!(p["blocked"], 0, "{p:#}");
    assert!(p["holder_thread_id"].is_null(), "{p:#}");
    let text = run_diagnose(db.dsn(), false).await;
    assert!(!text.contains("KILL"), "{text}");
    common::exec_on(&mut w, "ROLLBACK").await.unwrap();
}

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

#[test]
fn man_page_and_completions_from_the_binary() {
    let out = Command::new(innopilot_bin()).arg("man").output().unwrap();
    assert!(out.status.success());
    let man = String::from_utf8_lossy(&out.stdout);
    assert!(man.contains(".TH innopilot 1") && man.contains("diagnose"));
    for shell in ["bash", "zsh", "fish"] {
        let out = Command::new(innopilot_bin())
            .args(["completions", shell])
            .output()
            .unwrap();
        assert!(out.status.success(), "{shell}");
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("drain"),
            "{shell}"
        );
    }
}

/// `systemd-analyze verify` on the unit, with ExecStart pointed at the binary just
/// built and the generated man page on MANPATH (the unit's Documentation=). The
/// directives that matter are checked as text too, so the test proves something even
/// where systemd-analyze is missing (then it says so and fails: install `systemd`).
#[test]
fn systemd_unit_verifies_and_is_hardened() {
    let unit = std::fs::read_to_string(repo("config/systemd/innopilot.service")).unwrap();
    let key = |k: &str| -> Vec<String> {
        unit.lines()
            .filter_map(|l| l.strip_prefix(&format!("{k}=")))
            .map(str::to_string)
            .collect()
    };
    assert_eq!(key("Restart"), ["on-failure"]);
    assert_eq!(key("NoNewPrivileges"), ["yes"]);
    assert_eq!(key("ProtectSystem"), ["strict"]);
    assert_eq!(key("StateDirectory"), ["innopilot"]);
    assert_eq!(key("User"), ["innopilot"]);
    assert_eq!(key("ExecReload"), ["/bin/kill -HUP $MAINPID"]);
    let stop: u64 = key("TimeoutStopSec")[0]
        .trim_end_matches('s')
        .parse()
        .unwrap();
    let restore = innopilot::config::Config::default().control.restore_timeout;
    assert!(
        Duration::from_secs(stop) > restore + Duration::from_secs(5),
        "TimeoutStopSec {stop}s vs restore_timeout {restore:?}"
    );
    // The state file and audit log defaults live in the StateDirectory.
    let d = innopilot::config::Config::default();
    assert!(d.control.state_file.starts_with("/var/lib/innopilot"));
    assert!(d.audit.path.starts_with("/var/lib/innopilot"));

    let analyze = ["/usr/bin/systemd-analyze", "/bin/systemd-analyze"]
        .into_iter()
        .map(Path::new)
        .find(|p| p.exists())
        .expect("systemd-analyze not found: install Debian's `systemd` package (scripts/setup.sh) to verify the unit");
    let dir = tempfile::tempdir().unwrap();
    let bin = innopilot_bin();
    let local = unit.replace("/usr/local/bin/innopilot", bin.to_str().unwrap());
    std::fs::write(dir.path().join("innopilot.service"), local).unwrap();
    let man1 = dir.path().join("man/man1");
    std::fs::create_dir_all(&man1).unwrap();
    let man = Command::new(&bin).arg("man").output().unwrap().stdout;
    std::fs::write(man1.join("innopilot.1"), man).unwrap();
    let out = Command::new(analyze)
        .arg("verify")
        .arg(dir.path().join("innopilot.service"))
        .env("MANPATH", dir.path().join("man"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "systemd-analyze verify failed: {stderr}"
    );
    // Unknown directives are only warnings: treat any output as a failure.
    assert!(
        stderr.trim().is_empty(),
        "systemd-analyze verify warned: {stderr}"
    );
}

fn yaml_docs(path: &Path) -> Vec<serde_norway::Value> {
    use serde::Deserialize;
    let text = std::fs::read_to_string(path).unwrap();
    serde_norway::Deserializer::from_str(&text)
        .map(|d| {
            serde_norway::Value::deserialize(d)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        })
        .filter(|v| !v.is_null())
        .collect()
}

fn s<'a>(v: &'a serde_norway::Value, path: &[&str]) -> &'a serde_norway::Value {
    let mut cur = v;
    for p in path {
        cur = &cur[*p];
    }
    cur
}

/// The instructions of a Dockerfile with their continuation lines joined, comments
/// dropped: `["FROM rust:1 AS build", "RUN a && b", ...]`.
fn dockerfile_instructions(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with('#') || (t.is_empty() && cur.is_empty()) {
            continue;
        }
        match t.strip_suffix('\\') {
            Some(head) => {
                cur.push_str(head.trim_end());
                cur.push(' ');
            }
            None => {
                cur.push_str(t);
                out.push(std::mem::take(&mut cur));
            }
        }
    }
    out
}

/// RUN steps that would let a failure pass unseen: `|| true`, `|| :`, `|| exit 0`,
/// `; true`, `set +e`, or errors sent to /dev/null.
fn hidden_failures(dockerfile: &str) -> Vec<String> {
    let squeeze = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    dockerfile_instructions(dockerfile)
        .into_iter()
        .filter(|i| i.starts_with("RUN "))
        .map(|i| squeeze(&i))
        .filter(|i| {
            [
                "|| true",
                "||true",
                "|| :",
                "|| exit 0",
                "; true",
                "set +e",
                "2>/dev/null",
                "2> /dev/null",
                "&>/dev/null",
                "&> /dev/null",
                ">/dev/null 2>&1",
                "> /dev/null 2>&1",
            ]
            .iter()
            .any(|p| i.contains(p))
        })
        .collect()
}

#[test]
fn no_dockerfile_step_hides_a_failure() {
    // The detector itself: the steps this project once had, and a clean one.
    let bad =
        "FROM x\nRUN cargo build --release 2>/dev/null || true\nRUN a \\\n    && b ||  true\n";
    assert_eq!(hidden_failures(bad).len(), 2, "{:?}", hidden_failures(bad));
    assert!(hidden_failures("FROM x\nRUN a && b > /out\n").is_empty());

    let dockerfile = std::fs::read_to_string(repo("docker/Dockerfile")).unwrap();
    assert_eq!(hidden_failures(&dockerfile), Vec::<String>::new());
    let compose = &yaml_docs(&repo("docker/compose.yaml"))[0];
    let mut inline = 0;
    for (name, svc) in s(compose, &["services"]).as_mapping().unwrap() {
        if let Some(text) = s(svc, &["build", "dockerfile_inline"]).as_str() {
            inline += 1;
            assert_eq!(hidden_failures(text), Vec::<String>::new(), "{name:?}");
        }
    }
    assert!(inline > 0, "compose's inline Dockerfile was not found");
}

/// The runtime stage runs as `USER uid:gid`; both must have entries in the image
/// (a gid with no group leaves files owned by a number and `id -gn` failing), and the
/// Kubernetes sidecar must run as the same ids. The built image is checked too, by
/// scripts/image.sh (`id -un`, `id -gn` inside it).
#[test]
fn the_image_user_and_group_exist_and_match_the_manifests() {
    let dockerfile = std::fs::read_to_string(repo("docker/Dockerfile")).unwrap();
    let steps = dockerfile_instructions(&dockerfile);
    let runtime = steps
        .iter()
        .rposition(|i| i.starts_with("FROM "))
        .expect("a FROM");
    let runtime = &steps[runtime..];
    let user = runtime
        .iter()
        .rev()
        .find_map(|i| i.strip_prefix("USER "))
        .expect("the runtime stage sets USER");
    let (uid, gid) = user
        .split_once(':')
        .unwrap_or_else(|| panic!("USER {user}: give uid:gid, numeric"));
    let (uid, gid): (u32, u32) = (uid.parse().unwrap(), gid.parse().unwrap());
    assert_ne!(uid, 0, "USER must not be root");
    let flag = |cmd: &str, flag: &str| -> Option<u32> {
        runtime.iter().find_map(|i| {
            let words: Vec<&str> = i.split_whitespace().collect();
            let at = words.iter().position(|w| *w == cmd)?;
            let v = words[at..].windows(2).find(|w| w[0] == flag)?[1];
            Some(
                v.parse()
                    .unwrap_or_else(|_| panic!("{cmd} {flag} {v}: numeric")),
            )
        })
    };
    assert_eq!(
        flag("groupadd", "--gid"),
        Some(gid),
        "the runtime stage must create the group with USER's gid (groupadd --gid {gid})"
    );
    assert_eq!(
        flag("useradd", "--uid"),
        Some(uid),
        "useradd --uid must be USER's uid"
    );
    assert_eq!(flag("useradd", "--gid"), Some(gid), "useradd --gid {gid}");
    assert!(
        !runtime.iter().any(|i| i.contains("--user-group")),
        "--user-group picks its own gid"
    );

    let sts = yaml_docs(&repo("docker/k8s/statefulset.yaml"))
        .into_iter()
        .find(|d| d["kind"] == "StatefulSet")
        .unwrap();
    let pod = s(&sts, &["spec", "template", "spec"]);
    for c in pod["initContainers"].as_sequence().unwrap() {
        if c["image"].as_str().unwrap().starts_with("innopilot:") {
            assert_eq!(
                s(c, &["securityContext", "runAsUser"]).as_u64(),
                Some(u64::from(uid))
            );
            let group = s(c, &["securityContext", "runAsGroup"]);
            assert!(
                group.is_null() || group.as_u64() == Some(u64::from(gid)),
                "{:?} runAsGroup",
                c["name"]
            );
        }
    }
}

#[test]
fn container_and_kubernetes_manifests() {
    // Dockerfile: multi-stage, non-root runtime, the endpoints exposed.
    let dockerfile = std::fs::read_to_string(repo("docker/Dockerfile")).unwrap();
    let froms: Vec<&str> = dockerfile
        .lines()
        .filter(|l| l.starts_with("FROM "))
        .collect();
    assert_eq!(froms.len(), 2, "{froms:?}");
    assert!(froms[0].contains(" AS build"));
    assert!(dockerfile.contains("COPY --from=build"));
    let user = dockerfile
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("USER "))
        .unwrap();
    assert!(
        !user.starts_with("root") && !user.starts_with('0'),
        "USER {user}"
    );
    assert!(dockerfile.contains("EXPOSE 29104"));

    // compose: MariaDB, a sysbench load, innopilot as advisor (dry-run) and live.
    let compose = &yaml_docs(&repo("docker/compose.yaml"))[0];
    let services = s(compose, &["services"]);
    for name in ["mariadb", "sysbench", "advisor", "live"] {
        assert!(!services[name].is_null(), "service {name}");
    }
    let cmd = |svc: &str| -> Vec<String> {
        services[svc]["command"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|c| c.as_str().unwrap().to_string())
            .collect()
    };
    assert!(cmd("advisor").contains(&"--dry-run".to_string()));
    assert!(!cmd("live").contains(&"--dry-run".to_string()));
    assert!(services["sysbench"]["command"][0]
        .as_str()
        .unwrap()
        .contains("sysbench"));
    assert_eq!(services["live"]["stop_grace_period"].as_str(), Some("30s"));

    // Kubernetes: every document parses; the StatefulSet has the sidecar.
    let mut docs = Vec::new();
    for e in std::fs::read_dir(repo("docker/k8s")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "yaml") {
            docs.extend(yaml_docs(&p));
        }
    }
    let find = |kind: &str, name: &str| -> &serde_norway::Value {
        docs.iter()
            .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("{kind}/{name} not found"))
    };
    let sts = find("StatefulSet", "mariadb");
    let pod = s(sts, &["spec", "template", "spec"]);
    let sidecar = pod["initContainers"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "innopilot")
        .expect("innopilot init container");
    assert_eq!(
        sidecar["restartPolicy"].as_str(),
        Some("Always"),
        "native sidecar"
    );
    assert!(sidecar["image"].as_str().unwrap().starts_with("innopilot:"));
    // A native sidecar's readiness counts toward the pod's: a readiness probe would
    // take the database out of its Service whenever innopilot restarts.
    assert!(
        sidecar["readinessProbe"].is_null(),
        "the sidecar must not gate the pod's readiness"
    );
    assert_eq!(
        s(sidecar, &["livenessProbe", "httpGet", "path"]).as_str(),
        Some("/healthz")
    );
    assert!(
        sidecar["startupProbe"].is_null(),
        "a sidecar startup probe would block the database"
    );
    assert_eq!(
        s(sidecar, &["securityContext", "runAsNonRoot"]).as_bool(),
        Some(true)
    );
    let env = sidecar["env"].as_sequence().unwrap();
    let pw = env
        .iter()
        .find(|e| e["name"] == "INNOPILOT_PASSWORD")
        .unwrap();
    let secret_name = s(pw, &["valueFrom", "secretKeyRef", "name"])
        .as_str()
        .unwrap();
    let secret_key = s(pw, &["valueFrom", "secretKeyRef", "key"])
        .as_str()
        .unwrap();
    let secret = find("Secret", secret_name);
    assert!(
        !secret["stringData"][secret_key].is_null(),
        "secret key {secret_key}"
    );
    let args: Vec<&str> = sidecar["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    let config_arg = args
        .iter()
        .find_map(|a| a.strip_prefix("--config="))
        .unwrap();
    let wait = args
        .iter()
        .find_map(|a| a.strip_prefix("--wait-for-server="))
        .expect("--wait-for-server");
    let wait = humantime::parse_duration(wait).unwrap();
    // /healthz is 503 while innopilot waits for the database: liveness must not
    // restart it before --wait-for-server has run out.
    let liveness_delay = s(sidecar, &["livenessProbe", "initialDelaySeconds"])
        .as_u64()
        .unwrap_or(0);
    assert!(
        Duration::from_secs(liveness_delay) >= wait,
        "livenessProbe.initialDelaySeconds {liveness_delay} < --wait-for-server {wait:?}"
    );
    check_pod_semantics(pod);

    // The ConfigMap's innopilot.toml is valid for innopilot itself, listens where the
    // probes look, and the grace period covers the drain and the restore.
    let cm_name = pod["volumes"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|v| {
            !v["configMap"].is_null()
                && sidecar["volumeMounts"]
                    .as_sequence()
                    .unwrap()
                    .iter()
                    .any(|m| {
                        m["name"] == v["name"]
                            && Path::new(config_arg).starts_with(m["mountPath"].as_str().unwrap())
                    })
        })
        .map(|v| v["configMap"]["name"].as_str().unwrap())
        .expect("the config volume");
    let toml = find("ConfigMap", cm_name)["data"]["innopilot.toml"]
        .as_str()
        .unwrap();
    let cfg = innopilot::config::Config::parse(toml, "configmap").unwrap();
    assert!(
        cfg.http.listen.starts_with("0.0.0.0:"),
        "the kubelet probes the pod IP"
    );
    let port = cfg
        .http
        .listen
        .rsplit(':')
        .next()
        .unwrap()
        .parse::<u64>()
        .unwrap();
    assert_eq!(sidecar["ports"][0]["containerPort"].as_u64(), Some(port));
    let grace = pod["terminationGracePeriodSeconds"].as_u64().unwrap();
    let db = pod["containers"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "mariadb")
        .unwrap();
    let pre_stop: Vec<&str> = s(db, &["lifecycle", "preStop", "exec", "command"])
        .as_sequence()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(pre_stop.contains(&"drain"), "{pre_stop:?}");
    let drain_timeout = pre_stop
        .iter()
        .find_map(|a| a.strip_prefix("--timeout="))
        .unwrap();
    let drain_timeout = humantime::parse_duration(drain_timeout).unwrap();
    assert!(
        Duration::from_secs(grace)
            > drain_timeout + cfg.control.restore_timeout + Duration::from_secs(30),
        "terminationGracePeriodSeconds {grace} vs drain {drain_timeout:?} + restore {:?}",
        cfg.control.restore_timeout
    );
    assert!(cfg.control.state_file.starts_with("/var/lib/innopilot"));
    let state_mount = sidecar["volumeMounts"]
        .as_sequence()
        .unwrap()
        .iter()
        .any(|m| m["mountPath"] == "/var/lib/innopilot");
    assert!(state_mount, "the state file survives container restarts");
}

/// What the Kubernetes schemas cannot see (scripts/image.sh runs `kubernetes-validate
/// --strict` for the schemas): restartPolicy values and where they may appear, the
/// Kubernetes version native sidecars need against the one the README claims, and
/// probes that point at declared ports.
fn check_pod_semantics(pod: &serde_norway::Value) {
    let policy = pod["restartPolicy"].as_str().unwrap_or("Always");
    assert_eq!(
        policy, "Always",
        "a StatefulSet's pods must have restartPolicy Always"
    );
    let inits = pod["initContainers"]
        .as_sequence()
        .cloned()
        .unwrap_or_default();
    let mains = pod["containers"].as_sequence().unwrap();
    let mut native_sidecars = 0;
    for c in &inits {
        match c["restartPolicy"].as_str() {
            None => {}
            Some("Always") => native_sidecars += 1,
            Some(other) => panic!(
                "init container {:?}: restartPolicy {other:?}; only \"Always\" (a native sidecar) is allowed",
                c["name"]
            ),
        }
        if c["restartPolicy"].is_null() {
            for probe in ["readinessProbe", "livenessProbe", "startupProbe"] {
                assert!(
                    c[probe].is_null(),
                    "init container {:?}: {probe} is only allowed on native sidecars",
                    c["name"]
                );
            }
        }
    }
    for c in mains {
        assert!(
            c["restartPolicy"].is_null(),
            "container {:?}: restartPolicy belongs to the pod (or to sidecar init containers)",
            c["name"]
        );
    }
    if native_sidecars > 0 {
        let readme = std::fs::read_to_string(repo("README.md")).unwrap();
        let claimed = readme
            .split("Kubernetes ≥ 1.")
            .nth(1)
            .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|m| m.parse::<u32>().ok())
            .expect("README.md claims a minimum Kubernetes version (\"Kubernetes ≥ 1.N\")");
        assert!(
            claimed >= 29,
            "native sidecars (init containers with restartPolicy: Always) need Kubernetes ≥ 1.29; the README claims ≥ 1.{claimed}"
        );
        let sts = std::fs::read_to_string(repo("docker/k8s/statefulset.yaml")).unwrap();
        assert!(
            sts.contains(&format!("Kubernetes >= 1.{claimed}")),
            "statefulset.yaml's header names the README's minimum, Kubernetes >= 1.{claimed}"
        );
    }
    for c in inits.iter().chain(mains) {
        let ports: Vec<&serde_norway::Value> = c["ports"]
            .as_sequence()
            .map(|p| p.iter().collect())
            .unwrap_or_default();
        for probe in ["readinessProbe", "livenessProbe", "startupProbe"] {
            let p = &c[probe];
            if p.is_null() {
                continue;
            }
            let port = s(p, &["httpGet", "port"]);
            if !port.is_null() {
                assert!(
                    ports
                        .iter()
                        .any(|d| d["name"] == *port || d["containerPort"] == *port),
                    "{:?} {probe}: port {port:?} is not one of the container's ports",
                    c["name"]
                );
                let path = s(p, &["httpGet", "path"]).as_str().unwrap();
                if c["image"].as_str().unwrap().starts_with("innopilot:") {
                    assert!(
                        ["/healthz", "/readyz"].contains(&path),
                        "{:?} {probe}: innopilot serves /healthz and /readyz, not {path}",
                        c["name"]
                    );
                }
            }
            for (k, min) in [("periodSeconds", 1), ("failureThreshold", 1)] {
                if let Some(v) = p[k].as_u64() {
                    assert!(v >= min, "{:?} {probe}.{k} {v}", c["name"]);
                }
            }
            if probe == "livenessProbe" || probe == "startupProbe" {
                assert!(
                    p["successThreshold"].as_u64().unwrap_or(1) == 1,
                    "{:?} {probe}.successThreshold must be 1",
                    c["name"]
                );
            }
        }
    }
    // The database's own readiness is what the Service follows.
    let db = mains.iter().find(|c| c["name"] == "mariadb").unwrap();
    assert!(
        !db["readinessProbe"].is_null(),
        "the database container needs its readiness probe"
    );
}

#[test]
fn a_taken_listen_address_fails_fast_before_touching_the_server() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = Command::new(innopilot_bin())
        .args(["run", "--dry-run", "--listen", &addr])
        // Nothing listens on port 1: reaching the server would fail differently.
        .args(["--dsn", "mysql://innopilot@127.0.0.1:1/"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("cannot listen on") && err.contains(&addr),
        "{err}"
    );
}
