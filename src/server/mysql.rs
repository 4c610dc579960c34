//! The live [`Server`]: one sqlx connection to MariaDB or MySQL.
//!
//! Why one connection and not a pool: a query that times out leaves its connection in
//! an unknown state mid-protocol. Such a connection is dropped (closing the socket)
//! rather than returned to a pool, and the next call reconnects under
//! `connect_timeout`. So there is never more than one sampling connection, nothing can
//! exhaust, and no call waits longer than its timeout. Redo resizes, which block their
//! session, get a short-lived connection of their own.
//!
//! Every statement is `raw_sql` (the text protocol: SHOW and SET are not all
//! preparable), built only from innopilot's own constants, the [`Knob`] allowlist and
//! typed integers. Values are read as bytes and parsed by `sample::parse_u64`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use sqlx::mysql::{MySqlConnectOptions, MySqlConnection, MySqlRow, MySqlSslMode};
use sqlx::{ConnectOptions, Connection, Row};

use super::dsn::{ConnectTarget, SslMode};
use super::flavor::{
    build_knob_caps, replica_statement, signal_sources, Flavor, ReplicaSource, ServerIdentity,
    UndoSource, VariableMeta, Version,
};
use super::sample::{
    build_sample, holds_read_view, parse_u64, MetricRows, RowKind, Sample, TrxInfo,
    EXTRA_VARIABLE_NAMES, METRIC_NAMES, PURGE_METRIC_NAMES, STATUS_NAMES,
};
use super::{
    Capabilities, Globals, HistoryWait, Knob, KnobValues, PendingSet, Server, ServerError,
    SessionInfo,
};

/// How to talk to the server.
#[derive(Debug, Clone)]
pub struct LiveOptions {
    pub connect_timeout: Duration,
    /// Bound on every query (client side, and server side where the flavor allows).
    pub query_timeout: Duration,
    /// Bound on a redo resize (`SET GLOBAL innodb_log_file_size`), which blocks.
    pub resize_timeout: Duration,
    /// Where the server's datadir is visible locally, to read undo file sizes
    /// (MariaDB). `None`: use `@@datadir` if it exists on this host.
    pub datadir: Option<PathBuf>,
}

impl Default for LiveOptions {
    fn default() -> Self {
        LiveOptions {
            connect_timeout: Duration::from_secs(5),
            query_timeout: Duration::from_secs(2),
            resize_timeout: Duration::from_secs(120),
            datadir: None,
        }
    }
}

/// A live MariaDB or MySQL server.
pub struct LiveServer {
    target: ConnectTarget,
    opts: LiveOptions,
    conn: Option<MySqlConnection>,
    caps: Option<Capabilities>,
    sample_sql: String,
    knob_sql: String,
    epoch: Instant,
    /// What the server is, from the last probe (see [`Server::instance`]).
    instance: Option<String>,
    /// The session that last took the server's claim ([`Server::claim`]).
    claim_session: Option<u64>,
}

