//! innopilot keeps InnoDB's background work — purge and flushing — from hurting the
//! foreground, by sampling a MariaDB or MySQL server every second and adjusting a few
//! server variables with `SET GLOBAL`, within bounds, and restoring them on exit.
//!
//! # Layout
//!
//! Modules follow the data path, each using only what stands above it:
//! server → signals → policy → control → commands and outputs.
//!
//! - [`config`]: raw TOML and command-line overrides → one validated [`config::Config`];
//!   [`config::check`] is the validation kit each section (a policy's too) checks with;
//!   [`config::effective`] prints the effective configuration with each value's origin.
//! - [`server`]: what a server *is and returns*: the [`server::Server`] trait (the one
//!   seam), the knob allowlist, errors, [`server::sample::Sample`] and its row parsing,
//!   flavor and capabilities, DSNs and connecting, the live sqlx server, recordings.
//! - [`signals`]: what is *derived* from samples: windows, rates, trends, restart
//!   detection, the purge estimate (purgeable vs blocked, who blocks) and the share of
//!   history purge has handled but the server has not freed (`signals::unfreed`).
//! - [`policy`]: pure policies (signals → proposals), each one file with its config
//!   section (flush, with its two levers, one folder: the page cleaner, its batch
//!   past the async point and [`policy::flush`]'s redo headroom); the two largest
//!   and [`policy::free_pages`] keep their unit tests in a `tests.rs` beside them
//!   (`purge_rate/`, `flush/`, `free_pages/`);
//!   [`policy::registry`] lists and ranks them; the arbiter; the servers' own
//!   formulas ([`policy::server_model`]).
//! - [`control`]: the pure planning step, the guard, the actuator, the state file, the
//!   audit log, the loop that performs plans (tick → typed report), restoring the
//!   baseline at exit (`control::restore`) and crash recovery ([`control::recovery`]).
//! - [`commands`]: `status`, `watch` (its loop is `record`'s), `diagnose`, `drain`, `replay`.
//! - [`metrics`]: the snapshot the loop publishes and its Prometheus rendering.
//! - [`check`]: `/check`, the freno-compatible "may background work proceed" answer.
//! - [`http`]: `/metrics`, `/healthz`, `/readyz`, `/check` on hyper, capped and with
//!   deadlines.
//! - [`sim`]: the deterministic InnoDB model behind the same `Server` trait, scenarios,
//!   peers from the policy registry, the runner and the comparison table.
//! - [`cli`]: the command-line definition (clap), shared by the binary and generated docs.

pub mod check;
pub mod cli;
pub mod commands;
pub mod config;
pub mod control;
pub mod http;
pub mod metrics;
pub mod policy;
pub mod server;
pub mod signals;
pub mod sim;
