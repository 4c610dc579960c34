//! innopilot keeps InnoDB's background work — purge and flushing — from hurting the
//! foreground, by sampling a MariaDB or MySQL server every second and adjusting a few
//! server variables with `SET GLOBAL`, within bounds, and restoring them on exit.
//!
//! # Layout
//!
//! Modules follow the data path: server → sample → policy → arbiter → guard → actuator
//! → audit and state.
//!
//! - [`cli`]: command-line definition (clap), shared by the binary and generated docs.
//! - [`config`]: raw TOML → validated [`config::Config`]; errors name key, line and range.
//! - [`effective`]: the effective configuration as TOML with each value's origin
//!   (`innopilot check-config`).
//! - [`connect`]: resolves DSN, config, environment and defaults file into a server handle.
//! - [`server`]: the [`server::Server`] trait (the one seam), the knob allowlist,
//!   flavor/version detection and the capability table ([`server::flavor`]), DSNs and
//!   credentials ([`server::dsn`]), the live sqlx connection ([`server::mysql`]).
//! - [`sample`]: [`sample::Sample`] parsing and [`sample::Signals`] derived over a window.
//! - [`policy`]: pure policies (signals → proposals): watermark buckets, purge rate,
//!   flush and redo headroom, undo guard, replica lag; and the [`policy::arbiter`].
//! - [`guard`]: bounds, steps, dwell, rate limit and operator-owned knobs.
//! - [`actuator`]: SET GLOBAL in a safe order, read back, baseline restore.
//! - [`state`]: the crash-safe state file and the recovery plan after a crash.
//! - [`audit`]: the JSON Lines audit log.
//! - [`control`]: the loop tying it together, and its lifecycle (start, reconnect,
//!   server restarts, shutdown).
//! - [`report`]: `status` and `watch` rendering (human table, JSON).
//! - [`metrics`]: the snapshot the loop publishes and its Prometheus text rendering.
//! - [`check`]: `/check`, the freno-compatible "may background work proceed" answer.
//! - [`http`]: `/metrics`, `/healthz`, `/readyz`, `/check` on hyper, capped and with
//!   deadlines.
//! - [`drain`]: `innopilot drain`, waiting for purge to catch up (before a shutdown).
//! - [`diagnose`]: `innopilot diagnose`, a one-shot report with findings and SQL.
//! - [`sim`]: the deterministic InnoDB model behind the same `Server` trait, scenarios,
//!   peers, the runner and the comparison table (`innopilot simulate`).
//! - [`replay`]: recordings of samples (`innopilot record`) and replaying a policy over
//!   them (`innopilot replay`).

pub mod actuator;
pub mod audit;
pub mod check;
pub mod cli;
pub mod config;
pub mod connect;
pub mod control;
pub mod diagnose;
pub mod drain;
pub mod effective;
pub mod guard;
pub mod http;
pub mod metrics;
pub mod policy;
pub mod replay;
pub mod report;
pub mod sample;
pub mod server;
pub mod sim;
pub mod state;