fn quoted_list<'a>(names: impl IntoIterator<Item = &'a str>) -> String {
    // Only innopilot's own constant names reach here; they contain no quotes.
    names
        .into_iter()
        .map(|n| {
            debug_assert!(n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'));
            format!("'{n}'")
        })
        .collect::<Vec<_>>()
        .join(",")
}

fn knob_names() -> String {
    quoted_list(
        Knob::ALL
            .iter()
            .map(|k| k.var_name())
            .chain(EXTRA_VARIABLE_NAMES.iter().copied()),
    )
}

/// The one union query of a sample: status, variables, the purge counters of InnoDB
/// metrics while they are enabled, and on MySQL the other InnoDB metrics and undo
/// tablespace sizes. Column 1 says which kind each row is.
///
/// A metric is enabled exactly while it has a start time and no stop time
/// (`TIME_ENABLED`/`TIME_DISABLED`, i_s.cc, both servers): MariaDB ≥ 10.5 names its
/// flag column `ENABLED` and MySQL `STATUS`, so the times are the one test that reads
/// alike everywhere.
pub fn sample_sql(id: &ServerIdentity) -> String {
    let status = quoted_list(STATUS_NAMES.iter().copied());
    let vars = knob_names();
    let name = match id.flavor {
        Flavor::MariaDb => "NAME",
        Flavor::MySql => "CONVERT(NAME USING utf8mb4)",
    };
    let purge = format!(
        " UNION ALL SELECT 'M', {name}, CAST(`COUNT` AS CHAR) FROM information_schema.INNODB_METRICS \
         WHERE NAME IN ({}) AND TIME_ENABLED IS NOT NULL AND TIME_DISABLED IS NULL",
        quoted_list(PURGE_METRIC_NAMES.iter().copied())
    );
    match id.flavor {
        Flavor::MariaDb => format!(
            "SELECT 'S', VARIABLE_NAME, VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME IN ({status}) \
             UNION ALL SELECT 'V', VARIABLE_NAME, VARIABLE_VALUE FROM information_schema.GLOBAL_VARIABLES WHERE VARIABLE_NAME IN ({vars}){purge}"
        ),
        Flavor::MySql => {
            let metrics = quoted_list(METRIC_NAMES.iter().copied());
            let undo = if id.version >= Version::new(8, 0, 0) {
                " UNION ALL SELECT 'U', CONVERT(NAME USING utf8mb4), CAST(FILE_SIZE AS CHAR) FROM information_schema.INNODB_TABLESPACES WHERE SPACE_TYPE = 'Undo'"
            } else {
                ""
            };
            format!(
                "SELECT 'S', CONVERT(VARIABLE_NAME USING utf8mb4), CONVERT(VARIABLE_VALUE USING utf8mb4) FROM performance_schema.global_status WHERE VARIABLE_NAME IN ({status}) \
                 UNION ALL SELECT 'V', CONVERT(VARIABLE_NAME USING utf8mb4), CONVERT(VARIABLE_VALUE USING utf8mb4) FROM performance_schema.global_variables WHERE VARIABLE_NAME IN ({vars}) \
                 UNION ALL SELECT 'M', CONVERT(NAME USING utf8mb4), CAST(`COUNT` AS CHAR) FROM information_schema.INNODB_METRICS WHERE NAME IN ({metrics}){purge}{undo}"
            )
        }
    }
}

fn knobs_sql(id: &ServerIdentity) -> String {
    let vars = knob_names();
    match id.flavor {
        Flavor::MariaDb => format!("SELECT 'V', VARIABLE_NAME, VARIABLE_VALUE FROM information_schema.GLOBAL_VARIABLES WHERE VARIABLE_NAME IN ({vars})"),
        Flavor::MySql => format!("SELECT 'V', CONVERT(VARIABLE_NAME USING utf8mb4), CONVERT(VARIABLE_VALUE USING utf8mb4) FROM performance_schema.global_variables WHERE VARIABLE_NAME IN ({vars})"),
    }
}

/// The oldest active transaction and the number of active ones. Values are cast to
/// text so both flavors decode alike.
const OLDEST_TRX_SQL: &str = "SELECT CAST(t.trx_id AS CHAR), CAST(t.trx_mysql_thread_id AS CHAR), \
     CAST(GREATEST(TIMESTAMPDIFF(SECOND, t.trx_started, NOW()), 0) AS CHAR), t.trx_state, t.trx_isolation_level, \
     p.USER, p.HOST, p.COMMAND, (SELECT CAST(COUNT(*) AS CHAR) FROM information_schema.INNODB_TRX) \
     FROM information_schema.INNODB_TRX t LEFT JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id \
     ORDER BY t.trx_started ASC LIMIT 1";

fn col(row: &MySqlRow, i: usize) -> Option<String> {
    // Bytes, then lossy UTF-8: a value's declared type (VARCHAR, BLOB, utf8mb3) must
    // never make decoding fail.
    row.try_get_unchecked::<Option<Vec<u8>>, usize>(i)
        .ok()
        .flatten()
        .map(|b| String::from_utf8_lossy(&b).into_owned())
}

/// A knob's metadata row: name, value, then (MariaDB's SYSTEM_VARIABLES only) whether
/// it is read-only, then its range where the server gives one.
fn variable_meta(r: &MySqlRow, has_read_only: bool) -> Option<VariableMeta> {
    let range = if has_read_only { 3 } else { 2 };
    Some(VariableMeta {
        name: col(r, 0)?,
        value: col(r, 1),
        read_only: if has_read_only {
            col(r, 2).map(|v| v.eq_ignore_ascii_case("YES"))
        } else {
            None
        },
        min: col(r, range).and_then(|v| parse_u64(&v).ok()),
        max: col(r, range + 1).and_then(|v| parse_u64(&v).ok()),
    })
}

fn col_named(row: &MySqlRow, name: &str) -> Option<String> {
    use sqlx::Column;
    let idx = row.columns().iter().position(|c| c.name() == name)?;
    col(row, idx)
}

type BoxFut<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

/// `fetch_all` through the `Executor` trait: `raw_sql(..).fetch_all(..)` held across
/// an `await` in a `Send` future trips the compiler's "Executor is not general enough".
fn fetch_all<'a>(
    conn: &'a mut MySqlConnection,
    sql: &'a str,
) -> BoxFut<'a, Result<Vec<MySqlRow>, sqlx::Error>> {
    // A `&str` with no arguments runs over the text protocol (COM_QUERY), like
    // `raw_sql`, and `Executor` methods return a concrete boxed future.
    sqlx::Executor::fetch_all(conn, sql)
}

fn execute<'a>(
    conn: &'a mut MySqlConnection,
    sql: &'a str,
) -> BoxFut<'a, Result<sqlx::mysql::MySqlQueryResult, sqlx::Error>> {
    sqlx::Executor::execute(conn, sql)
}

/// MariaDB's ER_WRONG_USAGE, which `SET GLOBAL innodb_log_file_size` returns while
/// another resize runs (`innodb_log_file_size_update()`, ha_innodb.cc).
const ER_WRONG_USAGE: u16 = 1221;

/// The server's error number, for the errors innopilot tells apart by it rather than
/// by their text (which varies by version and language).
fn error_number(e: &sqlx::Error) -> Option<u16> {
    match e {
        sqlx::Error::Database(db) => db
            .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
            .map(|m| m.number()),
        _ => None,
    }
}

/// A query's error as innopilot reports it, secrets redacted from the server's message.
fn query_error(target: &ConnectTarget, what: &'static str, e: sqlx::Error) -> ServerError {
    let message = target.redact(&e.to_string());
    match &e {
        sqlx::Error::Io(_) | sqlx::Error::Protocol(_) | sqlx::Error::PoolClosed => {
            ServerError::Lost { what, message }
        }
        sqlx::Error::Database(db) => match db.code().as_deref() {
            // 42000 with 1227/1142-style messages: privilege problems.
            Some("42000") if message.contains("denied") || message.contains("privilege") => {
                ServerError::Denied {
                    what,
                    message,
                    hint: "grant the privilege named in the message to innopilot's account",
                }
            }
            // Server gone away / lost during query.
            Some("08S01") | Some("HY000")
                if message.contains("gone away") || message.contains("Lost connection") =>
            {
                ServerError::Lost { what, message }
            }
            _ => ServerError::Query { what, message },
        },
        _ => ServerError::Query { what, message },
    }
}

