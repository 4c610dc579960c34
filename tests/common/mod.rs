//! Real-server test harness: private, throw-away MariaDB servers for integration tests.
//!
//! Include it from an integration test with `mod common;`.
//!
//! Every [`MariaDb`] is a separate `mariadbd` process with its own temporary directory
//! (datadir, socket, pid file, error log), listening on a free loopback port chosen at
//! start (never 3306). The system MariaDB service is never used or touched: the server
//! runs with `--no-defaults`, so no `my.cnf` is read.
//!
//! * Datadirs are copied (`cp -a`) from a pristine template made once with
//!   `mariadb-install-db` and kept under `$CARGO_TARGET_TMPDIR`, keyed by the server
//!   version, the redo log size and [`TEMPLATE_REVISION`].
//! * Authentication: `root@127.0.0.1` and `root@localhost` have an empty password
//!   (`--auth-root-authentication-method=normal`), so [`MariaDb::dsn`] is
//!   `mysql://root@127.0.0.1:<port>/`. Anonymous accounts, the `root@<hostname>` rows and
//!   the default grants of the `PUBLIC` role on the `test` and `test\_%` databases are
//!   removed from the template, so an account made by [`MariaDb::create_user`] has exactly
//!   the privileges it is given.
//! * The server is shut down (SIGTERM, then SIGKILL after a timeout; SIGKILL at once
//!   when the test is panicking) and its directory removed in `Drop`. A server also gets
//!   SIGKILL if the test process dies without unwinding (`PR_SET_PDEATHSIG`).
//!   Set `INNOPILOT_KEEP_TEST_SERVERS=1` to keep the directories for debugging.
//! * When `mariadbd` or `mariadb-install-db` is missing the harness panics with
//!   [`SETUP_HINT`]: tests fail, they never skip.
//! * Every query made by the harness is bounded by [`QUERY_TIMEOUT`].
//!
//! One module a concern:
//!
//! | module | owns |
//! | --- | --- |
//! | `server` | the `mariadbd` process: start, restart, stop, kill, `Drop`, DSNs |
//! | `template` | the binaries and the datadir template |
//! | `sql` | bounded SQL (on a connection or on the server) and [`eventually`] |
//! | `load` | `test.t` and the update load |
//! | `views` | the read-view holder |
//! | `configs` | the TOML configs the live tests run innopilot with |
//! | `run` | driving the `innopilot` binary and reading its audit log |
//! | `proxy` | a loopback TCP proxy that stalls or cuts connections |
// Each test file uses a part of the harness; the rest is neither dead nor unused.
#![allow(dead_code, unused_imports)]

pub mod configs;
pub mod load;
pub mod proxy;
pub mod run;
pub mod server;
pub mod sql;
pub mod template;
pub mod tls;
pub mod views;

use std::path::PathBuf;

pub use load::{loaded_server, LoadHandle, LoadStats};
pub use server::{free_port, MariaDb, MariaDbBuilder, DEFAULT_READY_TIMEOUT, STOP_TIMEOUT};
pub use sql::{
    bounded, bounded_for, eventually, exec_on, rows_on, scalar_string_on, HarnessError,
    QUERY_TIMEOUT,
};
pub use template::{required_binary, SETUP_HINT, TEMPLATE_REVISION};
pub use views::ReadViewHandle;

/// Path of the `innopilot` binary built by cargo for this test run.
pub fn innopilot_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_innopilot"))
}
