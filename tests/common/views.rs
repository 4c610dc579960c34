//! The read-view holder: a connection inside `START TRANSACTION WITH CONSISTENT
//! SNAPSHOT`, which keeps purge from removing the history it can still see.

use sqlx::mysql::MySqlConnection;
use sqlx::Connection;

use super::sql::{bounded, exec_on, scalar_string_on};
use super::MariaDb;

impl MariaDb {
    /// Opens a connection holding a consistent-snapshot read view
    /// (`START TRANSACTION WITH CONSISTENT SNAPSHOT; SELECT COUNT(*) FROM test.t`)
    /// until the handle is released (COMMIT) or dropped (connection closed).
    pub async fn hold_read_view(&self) -> ReadViewHandle {
        let mut conn = self.connect().await;
        let id = scalar_string_on(&mut conn, "SELECT CONNECTION_ID()")
            .await
            .unwrap_or_else(|e| panic!("SELECT CONNECTION_ID(): {e}"))
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        exec_on(&mut conn, "START TRANSACTION WITH CONSISTENT SNAPSHOT")
            .await
            .unwrap_or_else(|e| panic!("START TRANSACTION WITH CONSISTENT SNAPSHOT: {e}"));
        let rows = scalar_string_on(&mut conn, "SELECT COUNT(*) FROM test.t")
            .await
            .unwrap_or_else(|e| panic!("SELECT COUNT(*) FROM test.t in the read view: {e}"))
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        ReadViewHandle {
            conn: Some(conn),
            connection_id: id,
            rows_seen: rows,
        }
    }
}

/// A connection holding a read view open (see [`MariaDb::hold_read_view`]).
/// Dropping it closes the connection without COM_QUIT, which rolls the transaction
/// back (and makes the server log an "Aborted connection" warning); prefer `release`.
pub struct ReadViewHandle {
    conn: Option<MySqlConnection>,
    connection_id: u64,
    rows_seen: u64,
}

impl ReadViewHandle {
    /// `CONNECTION_ID()` of the session holding the view.
    pub fn connection_id(&self) -> u64 {
        self.connection_id
    }

    /// What `SELECT COUNT(*) FROM test.t` returned inside the view.
    pub fn rows_seen(&self) -> u64 {
        self.rows_seen
    }

    /// The connection (still inside the transaction), e.g. to read through the view.
    pub fn connection(&mut self) -> &mut MySqlConnection {
        self.conn.as_mut().expect("read view connection present")
    }

    /// COMMIT and close the connection.
    pub async fn release(mut self) {
        if let Some(mut conn) = self.conn.take() {
            exec_on(&mut conn, "COMMIT")
                .await
                .unwrap_or_else(|e| panic!("COMMIT of the read view: {e}"));
            let _ = bounded("close", conn.close()).await;
        }
    }
}