/// A blocking knob's `SET GLOBAL` on its own connection (opened with the resize timeout
/// as its statement timeout, so the server stops it too), then its read-back there.
/// Owns everything it uses: [`Server::start_set`] hands it to the loop to finish.
async fn run_blocking_set(
    mut conn: MySqlConnection,
    target: ConnectTarget,
    knob: Knob,
    value: u64,
    after: Duration,
    read_timeout: Duration,
) -> Result<u64, ServerError> {
    // The name comes from the allowlist and the value is a typed integer.
    let set = format!("SET GLOBAL {} = {}", knob.var_name(), value);
    match tokio::time::timeout(after, execute(&mut conn, &set)).await {
        Err(_) => {
            return Err(ServerError::Timeout {
                what: "resizing the redo log",
                after,
            })
        }
        Ok(Err(e)) if error_number(&e) == Some(ER_WRONG_USAGE) => {
            // The one way a resize SET is "wrong usage": another resize is under way.
            return Err(ServerError::ResizeUnderWay {
                knob,
                message: target.redact(&e.to_string()),
            });
        }
        Ok(Err(e)) => return Err(query_error(&target, "resizing the redo log", e)),
        Ok(Ok(_)) => {}
    }
    let get = format!("SELECT CAST(@@GLOBAL.{} AS CHAR)", knob.var_name());
    let rows = match tokio::time::timeout(read_timeout, fetch_all(&mut conn, &get)).await {
        Err(_) => {
            return Err(ServerError::Timeout {
                what: "reading back a SET GLOBAL",
                after: read_timeout,
            })
        }
        Ok(Err(e)) => return Err(query_error(&target, "reading back a SET GLOBAL", e)),
        Ok(Ok(rows)) => rows,
    };
    let _ = tokio::time::timeout(
        Duration::from_secs(1),
        Box::pin(conn.close()) as BoxFut<'_, _>,
    )
    .await;
    let raw = rows.first().and_then(|r| col(r, 0)).unwrap_or_default();
    parse_u64(&raw).map_err(|e| ServerError::Unexpected {
        what: "reading back a SET GLOBAL",
        detail: format!("{knob}: {e}"),
    })
}

impl LiveServer {
    /// Creates the server handle; nothing is sent until the first call.
    pub fn new(target: ConnectTarget, opts: LiveOptions) -> Self {
        LiveServer {
            target,
            opts,
            conn: None,
            caps: None,
            sample_sql: String::new(),
            knob_sql: String::new(),
            epoch: Instant::now(),
            instance: None,
            claim_session: None,
        }
    }

    pub fn target(&self) -> &ConnectTarget {
        &self.target
    }

    /// The capability table from the last probe.
    pub fn capabilities(&self) -> Option<&Capabilities> {
        self.caps.as_ref()
    }

    fn connect_options(&self) -> MySqlConnectOptions {
        let t = &self.target;
        let mut o = MySqlConnectOptions::new()
            .host(&t.host)
            .port(t.port)
            .username(&t.user)
            .ssl_mode(match t.tls.effective_mode() {
                SslMode::Disabled => MySqlSslMode::Disabled,
                SslMode::Preferred => MySqlSslMode::Preferred,
                SslMode::Required => MySqlSslMode::Required,
                SslMode::VerifyCa => MySqlSslMode::VerifyCa,
                SslMode::VerifyIdentity => MySqlSslMode::VerifyIdentity,
            })
            // innopilot reads global state only: leave the session's sql_mode alone.
            .pipes_as_concat(false)
            .no_engine_substitution(false)
            .timezone(None)
            .statement_cache_capacity(0)
            // `drain` waits server-side on purpose (innodb_max_purge_lag_wait) and
            // `SHOW ENGINE INNODB STATUS` can be slow: sqlx's "slow statement" warning
            // would be noise on a command's standard error. Query timeouts bound them.
            .log_slow_statements(log::LevelFilter::Off, Duration::from_secs(1));
        if let Some(pw) = t.password() {
            o = o.password(pw);
        }
        if let Some(s) = &t.socket {
            o = o.socket(s);
        }
        if let Some(ca) = &t.tls.ca {
            o = o.ssl_ca(ca);
        }
        if let Some(cert) = &t.tls.cert {
            o = o.ssl_client_cert(cert);
        }
        if let Some(key) = &t.tls.key {
            o = o.ssl_client_key(key);
        }
        o
    }

    fn connect_error(&self, e: &sqlx::Error) -> ServerError {
        let message = self.target.redact(&e.to_string());
        let hint = match e {
            sqlx::Error::Database(db) if db.code().as_deref() == Some("28000") => {
                "Check the user and password (--dsn, INNOPILOT_PASSWORD, server.password_file) and that the account may connect from this host"
            }
            sqlx::Error::Database(_) => "The server refused the connection",
            sqlx::Error::Io(_) => {
                "Is the server running and listening there? Check host, port or socket in the DSN"
            }
            sqlx::Error::Tls(_) => "TLS failed: check ssl-mode in the DSN",
            _ => "Check the DSN and that the server is reachable",
        };
        ServerError::Connect {
            target: self.target.to_string(),
            message,
            hint,
        }
    }

    fn query_error(&self, what: &'static str, e: sqlx::Error) -> ServerError {
        query_error(&self.target, what, e)
    }

    /// Whether `knob` may be set on this server, from the capability table.
    fn check_settable(&self, knob: Knob) -> Result<(), ServerError> {
        match self.caps()?.knob(knob) {
            Some(c) if c.settable() => Ok(()),
            Some(c) => Err(ServerError::NotSettable {
                knob,
                why: c.note.clone(),
            }),
            None => Err(ServerError::NotSettable {
                knob,
                why: "not in the capability table".into(),
            }),
        }
    }

