//! Self-tests of the real-server harness in `tests/common`.

mod common;

use std::time::{Duration, Instant};

use common::{eventually, exec_on, scalar_string_on, MariaDb};
use sqlx::{ConnectOptions, Connection};

/// A connection through a DSN as a client would make it (sqlx parses the DSN).
async fn connect_dsn(dsn: &str) -> sqlx::mysql::MySqlConnection {
    dsn.parse::<sqlx::mysql::MySqlConnectOptions>()
        .unwrap()
        .connect()
        .await
        .unwrap_or_else(|e| panic!("connecting to {dsn}: {e}"))
}

/// The named global variables as the server reports them (a missing one as `<unset>`).
async fn globals_of(db: &MariaDb, names: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    for name in names {
        let v = db.global_variable(name).await;
        out.push(v.unwrap_or_else(|| "<unset>".into()));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starts_a_private_server_on_its_own_port_and_socket() {
    let t0 = Instant::now();
    let db = MariaDb::new();
    eprintln!("first server ready after {:?}", t0.elapsed());
    let t1 = Instant::now();
    let other = MariaDb::new();
    eprintln!("second server ready after {:?}", t1.elapsed());

    assert_ne!(db.port(), 3306);
    assert_ne!(other.port(), 3306);
    assert_ne!(db.port(), other.port());
    assert_ne!(db.datadir(), other.datadir());
    assert_eq!(db.dsn(), format!("mysql://root@127.0.0.1:{}/", db.port()));

    let version = db.query_scalar_string("SELECT @@version").await.unwrap();
    assert!(version.contains("MariaDB"), "version {version:?}");

    // The server we talk to over TCP is ours: same port, socket and datadir.
    let row = db
        .query_rows("SELECT @@port, @@socket, @@datadir, @@bind_address, @@log_bin, @@skip_name_resolve, CURRENT_USER()")
        .await
        .remove(0);
    let row: Vec<String> = row.into_iter().map(Option::unwrap_or_default).collect();
    assert_eq!(row[0], db.port().to_string());
    assert_eq!(row[1], db.socket_path().to_string_lossy());
    assert_eq!(
        row[2].trim_end_matches('/'),
        db.datadir().to_string_lossy().trim_end_matches('/')
    );
    assert_eq!(row[3], "127.0.0.1");
    assert_eq!(row[4], "0", "binary log must be off");
    assert_eq!(row[5], "1");
    assert_eq!(
        row[6], "root@127.0.0.1",
        "root logs in over TCP without a password"
    );

    // Builder defaults.
    assert_eq!(
        globals_of(&db, &["innodb_buffer_pool_size", "innodb_log_file_size"]).await,
        ["67108864", "33554432"]
    );

    // The socket works too, both directly and through the sqlx socket DSN.
    let mut conn = db.connect_socket().await;
    let who = scalar_string_on(&mut conn, "SELECT CURRENT_USER()")
        .await
        .unwrap();
    assert_eq!(who.as_deref(), Some("root@localhost"));
    conn.close().await.unwrap();
    let mut conn = connect_dsn(&db.socket_dsn()).await;
    let port = scalar_string_on(&mut conn, "SELECT @@port").await.unwrap();
    assert_eq!(port, Some(db.port().to_string()));
    conn.close().await.unwrap();

    // No anonymous accounts, no PUBLIC grants on `test`.
    let anon = db
        .query_scalar_string("SELECT COUNT(*) FROM mysql.global_priv WHERE User = ''")
        .await;
    assert_eq!(anon.as_deref(), Some("0"));
    let public = db
        .query_scalar_string("SELECT COUNT(*) FROM mysql.db WHERE User = 'PUBLIC'")
        .await;
    assert_eq!(public.as_deref(), Some("0"));

    // Never the system server.
    assert_ne!(
        db.socket_path().to_string_lossy(),
        "/run/mysqld/mysqld.sock"
    );
    assert!(db.error_log().contains("ready for connections"));
    // Startup checks log in and out properly.
    assert!(
        !db.error_log().contains("Aborted connection"),
        "{}",
        db.error_log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn builder_settings_reach_the_server() {
    let db = MariaDb::builder()
        .buffer_pool_size("128M")
        .log_file_size("48M")
        .arg("--innodb-purge-threads=1")
        .args(["--innodb-io-capacity=300"])
        .start();
    assert_eq!(
        globals_of(
            &db,
            &[
                "innodb_buffer_pool_size",
                "innodb_log_file_size",
                "innodb_purge_threads",
                "innodb_io_capacity"
            ]
        )
        .await,
        ["134217728", "50331648", "1", "300"]
    );
    // The template was installed with this redo size: no resize at startup.
    assert!(
        !db.error_log().contains("Resizing redo log"),
        "{}",
        db.error_log_tail(20)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_keeps_port_and_data_and_the_load_reconnects() {
    let mut db = MariaDb::new();
    let port = db.port();
    db.prepare_table(1_000).await;
    assert_eq!(
        db.query_scalar_string("SELECT COUNT(*) FROM test.t")
            .await
            .as_deref(),
        Some("1000")
    );
    assert_eq!(db.exec("UPDATE test.t SET k = 42 WHERE id = 7").await, 1);

    let load = db.spawn_update_load(1);
    load.wait_for_updates(50, Duration::from_secs(20)).await;

    // Crash.
    let pid = db.pid().unwrap();
    let t = Instant::now();
    db.kill();
    assert!(!db.is_running());
    assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
    db.start();
    eprintln!(
        "restart after SIGKILL (crash recovery) took {:?}",
        t.elapsed()
    );
    assert_eq!(db.port(), port);
    assert_ne!(db.pid(), Some(pid));
    assert_eq!(
        db.query_scalar_string("SELECT COUNT(*) FROM test.t")
            .await
            .as_deref(),
        Some("1000")
    );
    assert!(db.error_log().contains("ready for connections"));

    // The load survives the crash: it counted errors and reconnected.
    load.wait_for_updates(50, Duration::from_secs(20)).await;

    // Clean shutdown and start.
    let t = Instant::now();
    db.stop();
    assert!(!db.is_running());
    eprintln!("clean stop took {:?}", t.elapsed());
    let t = Instant::now();
    db.start();
    eprintln!("clean start took {:?}", t.elapsed());
    assert_eq!(db.port(), port);
    load.wait_for_updates(50, Duration::from_secs(20)).await;

    let stats = load.stop().await;
    assert!(
        stats.errors > 0,
        "the restarts should have been noticed: {stats:?}"
    );
    // k starts at 0 (42 for id 7): SUM(k) counts every committed update. Updates that
    // were in flight at the SIGKILL may or may not have committed; afterwards the
    // counts must match exactly.
    let sum: u64 = db
        .query_scalar_string("SELECT SUM(k) FROM test.t")
        .await
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        sum.abs_diff(stats.updates + 42) <= 2,
        "SUM(k)={sum}, updates={}",
        stats.updates
    );
}

/// Polls the history list length (30 s at most) until `ok` accepts it; returns it.
async fn wait_history(db: &MariaDb, what: &str, ok: impl Fn(u64) -> bool) -> u64 {
    eventually(
        what,
        Duration::from_secs(30),
        Duration::from_millis(200),
        || async {
            let h = db.history_list_length().await;
            ok(h).then_some(h)
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_view_makes_history_grow_and_release_lets_purge_drain_it() {
    let db = MariaDb::builder()
        // The point is purge, not fsync speed of the CI disk.
        .arg("--innodb-flush-log-at-trx-commit=2")
        .start();
    db.prepare_table(10_000).await;
    let load = db.spawn_update_load(2);
    load.wait_for_updates(200, Duration::from_secs(20)).await;
    let before = db.history_list_length().await;

    let t = Instant::now();
    let view = db.hold_read_view().await;
    assert_eq!(view.rows_seen(), 10_000);
    let grown = wait_history(
        &db,
        "history list to grow by 5000 while the read view is held",
        |h| h >= before + 5_000,
    )
    .await;
    eprintln!(
        "history {before} -> {grown} in {:?} ({} updates so far)",
        t.elapsed(),
        load.updates()
    );

    // The view sees the table as it was, whatever the load did since.
    let mut view = view;
    let seen = scalar_string_on(view.connection(), "SELECT SUM(k) FROM test.t")
        .await
        .unwrap();
    let now = db.query_scalar_string("SELECT SUM(k) FROM test.t").await;
    assert_ne!(seen, now);

    let peak = db.history_list_length().await;
    let t = Instant::now();
    view.release().await;
    let drained = wait_history(
        &db,
        "history list to fall below half its peak after the view ended",
        |h| h < peak / 2,
    )
    .await;
    eprintln!(
        "history {peak} -> {drained} in {:?} after release, load still running",
        t.elapsed()
    );

    let stats = load.stop().await;
    assert_eq!(stats.errors, 0, "{stats:?}");
    assert!(stats.updates > 5_000, "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_read_view_handle_ends_the_transaction() {
    let db = MariaDb::new();
    db.prepare_table(100).await;
    let view = db.hold_read_view().await;
    let id = view.connection_id();
    let trx = format!(
        "SELECT COUNT(*) FROM information_schema.INNODB_TRX WHERE trx_mysql_thread_id = {id}"
    );
    assert_eq!(db.query_scalar_string(&trx).await.as_deref(), Some("1"));
    drop(view);
    eventually(
        "the server to end the dropped read view's transaction",
        Duration::from_secs(10),
        Duration::from_millis(100),
        || async { (db.query_scalar_string(&trx).await.as_deref() == Some("0")).then_some(()) },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_user_gets_exactly_the_granted_privileges() {
    let db = MariaDb::new();
    db.prepare_table(10).await;
    let dsn = db
        .create_user(
            "watcher",
            "s3cret:/@x",
            &["PROCESS ON *.*", "SELECT ON test.*"],
        )
        .await;
    assert!(
        dsn.starts_with("mysql://watcher:s3cret%3A%2F%40x@127.0.0.1:"),
        "{dsn}"
    );
    let mut conn = connect_dsn(&dsn).await;
    let who = scalar_string_on(&mut conn, "SELECT CURRENT_USER()").await;
    assert_eq!(who.unwrap().as_deref(), Some("watcher@127.0.0.1"));
    let rows = scalar_string_on(&mut conn, "SELECT COUNT(*) FROM test.t").await;
    assert_eq!(rows.unwrap().as_deref(), Some("10"));
    // Readable status, but no writes and no SET GLOBAL: PUBLIC grants on `test` are gone.
    scalar_string_on(
        &mut conn,
        "SHOW GLOBAL STATUS LIKE 'Innodb_history_list_length'",
    )
    .await
    .unwrap();
    let e = exec_on(&mut conn, "UPDATE test.t SET k = 1")
        .await
        .unwrap_err();
    assert_eq!(e.errno(), Some(1142), "{e}"); // ER_TABLEACCESS_DENIED_ERROR
    assert_eq!(e.sqlstate().as_deref(), Some("42000"), "{e}");
    let e = exec_on(&mut conn, "SET GLOBAL innodb_io_capacity = 300")
        .await
        .unwrap_err();
    assert_eq!(e.errno(), Some(1227), "{e}"); // ER_SPECIFIC_ACCESS_DENIED_ERROR
    conn.close().await.unwrap();

    // Wrong password is refused.
    let bad = db.user_dsn("watcher", "nope");
    let r = bad
        .parse::<sqlx::mysql::MySqlConnectOptions>()
        .unwrap()
        .connect()
        .await;
    assert!(r.is_err());
}

#[test]
fn drop_stops_the_server_and_removes_its_directory_even_on_panic() {
    let seen = std::sync::Mutex::new(None);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let db = MariaDb::new();
        *seen.lock().unwrap() = Some((db.pid().unwrap(), db.root_dir().to_path_buf()));
        panic!("simulated test failure");
    }));
    assert!(r.is_err());
    let (pid, dir) = seen.lock().unwrap().take().unwrap();
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "mariadbd {pid} still running"
    );
    assert!(!dir.exists(), "{} still exists", dir.display());

    // And without a panic, a clean shutdown.
    let db = MariaDb::new();
    let (pid, dir) = (db.pid().unwrap(), db.root_dir().to_path_buf());
    let t = Instant::now();
    drop(db);
    eprintln!("drop (clean shutdown + rm) took {:?}", t.elapsed());
    assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
    assert!(!dir.exists());
}

#[test]
#[should_panic(expected = "run scripts/setup.sh (installs Debian's mariadb-server and sysbench)")]
fn a_missing_server_binary_fails_with_the_setup_hint() {
    common::required_binary("mariadbd-that-does-not-exist");
}

#[test]
fn innopilot_binary_is_built() {
    assert!(common::innopilot_bin().is_file());
}

#[test]
fn restart_waits_while_something_else_holds_its_port() {
    let mut db = MariaDb::new();
    let port = db.port();
    db.stop();
    let squatter = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    let release = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(1500));
        drop(squatter);
    });
    let t = Instant::now();
    db.start();
    release.join().unwrap();
    assert!(
        t.elapsed() >= Duration::from_millis(1400),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(db.port(), port);
    assert!(
        db.error_log().contains("Address already in use"),
        "{}",
        db.error_log_tail(20)
    );
}
