//! `diagnose --json` on a private MariaDB with bad static settings set by `SET GLOBAL`:
//! the purge lag, the delay cap and io_capacity_max each have their finding and SQL, and no
//! static finding appears with the defaults (idle and under load); redo-size advice
//! under redo pressure stays within the stated multiple of the buffer pool.
//! `single_purge_thread` is asserted only absent here: a 4-connection update load does
//! not outrun one MariaDB purge thread on this machine (history fell ~260 undo logs/s
//! even with innodb_purge_batch_size = 1), so its presence is unit-tested.

mod common;

use std::process::Command;

use common::{innopilot_bin, MariaDb};
use serde_json::Value;

async fn diagnose(db: &MariaDb, samples: u32, interval: &str) -> Value {
    let dsn = db.dsn();
    let interval = interval.to_string();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(innopilot_bin())
            .args(["diagnose", "--json", "--samples"])
            .arg(samples.to_string())
            .args(["--interval", &interval, "--dsn", &dsn])
            .output()
            .expect("running innopilot diagnose")
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "stderr: {stderr}");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {stderr}"))
}

fn finding<'a>(v: &'a Value, id: &str) -> Option<&'a Value> {
    v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == id)
}

const STATIC_IDS: [&str; 4] = [
    "purge_lag_throttles",
    "purge_delay_cap_wall",
    "io_capacity_max_low",
    "single_purge_thread",
];

/// The one SQL statement of a finding, `SET GLOBAL <name> = <n>;`, as n.
fn set_value(f: &Value, name: &str) -> u64 {
    let sql = f["sql"].as_array().unwrap();
    let prefix = format!("SET GLOBAL {name} = ");
    let s = sql
        .iter()
        .filter_map(Value::as_str)
        .find(|s| s.starts_with(&prefix))
        .unwrap_or_else(|| panic!("no {prefix}… in {f:#}"));
    s[prefix.len()..].trim_end_matches(';').parse().unwrap()
}