    /// `SET GLOBAL` of a knob that returns at once, on the sampling connection, and its
    /// read-back.
    async fn set_plain(&mut self, knob: Knob, value: u64) -> Result<u64, ServerError> {
        self.check_settable(knob)?;
        // The name comes from the allowlist and the value is a typed integer: nothing
        // a user or the server supplied is ever spliced into SQL.
        let set = format!("SET GLOBAL {} = {}", knob.var_name(), value);
        self.fetch("SET GLOBAL", &set).await?;
        let get = format!("SELECT CAST(@@GLOBAL.{} AS CHAR)", knob.var_name());
        let rows = self.fetch("reading back a SET GLOBAL", &get).await?;
        let raw = rows.first().and_then(|r| col(r, 0)).unwrap_or_default();
        parse_u64(&raw).map_err(|e| ServerError::Unexpected {
            what: "reading back a SET GLOBAL",
            detail: format!("{knob}: {e}"),
        })
    }

    /// Opens the blocking knob's own connection and returns its SET, not yet run.
    async fn start_blocking(&mut self, knob: Knob, value: u64) -> Result<PendingSet, ServerError> {
        self.check_settable(knob)?;
        let after = self.opts.resize_timeout;
        let mut conn = self.open_connection(after).await?;
        // Its session, so that it can be stopped (`KILL QUERY`) if innopilot stops
        // first. A server-supplied integer, parsed as one.
        let session_id = match tokio::time::timeout(
            self.opts.query_timeout,
            fetch_all(&mut conn, "SELECT CONNECTION_ID()"),
        )
        .await
        {
            Ok(Ok(rows)) => rows
                .first()
                .and_then(|r| col(r, 0))
                .and_then(|v| parse_u64(&v).ok()),
            _ => None,
        };
        Ok(PendingSet {
            session_id,
            set: Box::pin(run_blocking_set(
                conn,
                self.target.clone(),
                knob,
                value,
                after,
                self.opts.query_timeout,
            )),
        })
    }

    async fn connection(&mut self) -> Result<MySqlConnection, ServerError> {
        if let Some(c) = self.conn.take() {
            return Ok(c);
        }
        self.open_connection(self.opts.query_timeout).await
    }

