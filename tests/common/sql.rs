//! SQL with timeouts: every query and connection attempt the harness makes is bounded
//! by [`QUERY_TIMEOUT`] (or a caller's limit), on an existing connection or on a new
//! root connection to a [`MariaDb`]; and [`eventually`], the bounded poll the tests wait
//! with.

use std::fmt::Write as _;
use std::future::Future;
use std::time::Duration;

use sqlx::mysql::{MySqlConnectOptions, MySqlConnection};
use sqlx::{ConnectOptions, Connection, Executor, Row};

use super::MariaDb;

/// Upper bound for any single query or connection attempt made by the harness.
pub const QUERY_TIMEOUT: Duration = Duration::from_secs(30);

/// An error from a harness query: SQL error or timeout.
#[derive(Debug)]
pub enum HarnessError {
    Sql(sqlx::Error),
    Timeout(&'static str, Duration),
}

impl std::fmt::Display for HarnessError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HarnessError::Sql(e) => write!(f, "{e}"),
            HarnessError::Timeout(what, d) => write!(f, "{what} timed out after {d:?}"),
        }
    }
}

impl std::error::Error for HarnessError {}

impl HarnessError {
    /// The server's SQLSTATE (e.g. `42000`), if it is an SQL error.
    pub fn sqlstate(&self) -> Option<String> {
        match self {
            HarnessError::Sql(sqlx::Error::Database(db)) => db.code().map(|c| c.into_owned()),
            _ => None,
        }
    }

    /// The server's error number (e.g. 1227 `ER_SPECIFIC_ACCESS_DENIED_ERROR`), if it
    /// is an SQL error.
    pub fn errno(&self) -> Option<u16> {
        match self {
            HarnessError::Sql(sqlx::Error::Database(db)) => db
                .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
                .map(|e| e.number()),
            _ => None,
        }
    }
}

/// Awaits `fut` for at most [`QUERY_TIMEOUT`].
pub async fn bounded<T>(
    what: &'static str,
    fut: impl Future<Output = Result<T, sqlx::Error>>,
) -> Result<T, HarnessError> {
    bounded_for(what, QUERY_TIMEOUT, fut).await
}

pub async fn bounded_for<T>(
    what: &'static str,
    limit: Duration,
    fut: impl Future<Output = Result<T, sqlx::Error>>,
) -> Result<T, HarnessError> {
    match tokio::time::timeout(limit, fut).await {
        Ok(r) => r.map_err(HarnessError::Sql),
        Err(_) => Err(HarnessError::Timeout(what, limit)),
    }
}

/// Runs `sql` (one or more statements) on `conn`; returns the rows affected.
pub async fn exec_on(conn: &mut MySqlConnection, sql: &str) -> Result<u64, HarnessError> {
    bounded("exec", conn.execute(sqlx::raw_sql(sql)))
        .await
        .map(|r| r.rows_affected())
}

/// First column of the first row as text; text protocol, so any column type decodes.
pub async fn scalar_string_on(
    conn: &mut MySqlConnection,
    sql: &str,
) -> Result<Option<String>, HarnessError> {
    // Not `RawSql::fetch_optional`: in sqlx 0.8.6 it is `fetch_one` (errors on no rows).
    let row = bounded("query", conn.fetch_optional(sqlx::raw_sql(sql))).await?;
    match row {
        None => Ok(None),
        Some(row) => row
            .try_get_unchecked::<Option<String>, _>(0)
            .map_err(HarnessError::Sql),
    }
}

/// All rows, every column as text.
pub async fn rows_on(
    conn: &mut MySqlConnection,
    sql: &str,
) -> Result<Vec<Vec<Option<String>>>, HarnessError> {
    let rows = bounded("query", conn.fetch_all(sqlx::raw_sql(sql))).await?;
    rows.iter()
        .map(|row| {
            (0..row.len())
                .map(|i| {
                    row.try_get_unchecked::<Option<String>, _>(i)
                        .map_err(HarnessError::Sql)
                })
                .collect()
        })
        .collect()
}

/// Polls `check` every `interval` until it returns `Some`, or panics with `what` after
/// `limit`. Each call of `check` should itself be bounded (the harness's helpers are).
pub async fn eventually<T, F, Fut>(
    what: &str,
    limit: Duration,
    interval: Duration,
    mut check: F,
) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!("timed out after {limit:?} waiting for: {what}");
        }
        tokio::time::sleep(interval).await;
    }
}

