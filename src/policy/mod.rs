//! Policies: pure functions of [`Signals`] and their own state that propose knob
//! values. No SQL, no clock (time comes in `Signals::t_ms`), no I/O, so they run the
//! same against a live server, the simulator and synthetic test sequences.
//!
//! Each tick every enabled policy returns [`Proposal`]s; the [`arbiter`] keeps one per
//! knob, then the guard bounds it and the actuator applies it.

pub mod arbiter;
pub mod watermark;

use serde::Serialize;

use crate::sample::Signals;
use crate::server::{Capabilities, Knob, KnobValues};

/// Who proposed, for the audit log and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PolicyId {
    /// Avoid the sync-flush cliff (flush and redo headroom).
    Flush,
    /// Protect the foreground from purge's redo (MariaDB 10.6.5 watermark buckets).
    Watermark,
    /// Reduce purge debt at a controlled rate.
    PurgeRate,
    /// Keep undo tablespaces in check.
    Undo,
}

impl PolicyId {
    /// Lower wins in the arbiter: avoid sync flush > protect the foreground > reduce
    /// debt > save I/O.
    pub const fn priority(self) -> u8 {
        match self {
            PolicyId::Flush => 0,
            PolicyId::Watermark => 1,
            PolicyId::PurgeRate => 2,
            PolicyId::Undo => 3,
        }
    }

    pub const fn name(self) -> &'static str {
        match self {
            PolicyId::Flush => "flush",
            PolicyId::Watermark => "watermark",
            PolicyId::PurgeRate => "purge_rate",
            PolicyId::Undo => "undo",
        }
    }
}

/// Whether a proposal asks for action or only hands a knob back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Intent {
    /// The policy needs this value now.
    Act,
    /// The policy no longer needs the knob and suggests its baseline value; any
    /// `Act` proposal from another policy wins over a `Release`, whatever the priority.
    Release,
}

/// One policy's wish for one knob.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Proposal {
    pub policy: PolicyId,
    pub knob: Knob,
    pub value: u64,
    pub intent: Intent,
    /// In words, with the numbers behind it: "redo fill 63 % entered bucket 3 of 4".
    pub reason: String,
}

/// What a policy sees each tick.
#[derive(Debug, Clone, Copy)]
pub struct PolicyInput<'a> {
    pub signals: &'a Signals,
    pub caps: &'a Capabilities,
    /// Values in effect now.
    pub current: &'a KnobValues,
    /// Values found at start (what innopilot restores on exit).
    pub baseline: &'a KnobValues,
}

/// The enabled policies, in arbiter priority order. The controller calls this at start
/// and on a config reload; adding a policy means adding it here.
pub fn build(cfg: &crate::config::PolicyConfig) -> Vec<Box<dyn Policy>> {
    let mut out: Vec<Box<dyn Policy>> = Vec::new();
    if cfg.watermark.enabled {
        out.push(Box::new(watermark::Watermark::new(cfg.watermark.clone())));
    }
    out
}

/// A control policy.
pub trait Policy: Send {
    fn id(&self) -> PolicyId;
    /// Proposals for this tick. Must be a pure function of the input and the policy's
    /// own state.
    fn decide(&mut self, input: &PolicyInput<'_>) -> Vec<Proposal>;
    /// Forgets internal state (after a reconnect or a server restart, or when the
    /// operator hands a knob back) so the next decision starts without a bump.
    fn reset(&mut self) {}
}