    /// Opens a fresh connection whose statements the server itself stops after
    /// `statement_timeout` (MariaDB max_statement_time; MySQL max_execution_time,
    /// SELECT only), in addition to innopilot's client-side timeout.
    async fn open_connection(
        &self,
        statement_timeout: Duration,
    ) -> Result<MySqlConnection, ServerError> {
        let opts = self.connect_options();
        let mut conn =
            match tokio::time::timeout(self.opts.connect_timeout, Box::pin(MySqlConnection::connect_with(&opts)) as BoxFut<'_, _>)
                .await
            {
                Err(_) => {
                    return Err(ServerError::Connect {
                        target: self.target.to_string(),
                        message: format!(
                            "no answer within {}",
                            humantime::format_duration(self.opts.connect_timeout)
                        ),
                        hint: "Is the host reachable and the port right? (server.connect_timeout sets the wait)",
                    })
                }
                Ok(Err(e)) => return Err(self.connect_error(&e)),
                Ok(Ok(c)) => c,
            };
        // Best effort: the variable differs by flavor and version; an unknown variable
        // is not an error worth failing the connection for.
        let secs = statement_timeout.as_secs_f64().max(0.001);
        for sql in [
            format!("SET SESSION max_statement_time = {secs:.3}"),
            format!(
                "SET SESSION max_execution_time = {}",
                (secs * 1000.0).round() as u64
            ),
        ] {
            let _ = tokio::time::timeout(self.opts.query_timeout, execute(&mut conn, &sql)).await;
        }
        Ok(conn)
    }

    /// Runs one statement under the query timeout. On timeout or a lost connection
    /// the connection is discarded, so the next call starts clean.
    async fn fetch(&mut self, what: &'static str, sql: &str) -> Result<Vec<MySqlRow>, ServerError> {
        let mut conn = self.connection().await?;
        let after = self.opts.query_timeout;
        match tokio::time::timeout(after, fetch_all(&mut conn, sql)).await {
            Err(_) => Err(ServerError::Timeout { what, after }),
            Ok(Err(e)) => {
                let err = self.query_error(what, e);
                if !err.is_connection_lost() {
                    self.conn = Some(conn);
                }
                Err(err)
            }
            Ok(Ok(rows)) => {
                self.conn = Some(conn);
                Ok(rows)
            }
        }
    }

    fn caps(&self) -> Result<&Capabilities, ServerError> {
        self.caps.as_ref().ok_or(ServerError::Unexpected {
            what: "sampling",
            detail: "the server was not probed first (a bug in innopilot)".into(),
        })
    }

    async fn read_knob_meta(
        &mut self,
        id: &ServerIdentity,
    ) -> Result<Vec<VariableMeta>, ServerError> {
        let names = quoted_list(Knob::ALL.iter().map(|k| k.var_name()));
        match id.flavor {
            Flavor::MariaDb => {
                let sql = format!(
                    "SELECT VARIABLE_NAME, GLOBAL_VALUE, READ_ONLY, CAST(NUMERIC_MIN_VALUE AS CHAR), CAST(NUMERIC_MAX_VALUE AS CHAR) \
                     FROM information_schema.SYSTEM_VARIABLES WHERE VARIABLE_NAME IN ({names})"
                );
                let rows = self
                    .fetch(
                        "reading knob metadata (information_schema.SYSTEM_VARIABLES)",
                        &sql,
                    )
                    .await?;
                Ok(rows.iter().filter_map(|r| variable_meta(r, true)).collect())
            }
            Flavor::MySql => {
                let with_range = format!(
                    "SELECT CONVERT(v.VARIABLE_NAME USING utf8mb4), CONVERT(v.VARIABLE_VALUE USING utf8mb4), CAST(i.MIN_VALUE AS CHAR), CAST(i.MAX_VALUE AS CHAR) \
                     FROM performance_schema.global_variables v LEFT JOIN performance_schema.variables_info i ON i.VARIABLE_NAME = v.VARIABLE_NAME \
                     WHERE v.VARIABLE_NAME IN ({names})"
                );
                let rows = match self
                    .fetch("reading knob metadata (performance_schema)", &with_range)
                    .await
                {
                    Ok(rows) => rows,
                    Err(e) if e.is_connection_lost() => return Err(e),
                    // MySQL 5.7 has no variables_info: values without ranges.
                    Err(_) => {
                        let sql = format!("SHOW GLOBAL VARIABLES WHERE Variable_name IN ({names})");
                        self.fetch("reading knob metadata (SHOW GLOBAL VARIABLES)", &sql)
                            .await?
                    }
                };
                Ok(rows
                    .iter()
                    .filter_map(|r| variable_meta(r, false))
                    .collect())
            }
        }
    }

    fn local_undo_files(
        &self,
        datadir: Option<&str>,
        undo_dir: Option<&str>,
        undo_spaces: u64,
    ) -> UndoSource {
        let base = match self
            .opts
            .datadir
            .clone()
            .or_else(|| datadir.map(PathBuf::from))
        {
            Some(b) if b.is_dir() => b,
            _ => return UndoSource::Unknown,
        };
        let dir = match undo_dir {
            Some(d) if !d.is_empty() && d != "./" && d != "." => {
                let p = PathBuf::from(d);
                if p.is_absolute() {
                    p
                } else {
                    base.join(p)
                }
            }
            _ => base.clone(),
        };
        let paths: Vec<PathBuf> = if undo_spaces == 0 {
            vec![base.join("ibdata1")]
        } else {
            (1..=undo_spaces)
                .map(|i| dir.join(format!("undo{i:03}")))
                .collect()
        };
        if paths.iter().all(|p| p.is_file()) {
            UndoSource::LocalFiles { paths }
        } else {
            UndoSource::Unknown
        }
    }

    fn stat_undo(&self, caps: &Capabilities) -> Option<u64> {
        match &caps.signals.undo {
            UndoSource::LocalFiles { paths } => {
                let mut total = 0u64;
                for p in paths {
                    total = total.saturating_add(std::fs::metadata(p).ok()?.len());
                }
                Some(total)
            }
            _ => None,
        }
    }

    async fn read_oldest_trx(&mut self) -> Result<Option<TrxInfo>, ServerError> {
        let rows = self
            .fetch(
                "reading the oldest transaction (information_schema.INNODB_TRX)",
                OLDEST_TRX_SQL,
            )
            .await?;
        Ok(rows.first().map(|r| {
            let isolation = col(r, 4);
            let command = col(r, 7);
            TrxInfo {
                trx_id: col(r, 0).unwrap_or_default(),
                thread_id: col(r, 1)
                    .and_then(|v| parse_u64(&v).ok())
                    .filter(|t| *t > 0),
                age_s: col(r, 2).and_then(|v| parse_u64(&v).ok()).unwrap_or(0),
                state: col(r, 3),
                holds_read_view: holds_read_view(isolation.as_deref(), command.as_deref()),
                isolation,
                user: col(r, 5),
                host: col(r, 6),
                command,
                active_count: col(r, 8).and_then(|v| parse_u64(&v).ok()),
            }
        }))
    }
}

impl Server for LiveServer {
    async fn probe(&mut self) -> Result<Capabilities, ServerError> {
        let rows = self
            .fetch(
                "identifying the server",
                "SELECT @@version, @@version_comment, CURRENT_USER(), @@datadir, @@innodb_undo_directory, CAST(@@innodb_undo_tablespaces AS CHAR), \
                 CAST(@@server_id AS CHAR), @@hostname, CAST(@@port AS CHAR)",
            )
            .await?;
        let r = rows.first().ok_or(ServerError::Unexpected {
            what: "SELECT @@version",
            detail: "no row".into(),
        })?;
        let identity = ServerIdentity::parse(
            &col(r, 0).unwrap_or_default(),
            &col(r, 1).unwrap_or_default(),
        )?;
        let account = col(r, 2).unwrap_or_default();
        let datadir = col(r, 3);
        let undo_dir = col(r, 4);
        let undo_spaces = col(r, 5).and_then(|v| parse_u64(&v).ok()).unwrap_or(0);
        // The server by what it is, not by how the DSN reaches it: `localhost`,
        // `127.0.0.1` and a proxy in front all name the same server. MySQL has a
        // UUID for that; MariaDB has none, and its server id, host, port and data
        // directory together tell two servers apart on one machine or many.
        let instance = match identity.flavor {
            Flavor::MySql => {
                let rows = self
                    .fetch(
                        "identifying the server (@@server_uuid)",
                        "SELECT @@server_uuid",
                    )
                    .await?;
                rows.first()
                    .and_then(|r| col(r, 0))
                    .map(|u| format!("server_uuid {u}"))
            }
            Flavor::MariaDb => Some(format!(
                "server_id {}, host {}, port {}, datadir {}",
                col(r, 6).unwrap_or_default(),
                col(r, 7).unwrap_or_default(),
                col(r, 8).unwrap_or_default(),
                datadir.as_deref().unwrap_or_default()
            )),
        };

        let meta = self.read_knob_meta(&identity).await?;
        let knobs = build_knob_caps(&identity, &meta);

        let privs = self
            .fetch(
                "checking privileges (information_schema.USER_PRIVILEGES)",
                "SELECT PRIVILEGE_TYPE FROM information_schema.USER_PRIVILEGES \
                 WHERE GRANTEE = CONCAT('''', SUBSTRING_INDEX(CURRENT_USER(), '@', 1), '''@''', SUBSTRING_INDEX(CURRENT_USER(), '@', -1), '''')",
            )
            .await?;
        let mut can_set_global = privs.iter().filter_map(|r| col(r, 0)).any(|p| {
            p.eq_ignore_ascii_case("SUPER") || p.eq_ignore_ascii_case("SYSTEM_VARIABLES_ADMIN")
        });
        if !can_set_global {
            // USER_PRIVILEGES lists direct grants only: a privilege held through a
            // (default) role is not there. Ask the server itself, with a SET that
            // changes nothing: the value is read and written in one statement.
            can_set_global = match self
                .fetch(
                    "checking privileges (a no-op SET GLOBAL)",
                    "SET GLOBAL innodb_max_purge_lag = @@GLOBAL.innodb_max_purge_lag",
                )
                .await
            {
                Ok(_) => true,
                Err(e) if e.is_connection_lost() => return Err(e),
                Err(_) => false,
            };
        }

        let replica_sql = replica_statement(&identity);
        let replica = match self
            .fetch("checking replication (SHOW REPLICA STATUS)", replica_sql)
            .await
        {
            Ok(rows) if !rows.is_empty() => {
                if replica_sql.contains("REPLICA") {
                    ReplicaSource::ShowReplicaStatus
                } else {
                    ReplicaSource::ShowSlaveStatus
                }
            }
            Ok(_) => ReplicaSource::NotReplica,
            Err(e) if e.is_connection_lost() => return Err(e),
            // Refused (a missing privilege) is not "no rows": whether this server is a
            // replica is unknown, and `diagnose` says so with the grant that fixes it.
            Err(e) => {
                tracing::warn!(
                    "{e}; replica lag is unknown (GRANT {} ON *.* to innopilot's account)",
                    super::flavor::replica_status_privilege(&identity)
                );
                ReplicaSource::Unreadable
            }
        };
        let undo = match identity.flavor {
            Flavor::MySql if identity.version >= Version::new(8, 0, 0) => UndoSource::InfoSchema,
            Flavor::MySql => UndoSource::Unknown,
            Flavor::MariaDb => {
                self.local_undo_files(datadir.as_deref(), undo_dir.as_deref(), undo_spaces)
            }
        };
        let caps = Capabilities {
            signals: signal_sources(&identity, undo, replica),
            identity,
            knobs,
            can_set_global,
            account,
        };
        self.sample_sql = sample_sql(&caps.identity);
        self.knob_sql = knobs_sql(&caps.identity);
        self.caps = Some(caps.clone());
        self.instance = instance;
        Ok(caps)
    }

