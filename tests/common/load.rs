//! The update load: `test.t` filled with numbered rows, and tokio tasks running
//! autocommit `UPDATE`s on random ids, counting successes and errors and reconnecting
//! when the server goes away.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sqlx::mysql::{MySqlConnectOptions, MySqlConnection};
use sqlx::{ConnectOptions, Connection, Executor, Row};

use super::sql::{bounded, bounded_for, eventually, exec_on};
use super::template::{stable_hash, unique_suffix};
use super::MariaDb;

impl MariaDb {
    /// (Re)creates `test.t(id INT PRIMARY KEY, k INT, pad CHAR(60))` with ids `1..=rows`
    /// and `k = 0`, so `SUM(k)` counts the updates made by [`Self::spawn_update_load`].
    pub async fn prepare_table(&self, rows: u64) {
        let mut conn = self.connect().await;
        let ddl = "CREATE DATABASE IF NOT EXISTS test;
DROP TABLE IF EXISTS test.t;
CREATE TABLE test.t (id INT PRIMARY KEY, k INT, pad CHAR(60)) ENGINE=InnoDB;";
        exec_on(&mut conn, ddl)
            .await
            .unwrap_or_else(|e| panic!("creating test.t: {e}"));
        const CHUNK: u64 = 50_000;
        let mut first = 1;
        while first <= rows {
            let last = (first + CHUNK - 1).min(rows);
            // seq_<a>_to_<b> is MariaDB's built-in SEQUENCE engine.
            let sql = format!(
                "INSERT INTO test.t (id, k, pad) \
                 SELECT seq, 0, RPAD(CONCAT('row-', seq, '-'), 60, 'x') FROM test.seq_{first}_to_{last}"
            );
            exec_on(&mut conn, &sql)
                .await
                .unwrap_or_else(|e| panic!("filling test.t: {e}"));
            first = last + 1;
        }
        let _ = bounded("close", conn.close()).await;
        self.table_rows.store(rows, Ordering::Relaxed);
    }

    /// Starts `connections` tokio tasks running `UPDATE test.t SET k=k+1 WHERE id=?`
    /// on random ids (autocommit) until the handle is stopped or dropped. Needs a tokio
    /// runtime and `test.t` (see [`Self::prepare_table`]). Errors (e.g. while the
    /// server is restarted) are counted and the task reconnects.
    pub fn spawn_update_load(&self, connections: usize) -> LoadHandle {
        assert!(
            connections > 0,
            "spawn_update_load needs at least one connection"
        );
        let shared = Arc::new(LoadShared::default());
        let started = Instant::now();
        let known_rows = self.table_rows.load(Ordering::Relaxed);
        let tasks = (0..connections)
            .map(|i| {
                let opts = self.connect_options();
                let shared = shared.clone();
                let seed = stable_hash(&[&unique_suffix(), &i.to_string()]) | 1;
                tokio::spawn(update_worker(opts, shared, seed, known_rows))
            })
            .collect();
        LoadHandle {
            shared,
            tasks,
            started,
        }
    }
}

#[derive(Default)]
struct LoadShared {
    stop: AtomicBool,
    updates: AtomicU64,
    errors: AtomicU64,
    last_error: Mutex<Option<String>>,
}

impl LoadShared {
    fn error(&self, e: impl std::fmt::Display) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        *self.last_error.lock().unwrap_or_else(|e| e.into_inner()) = Some(e.to_string());
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

/// Per-query bound inside the load: short, so a stop request is honoured quickly.
const LOAD_QUERY_TIMEOUT: Duration = Duration::from_secs(10);

async fn update_worker(
    opts: MySqlConnectOptions,
    shared: Arc<LoadShared>,
    mut rng: u64,
    known_rows: u64,
) {
    let mut conn: Option<MySqlConnection> = None;
    let mut max_id = known_rows;
    while !shared.stopped() {
        let c = match conn.as_mut() {
            Some(c) => c,
            None => match bounded_for("connect", LOAD_QUERY_TIMEOUT, opts.connect()).await {
                Ok(c) => conn.insert(c),
                Err(e) => {
                    shared.error(e);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        if max_id == 0 {
            match bounded_for(
                "SELECT MAX(id)",
                LOAD_QUERY_TIMEOUT,
                c.fetch_one(sqlx::raw_sql("SELECT MAX(id) FROM test.t")),
            )
            .await
            .map(|row| row.try_get_unchecked::<Option<String>, _>(0))
            {
                Ok(Ok(Some(v))) => max_id = v.parse().unwrap_or(0),
                Ok(Ok(None)) => {
                    shared.error("test.t is empty");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Ok(Err(e)) => shared.error(e),
                Err(e) => {
                    shared.error(e);
                    conn = None;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
            continue;
        }
        // xorshift64
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let id = 1 + rng % max_id;
        let r = bounded_for(
            "UPDATE",
            LOAD_QUERY_TIMEOUT,
            c.execute(sqlx::query("UPDATE test.t SET k=k+1 WHERE id=?").bind(id)),
        )
        .await;
        match r {
            Ok(_) => {
                shared.updates.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                shared.error(e);
                conn = None;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    if let Some(c) = conn {
        let _ = tokio::time::timeout(Duration::from_secs(2), c.close()).await;
    }
}

/// Counters of a finished load.
#[derive(Clone, Debug)]
pub struct LoadStats {
    pub updates: u64,
    pub errors: u64,
    pub last_error: Option<String>,
    pub elapsed: Duration,
}

/// A running update load (see [`MariaDb::spawn_update_load`]). Dropping it stops the
/// tasks (aborting queries in flight); [`LoadHandle::stop`] waits for them.
pub struct LoadHandle {
    shared: Arc<LoadShared>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    started: Instant,
}

impl LoadHandle {
    /// Successful updates so far.
    pub fn updates(&self) -> u64 {
        self.shared.updates.load(Ordering::Relaxed)
    }

    /// Failed statements or connection attempts so far.
    pub fn errors(&self) -> u64 {
        self.shared.errors.load(Ordering::Relaxed)
    }

    pub fn last_error(&self) -> Option<String> {
        self.shared
            .last_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Waits until at least `n` more updates succeeded, at most `limit`.
    pub async fn wait_for_updates(&self, n: u64, limit: Duration) {
        let target = self.updates() + n;
        eventually(
            &format!(
                "{n} more updates from the load (errors: {}, last: {:?})",
                self.errors(),
                self.last_error()
            ),
            limit,
            Duration::from_millis(50),
            || async { (self.updates() >= target).then_some(()) },
        )
        .await;
    }

    /// Stops the tasks and waits for them (each at most a few seconds).
    pub async fn stop(mut self) -> LoadStats {
        self.shared.stop.store(true, Ordering::Relaxed);
        for t in std::mem::take(&mut self.tasks) {
            let abort = t.abort_handle();
            if tokio::time::timeout(LOAD_QUERY_TIMEOUT + Duration::from_secs(5), t)
                .await
                .is_err()
            {
                abort.abort();
            }
        }
        LoadStats {
            updates: self.updates(),
            errors: self.errors(),
            last_error: self.last_error(),
            elapsed: self.started.elapsed(),
        }
    }
}

impl Drop for LoadHandle {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// A new server with `test.t` (20 000 rows) under an update load on four connections:
/// enough for redo fill and history to move within seconds.
pub async fn loaded_server() -> (MariaDb, LoadHandle) {
    let db = MariaDb::new();
    db.prepare_table(20_000).await;
    let load = db.spawn_update_load(4);
    (db, load)
}
