//! Policies: pure functions of [`Signals`] and their own state that propose knob
//! values. No SQL, no clock (time comes in `Signals::t_ms`), no I/O, so they run the
//! same against a live server, the simulator and synthetic test sequences.
//!
//! Each tick every enabled policy returns [`Proposal`]s; the [`arbiter`] keeps one per
//! knob, then the guard bounds it and the actuator applies it.

pub mod arbiter;
pub mod flush;
pub mod purge_rate;
pub mod replica;
pub mod server_model;
pub mod undo;
pub mod watermark;

use serde::Serialize;

use crate::server::{Capabilities, Knob, KnobValues};
use crate::signals::Signals;

/// Who proposed, for the audit log and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PolicyId {
    /// Avoid the sync-flush cliff (flush and redo headroom).
    Flush,
    /// Protect the foreground from purge's redo (MariaDB 10.6.5 watermark buckets).
    Watermark,
    /// Protect a replica's applier from purge (replica lag, seed 004): foreground
    /// protection, ranked with the watermark policy.
    Replica,
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
            PolicyId::Watermark | PolicyId::Replica => 1,
            PolicyId::PurgeRate => 2,
            PolicyId::Undo => 3,
        }
    }

    pub const fn name(self) -> &'static str {
        match self {
            PolicyId::Flush => "flush",
            PolicyId::Watermark => "watermark",
            PolicyId::Replica => "replica",
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
    // The replica-lag policy first: when both foreground protections act on purge
    // threads the first proposal wins, and it is the one that asks for fewer.
    let mut out: Vec<Box<dyn Policy>> = replica::build(&cfg.replica).into_iter().collect();
    if cfg.flush.enabled {
        out.push(Box::new(flush::Flush::new(cfg.flush.clone())));
    }
    if cfg.watermark.enabled {
        out.push(Box::new(watermark::Watermark::new(cfg.watermark.clone())));
    }
    if cfg.purge_rate.enabled {
        out.push(Box::new(purge_rate::PurgeRate::new(cfg.purge_rate.clone())));
    }
    if cfg.undo.enabled {
        out.push(Box::new(undo::Undo::new(cfg.undo.clone())));
    }
    out
}

/// "purge thread" or "purge threads", for reasons in words.
pub(crate) fn threads_word(t: u64) -> &'static str {
    if t == 1 {
        "purge thread"
    } else {
        "purge threads"
    }
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

/// Test helpers shared by the policies' tests: probed capabilities per flavor and a
/// closed loop that drives policies the way the controller does (signals → decide →
/// arbiter → guard → "server"), without a server.
#[cfg(test)]
pub(crate) mod testkit {
    use super::{Policy, PolicyInput};
    use crate::config::Config;
    use crate::control::guard::Guard;
    use crate::control::plan::{plan, Plan};
    use crate::server::flavor::ReplicaSource;
    use crate::server::sample::Sample;
    use crate::server::{Capabilities, Knob, KnobValues};
    use crate::signals::{SignalWindow, Signals};

    /// Capabilities as probed: `read_only` is what MariaDB's SYSTEM_VARIABLES says;
    /// MySQL says nothing (None) and innopilot's version table decides.
    pub fn caps(version: &str, read_only: impl Fn(&str) -> Option<bool>) -> Capabilities {
        crate::server::flavor::fixture_caps(version, read_only, ReplicaSource::NotReplica)
    }

    pub fn mariadb() -> Capabilities {
        caps("10.11.19-MariaDB", |_| Some(false))
    }

    pub fn mysql() -> Capabilities {
        caps("8.0.40", |_| None)
    }

    /// One policy's proposals for one tick, outside any loop.
    pub fn propose<P: Policy + ?Sized>(
        policy: &mut P,
        caps: &Capabilities,
        current: &KnobValues,
        baseline: &KnobValues,
        signals: &Signals,
    ) -> Vec<super::Proposal> {
        policy.decide(&PolicyInput {
            signals,
            caps,
            current,
            baseline,
        })
    }

    /// The proposal for `knob`, if any.
    pub fn find(ps: &[super::Proposal], knob: Knob) -> Option<&super::Proposal> {
        ps.iter().find(|p| p.knob == knob)
    }

    /// The controller's loop without a server: the guard's default limits (or the
    /// given ones) decide what is applied, and applied values are in effect at once.
    pub struct Loop {
        pub caps: Capabilities,
        pub baseline: KnobValues,
        pub current: KnobValues,
        pub window: SignalWindow,
        pub guard: Guard,
        /// (t_ms, knob, from, to) of every applied change.
        pub applied: Vec<(u64, Knob, u64, u64)>,
    }

    impl Loop {
        pub fn new(caps: Capabilities, baseline: KnobValues) -> Self {
            let cfg = Config::default();
            Loop {
                caps,
                current: baseline.clone(),
                baseline,
                window: SignalWindow::new(cfg.sampler.window),
                guard: Guard::new(cfg.knobs.clone(), cfg.control.max_sets_per_minute),
                applied: Vec::new(),
            }
        }

        /// One tick through the controller's own planning step
        /// ([`crate::control::plan::plan`]); the sample's knobs are overwritten with
        /// what is in effect, and planned changes take effect at once.
        pub fn tick(
            &mut self,
            policies: &mut [&mut dyn Policy],
            mut sample: Sample,
        ) -> (Signals, Plan) {
            sample.knobs = self.current.clone();
            let signals = self.window.push(sample);
            let input = PolicyInput {
                signals: &signals,
                caps: &self.caps,
                current: &self.current,
                baseline: &self.baseline,
            };
            let plan = plan(policies.iter_mut().map(|p| &mut **p), &input, &self.guard);
            for c in &plan.changes {
                self.guard.record_applied(signals.t_ms, c.knob);
                self.current.insert(c.knob, c.to);
                self.applied.push((signals.t_ms, c.knob, c.from, c.to));
            }
            (signals, plan)
        }

        /// Changes applied to one knob.
        pub fn changes(&self, knob: Knob) -> Vec<(u64, u64, u64)> {
            self.applied
                .iter()
                .filter(|a| a.1 == knob)
                .map(|a| (a.0, a.2, a.3))
                .collect()
        }
    }
}