    async fn sample(&mut self) -> Result<Sample, ServerError> {
        let started = Instant::now();
        let caps = self.caps()?.clone();
        let sql = std::mem::take(&mut self.sample_sql);
        let result = self.fetch("sampling status and variables", &sql).await;
        self.sample_sql = sql;
        let rows = result?;
        let mut metric_rows = MetricRows::default();
        for r in &rows {
            let kind = match col(r, 0).as_deref() {
                Some("S") => RowKind::Status,
                Some("V") => RowKind::Variable,
                Some("M") => RowKind::Metric,
                Some("U") => RowKind::UndoSpace,
                _ => continue,
            };
            if let Some(name) = col(r, 1) {
                metric_rows.push(kind, &name, col(r, 2));
            }
        }
        let mut sample = build_sample(&metric_rows, &caps.signals);
        let t_ms = started.duration_since(self.epoch).as_millis() as u64;
        sample.t_ms = t_ms;
        sample.unix_ms = super::sample::unix_ms_now();
        sample.oldest_trx = self.read_oldest_trx().await?;
        sample.round_trips = 2;
        if sample.undo_bytes.is_none() {
            sample.undo_bytes = self.stat_undo(&caps);
        }
        if matches!(
            caps.signals.replica,
            ReplicaSource::ShowReplicaStatus | ReplicaSource::ShowSlaveStatus
        ) {
            sample.is_replica = true;
            let stmt = replica_statement(&caps.identity);
            let rows = self.fetch("reading replica status", stmt).await?;
            sample.round_trips += 1;
            sample.replica_lag_s = rows.first().and_then(|r| {
                col_named(r, "Seconds_Behind_Source")
                    .or_else(|| col_named(r, "Seconds_Behind_Master"))
                    .and_then(|v| parse_u64(&v).ok())
            });
        }
        sample.duration_ms = started.elapsed().as_secs_f64() * 1000.0;
        Ok(sample)
    }

    async fn read_knobs(&mut self) -> Result<KnobValues, ServerError> {
        let caps = self.caps()?.clone();
        let sql = std::mem::take(&mut self.knob_sql);
        let result = self.fetch("reading knob values", &sql).await;
        self.knob_sql = sql;
        let mut metric_rows = MetricRows::default();
        for r in &result? {
            if let Some(name) = col(r, 1) {
                metric_rows.push(RowKind::Variable, &name, col(r, 2));
            }
        }
        Ok(build_sample(&metric_rows, &caps.signals).knobs)
    }

    async fn set_knob(&mut self, knob: Knob, value: u64) -> Result<u64, ServerError> {
        if knob.is_blocking() {
            return self.start_blocking(knob, value).await?.set.await;
        }
        self.set_plain(knob, value).await
    }

    /// A blocking knob's SET runs on a connection of its own, opened here (so a refused
    /// connection is this call's error) and finished by the returned future; any other
    /// knob is set at once.
    async fn start_set(&mut self, knob: Knob, value: u64) -> Result<PendingSet, ServerError> {
        if knob.is_blocking() {
            return self.start_blocking(knob, value).await;
        }
        Ok(PendingSet::done(self.set_plain(knob, value).await))
    }

