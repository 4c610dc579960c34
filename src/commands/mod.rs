//! The one-shot commands a DBA runs beside the daemon: `status` ([`status`]), `watch`
//! and the sampling loop it shares with `record` ([`watch`]), `diagnose`, `drain`, and
//! `record` / `replay` ([`replay`]). Each reads the server through the
//! [`crate::server::Server`] trait, so it runs the same against a live server, the
//! simulator and a recording.

pub mod diagnose;
pub mod drain;
pub mod replay;
pub mod status;
pub mod watch;