fn sql_escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('\'', "''")
}

impl MariaDb {
    /// A new connection as root over TCP. Panics on failure or after [`QUERY_TIMEOUT`].
    pub async fn connect(&self) -> MySqlConnection {
        let opts = self.connect_options();
        bounded("connect", opts.connect())
            .await
            .unwrap_or_else(|e| panic!("connecting to {}: {e}", self.dsn()))
    }

    /// A new connection as root over the unix socket.
    pub async fn connect_socket(&self) -> MySqlConnection {
        let opts = MySqlConnectOptions::new()
            .socket(self.socket_path())
            .username("root");
        bounded("connect (socket)", opts.connect())
            .await
            .unwrap_or_else(|e| panic!("connecting to {}: {e}", self.socket_path().display()))
    }

    /// Runs `sql` (one or more statements, text protocol) on a new root connection.
    /// Returns the rows affected.
    pub async fn try_exec(&self, sql: &str) -> Result<u64, HarnessError> {
        let mut conn = bounded("connect", self.connect_options().connect()).await?;
        let r = exec_on(&mut conn, sql).await;
        let _ = bounded("close", conn.close()).await;
        r
    }

    /// Like [`Self::try_exec`] but panics on error.
    pub async fn exec(&self, sql: &str) -> u64 {
        self.try_exec(sql)
            .await
            .unwrap_or_else(|e| panic!("exec `{sql}` failed: {e}"))
    }

    /// First column of the first row as text (any column type); `None` when there is no
    /// row or the value is NULL. Panics on error.
    pub async fn query_scalar_string(&self, sql: &str) -> Option<String> {
        let mut conn = self.connect().await;
        let r = scalar_string_on(&mut conn, sql)
            .await
            .unwrap_or_else(|e| panic!("query `{sql}` failed: {e}"));
        let _ = bounded("close", conn.close()).await;
        r
    }

    /// All rows, every column as text (NULL as `None`). Panics on error.
    pub async fn query_rows(&self, sql: &str) -> Vec<Vec<Option<String>>> {
        let mut conn = self.connect().await;
        let r = rows_on(&mut conn, sql)
            .await
            .unwrap_or_else(|e| panic!("query `{sql}` failed: {e}"));
        let _ = bounded("close", conn.close()).await;
        r
    }

    /// `SHOW GLOBAL STATUS LIKE name`, parsed as an integer. Panics if missing.
    pub async fn status_u64(&self, name: &str) -> u64 {
        let sql = format!("SHOW GLOBAL STATUS LIKE '{}'", sql_escape(name));
        let rows = self.query_rows(&sql).await;
        let v = rows
            .first()
            .and_then(|r| r.get(1).cloned().flatten())
            .unwrap_or_else(|| panic!("status variable {name} not found"));
        v.parse()
            .unwrap_or_else(|e| panic!("status variable {name}={v:?} is not an integer: {e}"))
    }

    /// `@@GLOBAL.name` as text.
    pub async fn global_variable(&self, name: &str) -> Option<String> {
        assert!(
            name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "bad variable name {name:?}"
        );
        self.query_scalar_string(&format!("SELECT @@GLOBAL.{name}"))
            .await
    }

    /// `Innodb_history_list_length`.
    pub async fn history_list_length(&self) -> u64 {
        self.status_u64("Innodb_history_list_length").await
    }

    /// Creates `name`@`127.0.0.1` (what a TCP login matches under --skip-name-resolve)
    /// with `password` and runs `GRANT <g> TO` it for each entry of `grants`, e.g.
    /// `["PROCESS ON *.*", "SELECT ON test.*"]`. Returns the account's DSN.
    pub async fn create_user(&self, name: &str, password: &str, grants: &[&str]) -> String {
        let account = format!("'{}'@'127.0.0.1'", sql_escape(name));
        let mut sql = format!(
            "CREATE USER {account} IDENTIFIED BY '{}';\n",
            sql_escape(password)
        );
        for g in grants {
            let _ = writeln!(sql, "GRANT {g} TO {account};");
        }
        self.exec(&sql).await;
        self.user_dsn(name, password)
    }
}