    async fn read_globals(
        &mut self,
        which: Globals,
        names: &[&'static str],
    ) -> Result<BTreeMap<String, String>, ServerError> {
        let show = match which {
            Globals::Variables => "SHOW GLOBAL VARIABLES",
            Globals::Status => "SHOW GLOBAL STATUS",
        };
        self.name_values(which.what(), show, names).await
    }

    async fn session(
        &mut self,
        thread_id: u64,
        max_chars: u32,
    ) -> Result<Option<SessionInfo>, ServerError> {
        let sql = format!(
            "SELECT COMMAND, CAST(TIME AS CHAR), STATE, LEFT(INFO, {max_chars}), USER, HOST \
             FROM information_schema.PROCESSLIST WHERE ID = {thread_id}"
        );
        let rows = self
            .fetch("reading a session (information_schema.PROCESSLIST)", &sql)
            .await?;
        Ok(rows.first().map(|r| SessionInfo {
            command: col(r, 0),
            time_s: col(r, 1).and_then(|v| parse_u64(&v).ok()),
            state: col(r, 2).filter(|s| !s.is_empty()),
            info: col(r, 3),
            user: col(r, 4),
            host: col(r, 5),
        }))
    }

    async fn resizes_under_way(&mut self) -> Result<Vec<(u64, Option<u64>)>, ServerError> {
        // Constant text: the names are innopilot's own knobs, never a user's string.
        let sql = "SELECT ID, CAST(TIME AS CHAR) FROM information_schema.PROCESSLIST \
                   WHERE COMMAND = 'Query' AND ID <> CONNECTION_ID() AND INFO LIKE 'SET%' \
                   AND (INFO LIKE '%innodb_log_file_size%' \
                        OR INFO LIKE '%innodb_redo_log_capacity%')";
        let rows = self
            .fetch(
                "looking for a redo resize under way (information_schema.PROCESSLIST)",
                sql,
            )
            .await?;
        Ok(rows
            .iter()
            .filter_map(|r| {
                let id = col(r, 0).and_then(|v| parse_u64(&v).ok())?;
                Some((id, col(r, 1).and_then(|v| parse_u64(&v).ok())))
            })
            .collect())
    }

    /// Under the query timeout: the statement has been seen to hang for minutes
    /// (seed 004).
    async fn engine_innodb_status(&mut self) -> Result<String, ServerError> {
        let rows = self
            .fetch("SHOW ENGINE INNODB STATUS", "SHOW ENGINE INNODB STATUS")
            .await?;
        Ok(rows.first().and_then(|r| col(r, 2)).unwrap_or_default())
    }

    /// MariaDB's `innodb_max_purge_lag_wait` on a session of its own (the server also
    /// nudges purge and flushing while it waits). Where the variable is missing or not
    /// allowed, the wait ends with the server's error.
    async fn wait_for_history_at_most(
        &mut self,
        target: u32,
        limit: Duration,
    ) -> Result<HistoryWait, ServerError> {
        let w = self
            .purge_lag_waiter(limit + PURGE_WAIT_SERVER_GRACE)
            .await?;
        Ok(HistoryWait {
            session_id: w.connection_id,
            done: Box::pin(w.wait(target, limit)),
        })
    }

    async fn kill_query(&mut self, session_id: u64) -> Result<(), ServerError> {
        let sql = format!("KILL QUERY {session_id}");
        self.fetch("stopping a statement of innopilot's own (KILL QUERY)", &sql)
            .await
            .map(|_| ())
    }

    fn instance(&self) -> Option<String> {
        self.instance.clone()
    }

    fn real_time(&self) -> bool {
        true
    }

    async fn claim(&mut self) -> Result<Option<String>, ServerError> {
        // A named lock on the server itself, held by the sampling connection: it
        // keeps two live runs off one server wherever they run and whatever state
        // files they use, and the server drops it with the connection, so a dead
        // innopilot never leaves it behind. GET_LOCK is re-entrant within a session.
        let mut holder = None;
        // A killed innopilot's session may take the server a moment to clean up:
        // ask a few times before naming a holder.
        for attempt in 0..5 {
            if attempt > 0 {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            let rows = self
                .fetch(
                    "claiming the server (GET_LOCK)",
                    "SELECT CAST(GET_LOCK('innopilot', 0) AS CHAR), CAST(IS_USED_LOCK('innopilot') AS CHAR), CAST(CONNECTION_ID() AS CHAR)",
                )
                .await?;
            let r = rows.first();
            let num = |i| r.and_then(|r| col(r, i)).and_then(|v| parse_u64(&v).ok());
            if num(0) == Some(1) {
                self.claim_session = num(2);
                return Ok(None);
            }
            holder = num(1);
            // Our own earlier session, cut off on our side but still alive on the
            // server (a network blip: the server has not noticed yet). It is ours to
            // end; the id is a typed integer, so it may go into the statement.
            if let (Some(h), Some(old)) = (holder, self.claim_session) {
                if h == old && num(2) != Some(old) {
                    let _ = self
                        .fetch("ending innopilot's stale session", &format!("KILL {old}"))
                        .await;
                    self.claim_session = None;
                }
            }
        }
        let Some(id) = holder else {
            // Released between the two calls: try once more next time.
            return Ok(Some("another session (it has just let go; retry)".into()));
        };
        // The id is a typed integer read from the server: safe to put in SQL text.
        let who = self
            .fetch(
                "naming the holder of the claim",
                &format!("SELECT USER, HOST FROM information_schema.PROCESSLIST WHERE ID = {id}"),
            )
            .await
            .ok()
            .and_then(|rows| {
                rows.first().map(|r| {
                    format!(
                        "{}@{}",
                        col(r, 0).unwrap_or_default(),
                        col(r, 1).unwrap_or_default()
                    )
                })
            });
        Ok(Some(match who {
            Some(w) => format!("connection {id} ({w})"),
            None => format!("connection {id}"),
        }))
    }
}

/// A session of its own for `SET GLOBAL innodb_max_purge_lag_wait = N` (MariaDB), which
/// blocks its session until the history list is at most N. Used by `innopilot drain`;
/// the sampling connection stays free for progress reports meanwhile.
struct PurgeLagWait {
    conn: MySqlConnection,
    connection_id: u64,
    target: ConnectTarget,
}

impl PurgeLagWait {
    /// Blocks until history ≤ `target` (the server checks every 100 ms), at most
    /// `limit` client side; the server stops it too, by `max_statement_time`. The SQL
    /// is built from the variable's constant name and a typed integer only.
    async fn wait(mut self, target: u32, limit: Duration) -> Result<(), ServerError> {
        let what = "waiting for purge (SET GLOBAL innodb_max_purge_lag_wait)";
        let sql = format!("SET GLOBAL innodb_max_purge_lag_wait = {target}");
        match tokio::time::timeout(limit, execute(&mut self.conn, &sql)).await {
            Err(_) => Err(ServerError::Timeout { what, after: limit }),
            Ok(Err(e)) => {
                let message = self.target.redact(&e.to_string());
                Err(match &e {
                    sqlx::Error::Database(db)
                        if db.code().as_deref() == Some("42000")
                            && (message.contains("denied") || message.contains("privilege")) =>
                    {
                        ServerError::Denied {
                            what,
                            message,
                            hint: "SET GLOBAL needs SUPER (MariaDB)",
                        }
                    }
                    sqlx::Error::Io(_) | sqlx::Error::Protocol(_) => {
                        ServerError::Lost { what, message }
                    }
                    _ => ServerError::Query { what, message },
                })
            }
            Ok(Ok(_)) => {
                let _ = tokio::time::timeout(
                    Duration::from_secs(1),
                    Box::pin(self.conn.close()) as BoxFut<'_, _>,
                )
                .await;
                Ok(())
            }
        }
    }
}

/// How much longer than the client-side limit the server lets the purge wait run:
/// the client gives up first and stops it with `KILL QUERY`, the server's own
/// `max_statement_time` is the backstop should innopilot be gone by then.
const PURGE_WAIT_SERVER_GRACE: Duration = Duration::from_secs(5);

/// Narrow, typed helpers behind `drain` and `diagnose`: every statement is built from
/// innopilot's own constants and typed integers, never from input.
impl LiveServer {
    /// Opens the dedicated session for [`PurgeLagWait::wait`]; the server stops its
    /// statement after `limit` (max_statement_time).
    async fn purge_lag_waiter(&self, limit: Duration) -> Result<PurgeLagWait, ServerError> {
        let mut conn = self.open_connection(limit).await?;
        let what = "opening the purge wait session (SELECT CONNECTION_ID())";
        let rows = match tokio::time::timeout(
            self.opts.query_timeout,
            fetch_all(&mut conn, "SELECT CAST(CONNECTION_ID() AS CHAR)"),
        )
        .await
        {
            Err(_) => {
                return Err(ServerError::Timeout {
                    what,
                    after: self.opts.query_timeout,
                })
            }
            Ok(Err(e)) => return Err(self.query_error(what, e)),
            Ok(Ok(rows)) => rows,
        };
        let connection_id = rows
            .first()
            .and_then(|r| col(r, 0))
            .and_then(|v| parse_u64(&v).ok())
            .ok_or(ServerError::Unexpected {
                what,
                detail: "no connection id".into(),
            })?;
        Ok(PurgeLagWait {
            conn,
            connection_id,
            target: self.target.clone(),
        })
    }

    async fn name_values(
        &mut self,
        what: &'static str,
        show: &'static str,
        names: &[&'static str],
    ) -> Result<BTreeMap<String, String>, ServerError> {
        if names.is_empty() {
            return Ok(BTreeMap::new());
        }
        // SHOW ... WHERE works alike on MariaDB and MySQL 5.7+; the names are
        // innopilot's own constants (`&'static str`).
        let sql = format!(
            "{show} WHERE Variable_name IN ({})",
            quoted_list(names.iter().copied())
        );
        let rows = self.fetch(what, &sql).await?;
        Ok(rows
            .iter()
            .filter_map(|r| {
                Some((
                    col(r, 0)?.to_ascii_lowercase(),
                    col(r, 1).unwrap_or_default(),
                ))
            })
            .collect())
    }
    /// The TLS cipher of innopilot's own connection (`Ssl_cipher`); `None` when the
    /// connection is not encrypted (ssl-mode preferred falls back to plain text
    /// silently, so `status` asks the server instead of assuming).
    pub async fn tls_cipher(&mut self) -> Result<Option<String>, ServerError> {
        let rows = self
            .fetch(
                "reading the connection's TLS state",
                "SHOW SESSION STATUS LIKE 'Ssl_cipher'",
            )
            .await?;
        Ok(rows
            .first()
            .and_then(|r| col(r, 1))
            .filter(|c| !c.is_empty()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sample_sql_is_built_from_constants_only() {
        let m = ServerIdentity::parse("10.11.19-MariaDB", "").unwrap();
        let sql = sample_sql(&m);
        assert!(sql.contains("information_schema.GLOBAL_STATUS"));
        assert!(sql.contains("'innodb_purge_threads'"));
        assert!(sql.contains("'purge_del_mark_records'") && sql.contains("TIME_DISABLED IS NULL"));
        let o = ServerIdentity::parse("8.4.3", "MySQL Community Server - GPL").unwrap();
        let sql = sample_sql(&o);
        assert!(sql.contains("performance_schema.global_status"));
        assert!(sql.contains("INNODB_METRICS") && sql.contains("SPACE_TYPE = 'Undo'"));
        let o57 = ServerIdentity::parse("5.7.44", "MySQL Community Server (GPL)").unwrap();
        assert!(!sample_sql(&o57).contains("INNODB_TABLESPACES"));
    }
}
