//! innopilot keeps InnoDB's background work — purge and flushing — from hurting the
//! foreground, by sampling a MariaDB or MySQL server every second and adjusting a few
//! server variables with `SET GLOBAL`, within bounds, and restoring them on exit.
//!
//! # Layout
//!
//! Modules follow the data path: server → sample → policy → guard → actuator → audit.
//!
//! - [`cli`]: command-line definition (clap) shared by the binary, completions and man page.
//! - [`config`]: raw TOML → validated [`config::Config`]; errors name key, line and range.
//! - [`server`]: the [`server::Server`] trait (the one seam), the knob allowlist,
//!   flavor/version detection and the capability table ([`server::flavor`]), DSNs and
//!   credentials ([`server::dsn`]), the live sqlx connection ([`server::mysql`]).
//! - [`sample`]: [`sample::Sample`] parsing and [`sample::Signals`] derived over a window.
//! - [`connect`]: resolves DSN, config and environment into a live server handle.
//! - [`policy`]: pure policies (signals → proposals) and the [`policy::arbiter`].
//! - [`report`]: `status` and `watch` rendering (human table, JSON).

pub mod actuator;
pub mod audit;
pub mod cli;
pub mod config;
pub mod connect;
pub mod control;
pub mod guard;
pub mod policy;
pub mod report;
pub mod sample;
pub mod server;
pub mod state;