fn ids(v: &Value) -> Vec<String> {
    v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["id"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_server_with_the_defaults_has_no_static_findings() {
    // A fresh server with nothing to flush: the device shows nothing above
    // io_capacity, and the purge settings are the defaults.
    let db = MariaDb::builder().log_file_size("16M").start();
    let v = diagnose(&db, 3, "500ms").await;
    for id in STATIC_IDS {
        assert!(
            finding(&v, id).is_none(),
            "{id} with the defaults: {:?}",
            ids(&v)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_static_settings_have_findings_and_sql_and_the_defaults_none() {
    // 16 MiB of redo and a table larger than the 64 MiB buffer pool's share of dirty
    // pages: an update load keeps the redo near its flush points and the device busy.
    let db = MariaDb::builder().log_file_size("16M").start();
    db.prepare_table(200_000).await;

    // Defaults under load: the purge settings are fine (io_capacity may truly be
    // below what the device shows, so it is not asserted here).
    let load = db.spawn_update_load(4);
    let v = diagnose(&db, 12, "1s").await;
    for id in [
        "purge_lag_throttles",
        "purge_delay_cap_wall",
        "single_purge_thread",
    ] {
        assert!(
            finding(&v, id).is_none(),
            "{id} with the defaults: {:?}",
            ids(&v)
        );
    }
    assert_redo_advice_within_bounds(&db, &v).await;

    for sql in [
        "SET GLOBAL innodb_max_purge_lag = 1000",
        "SET GLOBAL innodb_max_purge_lag_delay = 10000000",
        "SET GLOBAL innodb_io_capacity = 100",
        "SET GLOBAL innodb_io_capacity_max = 100",
        "SET GLOBAL innodb_purge_threads = 1",
    ] {
        db.exec(sql).await;
    }
    let v = diagnose(&db, 12, "1s").await;
    // Lift the brake before stopping the load, so no row sleeps seconds.
    db.exec("SET GLOBAL innodb_max_purge_lag = 0").await;
    load.stop().await;

    let lag = finding(&v, "purge_lag_throttles").unwrap_or_else(|| panic!("{v:#}"));
    assert_eq!(lag["sql"][0], "SET GLOBAL innodb_max_purge_lag = 0;");
    let why = lag["explanation"].as_str().unwrap();
    assert!(
        why.contains("innodb_max_purge_lag = 1000")
            && why.contains("MariaDB delays only while purge handles pages"),
        "{why}"
    );

    let cap = finding(&v, "purge_delay_cap_wall").unwrap_or_else(|| panic!("{v:#}"));
    let want = set_value(cap, "innodb_max_purge_lag_delay");
    assert!((1..10_000_000).contains(&want), "{cap:#}");
    assert!(cap["explanation"]
        .as_str()
        .unwrap()
        .contains("once per row"));

    // io_capacity_max 100 caps the page cleaner's batches at 100 pages, so whether the
    // device shows more in the run (LRU writes, back-to-back batches at the sync
    // point) varies: one fresh-clone run peaked at 100.4 pages/s, a local one above
    // 120. The finding must follow what the run observed, either way.
    let peak = v["observed"]["peak_pages_flushed_rate"].as_f64();
    match finding(&v, "io_capacity_max_low") {
        Some(io) => {
            let want = set_value(io, "innodb_io_capacity_max");
            let p = peak.unwrap_or_else(|| panic!("a finding without an observed peak: {v:#}"));
            assert!(
                p > 120.0,
                "finding at an observed peak of {p} pages/s: {io:#}"
            );
            assert_eq!(want, (p.ceil() as u64).div_ceil(100) * 100, "{io:#}");
        }
        None => assert!(
            peak.is_none_or(|p| p <= 120.0),
            "the device showed {peak:?} pages/s over io_capacity_max 100 and no finding: {v:#}"
        ),
    }

    assert_redo_advice_within_bounds(&db, &v).await;
}

/// One purge thread that does not keep up, with no read view blocking it: the finding
/// names the sustained growth and gives the SQL; once purge has its four threads back
/// and keeps up, the finding is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_purge_thread_that_falls_behind_has_a_finding() {
    // A redo log large enough that the writers are not held at the sync point: with
    // the default 32 MiB a slow machine held eight writers at 86 % of the maximum
    // checkpoint age in all three rounds (a fresh-clone CI run, 2026-11-26), and held
    // writers leave one purge thread keeping up, which is not the case under test.
    let db = MariaDb::builder().log_file_size("256M").start();
    db.prepare_table(50_000).await;
    // The load updates k: with an index on it, purge must also remove each old
    // secondary-index entry. One thread handling one undo page a batch then cannot
    // keep up with eight writers (with four threads and the default batch it can).
    db.exec("ALTER TABLE test.t ADD INDEX k (k)").await;
    db.exec("SET GLOBAL innodb_purge_threads = 1").await;
    db.exec("SET GLOBAL innodb_purge_batch_size = 1").await;
    let load = db.spawn_update_load(8);
    // On a busy machine the writers can still be held by something else until purge
    // catches up (before the larger redo, one fresh-clone CI run: history -539 undo
    // logs/s at 92 % of the maximum checkpoint age). Such a round says nothing about
    // the finding except that it must be absent; the test looks again. Five rounds:
    // beside this file's other two tests (each a server under load on 2 cores) purge
    // kept up for all of three rounds once (fresh-clone CI, 2026-11-29: history 4 197,
    // -201 undo logs/s), while the test alone sees history grow in the first.
    const ROUNDS: u32 = 5;
    let mut v = Value::Null;
    for round in 1..=ROUNDS {
        v = diagnose(&db, 12, "1s").await;
        let rate = v["signals"]["history_rate"].as_f64();
        if rate.is_some_and(|r| r > 0.0) {
            break;
        }
        assert!(
            finding(&v, "single_purge_thread").is_none(),
            "a finding while history did not grow ({rate:?}): {v:#}"
        );
        assert!(
            round < ROUNDS,
            "purge kept up with eight writers in {ROUNDS} rounds of 12 s: the premise of this \
             test (one thread with one-page batches falls behind) did not hold: {v:#}"
        );
    }
    let f = finding(&v, "single_purge_thread").unwrap_or_else(|| panic!("{:?}: {v:#}", ids(&v)));
    assert_eq!(f["sql"][0], "SET GLOBAL innodb_purge_threads = 4;", "{f:#}");
    let why = f["explanation"].as_str().unwrap();
    assert!(
        why.contains("undo logs/s") && why.contains("no read view"),
        "{why}"
    );
    // With the threads back (over as long a run), purge keeps up: no such finding.
    db.exec("SET GLOBAL innodb_purge_batch_size = 127").await;
    db.exec("SET GLOBAL innodb_purge_threads = 4").await;
    let v = diagnose(&db, 12, "1s").await;
    load.stop().await;
    assert!(
        finding(&v, "single_purge_thread").is_none(),
        "{:?}",
        ids(&v)
    );
}

/// The advised innodb_log_file_size is whole MiB and at most the stated multiple (2)
/// of the server's buffer pool, and the text says what the rate is based on.
async fn assert_redo_advice_within_bounds(db: &MariaDb, v: &Value) {
    let bp: u64 = db
        .query_scalar_string("SELECT @@innodb_buffer_pool_size")
        .await
        .expect("buffer pool size")
        .parse()
        .unwrap();
    // 16 MiB of redo under the update load fills in seconds: the finding is there.
    let r = finding(v, "redo_size").unwrap_or_else(|| panic!("no redo_size in {v:#}"));
    let why = r["explanation"].as_str().unwrap();
    assert!(
        why.contains("averaged over") && why.contains("2 × the buffer pool"),
        "{why}"
    );
    assert!(
        why.contains("free on the redo volume"),
        "same host: free disk checked: {why}"
    );
    // An hour of writes is far above 2 × 64 MiB: the bound decides the size.
    let n = set_value(r, "innodb_log_file_size");
    assert!(
        n <= 2 * bp && n % (1 << 20) == 0,
        "{n} vs buffer pool {bp}: {r:#}"
    );
    assert_eq!(r["details"]["advised_bytes"], n);
    assert_eq!(n, 2 * bp, "{r:#}");
}
