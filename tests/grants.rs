//! The grants observing needs, per flavor and version, in `run`'s privilege message and
//! in `diagnose`: on MariaDB ≥ 10.5.9 `SHOW REPLICA STATUS` needs `SLAVE MONITOR`, and
//! a refused replica status is reported as unknown, never as "not a replica".

mod common;

use common::run::innopilot_isolated;
use common::MariaDb;

fn innopilot(args: &[&str]) -> (Option<i32>, String, String) {
    let out = innopilot_isolated(args);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn finding_ids(stdout: &str) -> Vec<String> {
    let v: serde_json::Value = serde_json::from_str(stdout).expect("diagnose --json is JSON");
    v["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .map(|f| f["id"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_per_flavor_and_an_unreadable_replica_status() {
    let db = MariaDb::new();
    // What the README used to say: not enough on MariaDB 10.11.
    let dsn = db
        .create_user(
            "observer",
            "obs-pw-7",
            &["PROCESS ON *.*", "REPLICATION CLIENT ON *.*"],
        )
        .await;
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.json");

    // run's privilege message names this version's grants.
    let (code, _, err) = innopilot(&[
        "run",
        "--dsn",
        &dsn,
        "--audit",
        "-",
        "--state-file",
        state.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(3), "{err}");
    assert!(
        err.contains("GRANT SUPER ON *.* TO 'observer'@'127.0.0.1'"),
        "{err}"
    );
    assert!(
        err.contains("GRANT PROCESS, SLAVE MONITOR ON *.* TO 'observer'@'127.0.0.1'"),
        "{err}"
    );
    assert!(!err.contains("obs-pw-7"), "{err}");

    // Replica status refused: unknown, with the grant, not "Not a replica".
    let (code, out, err) = innopilot(&["diagnose", "--json", "--samples", "2", "--dsn", &dsn]);
    assert_eq!(code, Some(0), "{err}");
    let ids = finding_ids(&out);
    assert!(
        ids.contains(&"replica_status_unreadable".to_string()),
        "{ids:?}"
    );
    assert!(!ids.contains(&"not_a_replica".to_string()), "{ids:?}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(v["server"]["is_replica"].is_null(), "{}", v["server"]);
    let f = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == "replica_status_unreadable")
        .unwrap();
    assert_eq!(
        f["sql"][0],
        "GRANT SLAVE MONITOR ON *.* TO 'observer'@'127.0.0.1';"
    );

    // With the grant it can tell: this private server is not a replica.
    db.exec("GRANT SLAVE MONITOR ON *.* TO 'observer'@'127.0.0.1'")
        .await;
    let (code, out, err) = innopilot(&["diagnose", "--json", "--samples", "2", "--dsn", &dsn]);
    assert_eq!(code, Some(0), "{err}");
    let ids = finding_ids(&out);
    assert!(ids.contains(&"not_a_replica".to_string()), "{ids:?}");
    assert!(
        !ids.contains(&"replica_status_unreadable".to_string()),
        "{ids:?}"
    );
}
