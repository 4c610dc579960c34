//! What one simulated run produced: its time series and its controller's decisions.
//! The runner ([`super::compare`](mod@super::compare)) makes a [`SimRun`]; the table, CSV and plots read it.

use serde::Serialize;

use super::model::Second;
use super::scenario::SimFlavor;
use crate::control::TickDecision;
use crate::server::Knob;

/// One decision of a controller peer, from its tick reports.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SimDecision {
    /// Virtual time of the tick, seconds.
    pub t_s: f64,
    pub policy: String,
    pub knob: String,
    pub from: u64,
    pub to: u64,
    /// applied, rejected, failed, …
    pub outcome: String,
    pub reason: String,
    /// The rules that held a policy back, "policy: rule" (the audit's `held_by`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub held_by: Vec<String>,
}

/// The time series of one run.
#[derive(Debug, Clone, Serialize)]
pub struct SimRun {
    pub scenario: String,
    pub scenario_title: String,
    pub seed_ref: String,
    pub peer: String,
    pub peer_title: String,
    pub flavor: SimFlavor,
    pub seed: u64,
    pub duration_s: f64,
    /// Per second: whether the offered load counts for throughput and jitter figures.
    pub loaded: Vec<bool>,
    pub seconds: Vec<Second>,
    pub decisions: Vec<SimDecision>,
    /// The read views of this run (start, end), seconds: shaded in the plots.
    pub views: Vec<(f64, f64)>,
}

/// Knobs that appear in a run, in allowlist order.
pub(crate) fn run_knobs(run: &SimRun) -> Vec<Knob> {
    Knob::ALL
        .into_iter()
        .filter(|k| run.seconds.iter().any(|s| s.knobs.contains_key(k)))
        .collect()
}

impl SimDecision {
    /// A tick's decision on the simulator's clock (seconds since `epoch_unix_ms`).
    pub fn from_tick(d: &TickDecision, epoch_unix_ms: u64) -> Self {
        SimDecision {
            t_s: d.unix_ms.saturating_sub(epoch_unix_ms) as f64 / 1000.0,
            policy: d.policy.clone(),
            knob: d.knob.to_string(),
            from: d.from,
            to: d.to,
            outcome: d.outcome.as_str().to_string(),
            reason: d.reason.clone(),
            held_by: d.held_by.clone(),
        }
    }
}
