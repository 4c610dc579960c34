//! The server model against the real server: what `policy::server_model` predicts for
//! the DML-delay pair is what a private MariaDB 10.11 does to a user's rows.
//!
//! MariaDB sets the delay before every purge batch, and only for a batch that handled
//! pages (`trx_purge()`, trx0purge.cc); `row_mysql_delay_if_needed()` then sleeps it
//! once per row changed. So with a lag under the history and purge progressing rows
//! pay the delay while the last batch handled pages, and while a read view blocks purge
//! no row pays anything, whatever the history; nor with the lag above the history (the
//! purge-rate policy's sliding threshold once purge is on schedule). The test reports
//! the delay the median row paid, sleep overhead included. A second test checks the
//! counter the purge-rate policy measures the inflow of undo logs with:
//! `Innodb_max_trx_id`, two ids per read-write transaction. A third checks the row
//! time the cost cap is measured with (Little's law: Threads_running over the rows
//! changed per second): a thread asleep in the delay is counted as running, so the
//! row time read under a delay holds it.

mod common;

use std::time::{Duration, Instant};

use common::views::ReadViewHandle;
use common::{eventually, exec_on, MariaDb};
use innopilot::policy::server_model::mariadb_dml_delay_us;
use innopilot::server::dsn::parse_dsn;
use innopilot::server::mysql::{LiveOptions, LiveServer};
use innopilot::server::{Sample, Server};
use innopilot::signals::SignalWindow;

/// The loaded tests of this file one at a time: on two cores a second loaded server
/// beside one would move the row times they measure.
static LOADED: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Median time per row of one connection changing single rows (autocommit) for
/// `for_`. The median, not the mean: while purge runs beside the rows a few percent of
/// them wait on purge's page latches for a millisecond or more (measured with the lag
/// at 0, where no row is delayed), and a mean would count that as delay.
async fn row_time(db: &MariaDb, for_: Duration) -> Duration {
    let mut conn = db.connect().await;
    let start = Instant::now();
    let mut n = 0u32;
    let mut rows = Vec::new();
    while start.elapsed() < for_ {
        let id = 1 + (n % 5_000);
        let t = Instant::now();
        exec_on(
            &mut conn,
            &format!("UPDATE test.t SET k = k + 1 WHERE id = {id}"),
        )
        .await
        .unwrap();
        rows.push(t.elapsed());
        n += 1;
    }
    rows.sort();
    rows[rows.len() / 2]
}

/// The delay in effect for `lag` and `delay_us` at this history, by the model.
async fn predicted_us(db: &MariaDb, lag: u64, delay_us: u64) -> u64 {
    mariadb_dml_delay_us(db.history_list_length().await, lag, delay_us)
}

/// A private server with 20 000 rows and slow purge (one thread, one undo page a
/// batch), so a backlog lasts a test.
async fn slow_purge_server() -> MariaDb {
    let db = MariaDb::new();
    db.prepare_table(20_000).await;
    db.exec("SET GLOBAL innodb_purge_threads = 1").await;
    db.exec("SET GLOBAL innodb_purge_batch_size = 1").await;
    db
}

/// Waits for a backlog of 200 000 undo logs behind a held read view, while a load
/// writes. Purge drains ~20 k undo logs/s here even with one thread and one page a
/// batch: 200 k keep the history above a lag of 1 000 for a measurement of seconds.
async fn backlog_behind_view(db: &MariaDb) {
    eventually(
        "history over 200 000 behind the view",
        Duration::from_secs(120),
        Duration::from_millis(500),
        || async { (db.history_list_length().await > 200_000).then_some(()) },
    )
    .await;
}

