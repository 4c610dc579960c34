//! Replica awareness on a real pair of private MariaDB servers: replica lag is sampled
//! (a number on the replica, null on the primary), and with `[policy.replica]` a lag
//! above `max_lag` makes the foreground-protection side act (purge yields: one purge
//! thread), shown by a dry run's audit log on a delayed replica.

mod common;

use std::time::{Duration, Instant};

use common::configs::TestConfig;
use common::run::{assert_took_less, events, innopilot_json, stop, wait_for_record, Run};
use common::{eventually, MariaDb};

fn status_json(dsn: &str) -> serde_json::Value {
    innopilot_json(&["status", "--json", "--dsn", dsn])
}

/// `SHOW SLAVE STATUS` as (column, value) pairs.
async fn slave_status(db: &MariaDb) -> Vec<(String, Option<String>)> {
    use sqlx::{Column, Connection, Executor, Row};
    let mut conn = db.connect().await;
    let rows = tokio::time::timeout(
        Duration::from_secs(10),
        conn.fetch_all(sqlx::raw_sql("SHOW SLAVE STATUS")),
    )
    .await
    .expect("SHOW SLAVE STATUS timed out")
    .expect("SHOW SLAVE STATUS");
    let _ = tokio::time::timeout(Duration::from_secs(2), conn.close()).await;
    rows.first()
        .map(|r| {
            r.columns()
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    let v = r
                        .try_get_unchecked::<Option<Vec<u8>>, usize>(i)
                        .ok()
                        .flatten()
                        .map(|b| String::from_utf8_lossy(&b).into_owned());
                    (c.name().to_string(), v)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Polls `SHOW SLAVE STATUS` on `replica` until `check` finds what it waits for.
async fn wait_slave_status<T>(
    replica: &MariaDb,
    what: &str,
    check: impl Fn(&[(String, Option<String>)]) -> Option<T>,
) -> T {
    eventually(
        what,
        Duration::from_secs(30),
        Duration::from_millis(200),
        || async { check(&slave_status(replica).await) },
    )
    .await
}

fn col<'a>(st: &'a [(String, Option<String>)], name: &str) -> Option<&'a str> {
    st.iter()
        .find(|(k, _)| k == name)
        .and_then(|(_, v)| v.as_deref())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replica_lag_is_sampled_and_throttles_purge() {
    let t0 = Instant::now();
    let primary = MariaDb::builder()
        .args([
            "--server-id=1",
            "--log-bin=primary-bin",
            "--binlog-format=ROW",
        ])
        .start();
    let replica = MariaDb::builder().args(["--server-id=2"]).start();
    primary.prepare_table(1_000).await;
    // MASTER_DELAY makes the SQL thread apply each event 3 s after the source wrote
    // it, so Seconds_Behind_Master grows under writes: a lagging replica on demand.
    replica
        .exec(&format!(
            "CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT={}, MASTER_USER='root', \
             MASTER_PASSWORD='', MASTER_USE_GTID=no, MASTER_DELAY=3; START SLAVE;",
            primary.port()
        ))
        .await;
    wait_slave_status(&replica, "replication running with a known lag", |st| {
        (col(st, "Slave_IO_Running") == Some("Yes")
            && col(st, "Slave_SQL_Running") == Some("Yes")
            && col(st, "Seconds_Behind_Master").is_some())
        .then_some(())
    })
    .await;

    // Sampled: a number on the replica, null on the primary.
    let r = status_json(&replica.dsn());
    assert!(
        r["signals"]["replica_lag"]["value"].is_u64(),
        "replica: {:#}",
        r["signals"]["replica_lag"]
    );
    assert_eq!(r["signals"]["replica_lag"]["unit"], "s");
    let p = status_json(&primary.dsn());
    assert!(
        p["signals"]["replica_lag"]["value"].is_null(),
        "primary: {:#}",
        p["signals"]["replica_lag"]
    );

    // Writes on the primary; the delayed replica falls behind by about 3 s.
    let load = primary.spawn_update_load(1);
    wait_slave_status(&replica, "Seconds_Behind_Master >= 2", |st| {
        col(st, "Seconds_Behind_Master")
            .and_then(|v| v.parse::<u64>().ok())
            .filter(|l| *l >= 2)
    })
    .await;

    // The replica policy, alone (watermark off), acting on lag above 1 s.
    let run = Run::with_config(
        &TestConfig::new()
            .restore_timeout("5s")
            .section("[policy.watermark]\nenabled = false")
            .section("[policy.replica]\nenabled = true\nmax_lag = \"1s\"\nresume_lag = \"0s\"")
            .build(),
    );
    let child = run.spawn(&replica.dsn(), &["--dry-run"]);
    let decision = wait_for_record(
        &run,
        "a replica-lag decision in the audit log",
        Duration::from_secs(30),
        |r| {
            r["event"] == "decision"
                && r["knob"] == "innodb_purge_threads"
                && r["reason"]
                    .as_str()
                    .is_some_and(|s| s.starts_with("replica lag"))
        },
    )
    .await;
    assert_eq!(decision["outcome"], "dry_run", "{decision:#}");
    // One purge thread asked for; the guard walks there one step at a time.
    assert_eq!(decision["proposed"], 1, "{decision:#}");
    assert!(
        decision["to"].as_u64() < decision["from"].as_u64(),
        "{decision:#}"
    );
    assert!(
        decision["reason"]
            .as_str()
            .unwrap()
            .contains("policy.replica.max_lag 1 s"),
        "{decision:#}"
    );
    stop(child, Duration::from_secs(20));
    assert!(events(&run.records(), "start").len() == 1);
    load.stop().await;
    let _ = replica.try_exec("STOP SLAVE").await;
    assert_took_less(t0, Duration::from_secs(120));
}