/// Ends the read view and waits until purge progresses. The purge coordinator takes
/// up to a second after the view's end to run its first batch (measured: 0.25-0.75 s
/// with no row delayed, then every row delayed), and until a batch has handled pages
/// the server delays nothing, so a measurement starts once the history falls.
async fn release_until_purge_progresses(db: &MariaDb, view: ReadViewHandle) {
    let h_release = db.history_list_length().await;
    view.release().await;
    eventually(
        "purge progressing after the view's end",
        Duration::from_secs(30),
        Duration::from_millis(20),
        || async { (db.history_list_length().await + 1_000 < h_release).then_some(()) },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_delays_every_row_while_purge_progresses_and_none_while_blocked() {
    const DELAY_US: u64 = 2_000;
    const LAG: u64 = 1_000;
    let _serial = LOADED.lock().await;
    let db = slow_purge_server().await;
    let base = row_time(&db, Duration::from_secs(2)).await;

    // A backlog behind a read view: history far above the lag, purge blocked.
    let view = db.hold_read_view().await;
    let load = db.spawn_update_load(4);
    backlog_behind_view(&db).await;
    load.stop().await;
    db.exec(&format!("SET GLOBAL innodb_max_purge_lag = {LAG}"))
        .await;
    db.exec(&format!(
        "SET GLOBAL innodb_max_purge_lag_delay = {DELAY_US}"
    ))
    .await;
    // Blocked: the model says the server delays nothing (no batch handles pages),
    // though the size formula alone would give the full delay.
    assert_eq!(predicted_us(&db, LAG, DELAY_US).await, DELAY_US);
    let blocked = row_time(&db, Duration::from_secs(2)).await;
    let blocked_extra = blocked.saturating_sub(base);
    assert!(
        blocked_extra < Duration::from_micros(DELAY_US / 4),
        "rows paid {blocked_extra:?} while a read view blocked purge (base {base:?})"
    );

    // Purge progresses: every row pays the delay, and the history stays above the lag
    // throughout (checked after).
    release_until_purge_progresses(&db, view).await;
    let delayed = row_time(&db, Duration::from_secs(2)).await;
    let h_after = db.history_list_length().await;
    assert!(
        h_after > LAG,
        "history {h_after} fell under the lag {LAG} during the measurement: no evidence"
    );
    let extra = delayed.saturating_sub(base);
    let want = Duration::from_micros(DELAY_US);
    // The model says D for every row while batches handle pages and the history is
    // above the lag. Measured here once purge runs (one purge thread, one undo page a
    // batch, 2 cores, 2026-11-26): every row in each quarter second paid it, 2.3-2.5 ms
    // a row against 0.25-0.28 ms without (mean extra 1.11-1.15 x D). Until then the
    // run-to-run spread was the coordinator's start (0.04-0.48 x D a row on average when
    // the measurement began at the view's end). Stated tolerance on the median row: at
    // least half of D, and never more than D plus 1.5 ms of sleep overhead.
    assert!(
        extra >= want / 2 && extra <= want + Duration::from_micros(1_500),
        "a {DELAY_US} µs delay cost {extra:?} on the median row (base {base:?}, delayed {delayed:?})"
    );
    eprintln!(
        "model check: median row {base:?}; blocked +{blocked_extra:?}; delay {DELAY_US} µs \
         measured +{extra:?} on the median row ({:.2} of the delay)",
        extra.as_secs_f64() / want.as_secs_f64()
    );

    // The sliding threshold rides this switch: with the lag above the history (purge
    // on schedule) rows pay nothing, though purge progresses and the delay is set.
    let h_now = db.history_list_length().await;
    db.exec(&format!(
        "SET GLOBAL innodb_max_purge_lag = {}",
        h_now + 100_000
    ))
    .await;
    let on_schedule = row_time(&db, Duration::from_secs(2)).await;
    assert!(
        on_schedule.saturating_sub(base) < Duration::from_micros(DELAY_US / 4),
        "rows paid {:?} with the lag above the history {h_now} (base {base:?})",
        on_schedule.saturating_sub(base)
    );

    // Off again: the lag back to 0, no delay.
    db.exec("SET GLOBAL innodb_max_purge_lag = 0").await;
    let after = row_time(&db, Duration::from_secs(2)).await;
    assert!(
        after.saturating_sub(base) < Duration::from_micros(DELAY_US / 4),
        "rows still delayed with the lag at 0: {after:?} vs {base:?}"
    );
}

/// Statements on one connection: `n` of `sql` with `{id}` replaced by 1 + i % 500.
async fn run_n(db: &MariaDb, n: u32, sql: &str) {
    let mut conn = db.connect().await;
    for i in 0..n {
        let id = 1 + (i % 500);
        exec_on(&mut conn, &sql.replace("{id}", &id.to_string()))
            .await
            .unwrap();
    }
}

/// A private server with 1 000 rows and innopilot's sampler on it, for tests that
/// count what statements do to the server's counters.
async fn counting_server() -> (MariaDb, LiveServer) {
    let db = MariaDb::new();
    db.prepare_table(1_000).await;
    // No background statistics transaction in the middle of the counts.
    db.exec("SET GLOBAL innodb_stats_auto_recalc = OFF").await;
    let target = parse_dsn(&db.dsn()).unwrap();
    let mut server = LiveServer::new(target, LiveOptions::default());
    server.probe().await.unwrap();
    (db, server)
}

/// The purge-rate policy's inflow of undo logs (`Signals::undo_inflow`) rests on
/// this: MariaDB's `Innodb_max_trx_id` advances by two for each read-write
/// transaction (its id and its commit number), autocommit or not, and not for a
/// read-only one, while `Com_commit` counts COMMIT statements only and does not move
/// under autocommit writes (the benchmark's sysbench loads). Checked through
/// innopilot's own sampler and signal window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_trx_id_counter_counts_read_write_transactions_and_com_commit_does_not() {
    const N: u32 = 300;
    let (db, mut server) = counting_server().await;
    let mut window = SignalWindow::new(Duration::from_secs(60));
    let sample = async |server: &mut LiveServer| {
        let s = server.sample().await.unwrap();
        assert!(
            s.max_trx_id.is_some(),
            "Innodb_max_trx_id not sampled: {s:?}"
        );
        s
    };
    let ids = |s: &Sample| s.max_trx_id.unwrap();
    let commits = |s: &Sample| s.commits.unwrap();

    let s0 = sample(&mut server).await;
    window.push(s0.clone());
    run_n(&db, N, "UPDATE test.t SET k = k + 1 WHERE id = {id}").await;
    let s1 = sample(&mut server).await;
    let sig = window.push(s1.clone());
    assert_eq!(
        commits(&s1) - commits(&s0),
        0,
        "Com_commit moved under autocommit writes"
    );
    let d = ids(&s1) - ids(&s0);
    assert!(
        (2 * N as u64..=2 * N as u64 + 4).contains(&d),
        "{N} autocommit updates moved Innodb_max_trx_id by {d}, not 2 each"
    );
    let inflow = sig.undo_inflow().unwrap() * sig.window_s;
    assert!(
        (inflow - N as f64).abs() <= 2.0 + 0.01 * N as f64,
        "the signals say {inflow:.1} read-write transactions for {N} (rw_trx_rate {:?}, \
         commit_rate {:?}, window {} s)",
        sig.rw_trx_rate,
        sig.commit_rate,
        sig.window_s
    );

    run_n(&db, N, "SELECT k FROM test.t WHERE id = {id}").await;
    let s2 = sample(&mut server).await;
    let d = ids(&s2) - ids(&s1);
    assert!(
        d <= 2,
        "{N} autocommit SELECTs moved Innodb_max_trx_id by {d}"
    );

    let mut conn = db.connect().await;
    exec_on(&mut conn, "BEGIN").await.unwrap();
    for id in 1..=50 {
        exec_on(
            &mut conn,
            &format!("UPDATE test.t SET k = k + 1 WHERE id = {id}"),
        )
        .await
        .unwrap();
    }
    exec_on(&mut conn, "COMMIT").await.unwrap();
    let s3 = sample(&mut server).await;
    assert_eq!(commits(&s3) - commits(&s2), 1, "one COMMIT statement");
    let d = ids(&s3) - ids(&s2);
    assert!(
        (2..=4).contains(&d),
        "one transaction of 50 updates moved Innodb_max_trx_id by {d}, not 2"
    );
}

/// The unfreed share of history (`Signals::unfreed_history`) rests on the
/// INNODB_METRICS purge counters: innopilot's sampler reads them only while they are
/// enabled (off by default: a disabled counter stands still), purge counts one record
/// for each row users update or delete once it has handled it
/// (`row_purge_record()`, row0purge.cc), so its pace against the rows changed is 1
/// when it keeps up, and it counts none while a read view blocks it, which keeps the
/// estimate from calling history grown behind a view unfreed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_purge_counters_count_each_row_changed_once_purge_handles_it() {
    const N: u64 = 1_000;
    let (db, mut server) = counting_server().await;
    let s = server.sample().await.unwrap();
    assert_eq!(s.purge_records, None, "counters are off by default: {s:?}");

    db.exec("SET GLOBAL innodb_monitor_enable = 'module_purge'")
        .await;
    let mut window = SignalWindow::new(Duration::from_secs(600));
    let s0 = server.sample().await.unwrap();
    let handled0 = s0
        .purge_records
        .expect("purge counters not sampled once enabled");
    window.push(s0);
    run_n(&db, N as u32, "UPDATE test.t SET k = k + 1 WHERE id = {id}").await;
    db.exec("DELETE FROM test.t WHERE id > 800").await;
    // Purge handles them within seconds: N updates and 200 delete-marks. A second
    // later nothing more is counted.
    let want = N + 200;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let s = server.sample().await.unwrap();
        if s.purge_records.unwrap_or(0) >= handled0 + want {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "purge counted {:?} of {want} records in 60 s",
            s.purge_records.map(|h| h - handled0)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let s1 = server.sample().await.unwrap();
    let sig = window.push(s1.clone());
    let handled = s1.purge_records.unwrap() - handled0;
    assert!(
        (want..=want + 5).contains(&handled),
        "{N} updates and 200 deletes: purge counted {handled} records"
    );
    let pace = sig.purge_pace.expect("pace");
    assert!(
        (0.99..=1.01).contains(&pace),
        "pace {pace} with nothing blocking purge"
    );

    // Behind a read view purge handles none of the new rows: the pace falls under
    // KEEP_PACE and history growth stays debt.
    let view = db.hold_read_view().await;
    let mut window = SignalWindow::new(Duration::from_secs(600));
    let s2 = server.sample().await.unwrap();
    window.push(s2.clone());
    run_n(&db, N as u32, "UPDATE test.t SET k = k + 1 WHERE id = {id}").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let s3 = server.sample().await.unwrap();
    let sig = window.push(s3.clone());
    let handled = s3.purge_records.unwrap() - s2.purge_records.unwrap();
    assert!(
        handled <= N / 20,
        "{handled} of {N} rows counted behind a read view"
    );
    assert!(
        sig.purge_pace
            .is_some_and(|p| p < innopilot::signals::KEEP_PACE),
        "pace {:?} behind a read view",
        sig.purge_pace
    );
    assert!(
        s3.history_len.unwrap() >= s2.history_len.unwrap() + N / 2,
        "history {:?} → {:?}",
        s2.history_len,
        s3.history_len
    );
    assert_eq!(
        sig.unfreed_history,
        Some(0),
        "growth behind a view called unfreed"
    );
    view.release().await;

    db.exec("SET GLOBAL innodb_monitor_disable = 'module_purge'")
        .await;
    let s = server.sample().await.unwrap();
    assert_eq!(
        s.purge_records, None,
        "a disabled counter stands still: {s:?}"
    );
}

/// Little's law over `for_`: the mean of Threads_running less the sampler's own query,
/// over the rows changed per second, µs a row, as the purge-rate policy's cost meter
/// reads it (its averages are the ratio of the means too). Sampled through innopilot's
/// own sampler every 100 ms.
async fn littles_row_us(server: &mut LiveServer, for_: Duration) -> f64 {
    let first = server.sample().await.unwrap();
    let start = Instant::now();
    let (mut running, mut n) = (0.0, 0u32);
    let mut last = first.clone();
    while start.elapsed() < for_ {
        tokio::time::sleep(Duration::from_millis(100)).await;
        last = server.sample().await.unwrap();
        let t = last.threads_running.expect("Threads_running sampled");
        running += t.saturating_sub(1) as f64;
        n += 1;
    }
    let rows = (last.rows_updated.unwrap() - first.rows_updated.unwrap()) as f64;
    let secs = (last.t_ms - first.t_ms) as f64 / 1000.0;
    assert!(rows > 0.0, "no row changed in {secs} s");
    running / n as f64 / (rows / secs) * 1e6
}

/// The purge-rate policy's cost meter (`CostMeter`) takes a row's time under the delay
/// as Threads_running over the DML rate and the row without it as that less the
/// delay. That rests on the server counting a thread asleep in
/// `row_mysql_delay_if_needed()` as running (it sleeps inside the statement): were it
/// not, the row time read under the delay would not hold it, the share read would be
/// near 0 and the cap would rise to its guard. Four closed-loop writers, with and
/// without a delay the server applies to every row (purge progressing, history above
/// the lag), read by innopilot's own sampler.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_counts_a_thread_asleep_in_the_delay_as_running() {
    const DELAY_US: u64 = 2_000;
    const LAG: u64 = 1_000;
    const WRITERS: usize = 4;
    let _serial = LOADED.lock().await;
    let db = slow_purge_server().await;
    let target = parse_dsn(&db.dsn()).unwrap();
    let mut server = LiveServer::new(target, LiveOptions::default());
    server.probe().await.unwrap();

    // A backlog behind a read view, which the writers keep above the lag.
    let view = db.hold_read_view().await;
    let load = db.spawn_update_load(WRITERS);
    backlog_behind_view(&db).await;
    // No delay set yet: the row time of the same writers, purge blocked.
    let bare = littles_row_us(&mut server, Duration::from_secs(3)).await;

    db.exec(&format!("SET GLOBAL innodb_max_purge_lag = {LAG}"))
        .await;
    db.exec(&format!(
        "SET GLOBAL innodb_max_purge_lag_delay = {DELAY_US}"
    ))
    .await;
    release_until_purge_progresses(&db, view).await;
    let delayed = littles_row_us(&mut server, Duration::from_secs(3)).await;
    let h_after = db.history_list_length().await;
    db.exec("SET GLOBAL innodb_max_purge_lag = 0").await;
    let stats = load.stop().await;
    assert!(
        h_after > LAG,
        "history {h_after} fell under the lag {LAG} during the measurement: no evidence"
    );
    assert_eq!(stats.errors, 0, "the writers failed: {stats:?}");
    let extra = delayed - bare;
    let d = DELAY_US as f64;
    // Stated tolerance: the row time read under the delay holds at least 0.7 of it
    // (the server's switch is off for a batch that handled no pages) and at most the
    // delay plus 1.5 ms of sleep overhead and purge beside the rows (the first test of
    // this file: 1.11-1.15 x a 2 ms delay on the median row, 2026-11-26). Measured
    // here (2 cores, 2026-11-29, three runs): 810-911 µs a row without the delay,
    // 0.88, 1.03 and 1.13 x the delay read with it.
    assert!(
        extra >= 0.7 * d && extra <= d + 1_500.0,
        "Little's law read {bare:.0} µs a row without the delay and {delayed:.0} µs with \
         {DELAY_US} µs of it: +{extra:.0} µs"
    );
    eprintln!(
        "cost meter check: {WRITERS} writers, Little's law {bare:.0} µs a row without a delay, \
         {delayed:.0} µs with {DELAY_US} µs ({:.2} of the delay read; the share read \
         {:.0} %)",
        extra / d,
        d / delayed * 100.0
    );
}
