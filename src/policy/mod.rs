//! Policies: pure functions of [`Signals`] and their own state that propose knob
//! values. No SQL, no clock (time comes in `Signals::t_ms`), no I/O, so they run the
//! same against a live server, the simulator and synthetic test sequences.
//!
//! Each tick every enabled policy returns [`Proposal`]s; the [`arbiter`] keeps one per
//! knob, then the guard bounds it and the actuator applies it. A policy is one file:
//! its logic, its `[policy.NAME]` section and a [`PolicyKind`] impl; the
//! [`registry`] lists the policies and ranks them.

pub mod arbiter;
pub mod flush;
pub mod free_pages;
pub mod purge_rate;
pub mod registry;
pub mod replica;
pub mod server_model;
pub mod undo;
pub mod watermark;

use serde::{Deserialize, Serialize};

use crate::server::{Capabilities, Knob, KnobValues};
use crate::signals::Signals;

/// Who proposed, for the audit log and metrics, and how much their word weighs in the
/// arbiter. The [`registry`] gives each policy its rank; identity is the name alone.
#[derive(Debug, Clone, Copy)]
pub struct PolicyId {
    name: &'static str,
    priority: u8,
    tie_break: u8,
}

impl PolicyId {
    /// `priority`: lower wins in the arbiter (avoid sync flush > protect the foreground
    /// > reduce debt > save I/O); `tie_break`: lower wins among equal priorities.
    pub const fn new(name: &'static str, priority: u8, tie_break: u8) -> Self {
        PolicyId {
            name,
            priority,
            tie_break,
        }
    }

    /// A policy built outside a registry (a policy's own tests): it ranks last.
    pub const fn unranked(name: &'static str) -> Self {
        PolicyId::new(name, u8::MAX, u8::MAX)
    }

    pub const fn name(self) -> &'static str {
        self.name
    }

    pub const fn priority(self) -> u8 {
        self.priority
    }

    pub const fn tie_break(self) -> u8 {
        self.tie_break
    }
}

// By name: a policy built by its own tests (unranked) is the same policy as the one
// the registry ranks.
impl PartialEq for PolicyId {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl Eq for PolicyId {}

impl std::hash::Hash for PolicyId {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.name.hash(state)
    }
}

impl Serialize for PolicyId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name)
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
    /// The policy takes back its own last change of the knob because users are paying
    /// for it now (purge_rate: a purge thread being judged, at the first second users
    /// wait for free pages). Weighed as an `Act`; the guard lets it through `min_dwell`
    /// when it puts the knob back to the value before innopilot's last change of it.
    Retract,
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
    /// The rule that keeps the policy from going further than `value` although its
    /// signals ask for it, by a stable name (`page_cleaner_evicting`,
    /// `threads_max_redo_fill_pct`, …); `None` when nothing holds it back. The audit
    /// log records a knob held where it is when such a rule is new to it, so a DBA sees
    /// why innopilot does not act, not only when it does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held_by: Option<&'static str>,
}

impl Proposal {
    /// A proposal nothing holds back: every policy builds its proposals here, so a new
    /// field gets one default, not one per policy.
    pub fn new(
        policy: PolicyId,
        knob: Knob,
        value: u64,
        intent: Intent,
        reason: String,
    ) -> Proposal {
        Proposal {
            policy,
            knob,
            value,
            intent,
            reason,
            held_by: None,
        }
    }

    /// The same proposal, held back by `rule` ([`Proposal::held_by`]).
    pub fn held_by(self, rule: Option<&'static str>) -> Proposal {
        Proposal {
            held_by: rule,
            ..self
        }
    }
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

/// The enabled policies of the registry `cfg` was validated with, in its order. The
/// controller calls this at start and on a config reload.
pub fn build(cfg: &registry::PolicyConfig) -> Vec<Box<dyn Policy>> {
    cfg.registry().build(cfg)
}

/// Users waiting for free buffer-pool pages (`Innodb_buffer_pool_wait_free`) at this
/// rate (waits/s) or more are short of pages: the flush policy does not raise flushing
/// on a projection then, and the purge-rate policy adds no purge thread.
pub const FREE_PAGE_WAITS_PER_S: f64 = 1.0;

/// "purge thread" or "purge threads", for reasons in words.
pub(crate) fn threads_word(t: u64) -> &'static str {
    if t == 1 {
        "purge thread"
    } else {
        "purge threads"
    }
}

/// What a policy file provides besides its [`Policy`] impl: its section of the
/// configuration and how to build it from that section.
pub trait PolicyKind: 'static {
    /// The section (`[policy.NAME]`), and the name in the audit log and metrics.
    const NAME: &'static str;
    /// The validated section; `Default` is what an absent section means.
    type Config: Clone + PartialEq + std::fmt::Debug + Default + Send + Sync + 'static;
    /// The section as the file says it (`#[serde(deny_unknown_fields)]`, every key an
    /// `Option`).
    type Raw: serde::de::DeserializeOwned + Default;

    /// Raw form → validated section; range errors through `s` name key, line and range.
    fn validate(
        raw: Self::Raw,
        s: &crate::config::check::Section<'_>,
    ) -> Result<Self::Config, crate::config::check::ConfigError>;

    /// The policy, when the section enables it; `id` carries its rank.
    fn build(cfg: &Self::Config, id: PolicyId) -> Option<Box<dyn Policy>>;
}

/// `policy` boxed when its section enables it: what every [`PolicyKind::build`] returns.
pub(crate) fn boxed_if<P: Policy + 'static>(enabled: bool, policy: P) -> Option<Box<dyn Policy>> {
    enabled.then(|| Box::new(policy) as Box<dyn Policy>)
}

/// What the policies have measured about the machine that stays true beyond one run,
/// and takes a stall to measure: carried across a configuration reload (which rebuilds
/// the policies) and, in the state file, to the next start on the same server.
///
/// The hundred-and-fifteenth benchmark run's h: an innopilot restarted 140 s in had
/// not measured the device yet, left innodb_io_capacity_max at 2 000 where the first
/// process had learned 495, and the next burst ran at 0.78× the arm without a restart
/// while the page cleaner's batches held users.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, Default, PartialEq)]
pub struct Learned {
    /// The pages a second the device wrote while it was the page cleaner's limit
    /// (`flush::Device::limit`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_limit_pages_s: Option<f64>,
}

impl Learned {
    /// A device limit no device reaches (pages/s): a value above it (or not a
    /// positive number) in a state file was not written by innopilot.
    pub const MAX_DEVICE_PAGES_S: f64 = 1e9;

    /// Nothing learned.
    pub fn is_empty(&self) -> bool {
        self.device_limit_pages_s.is_none()
    }

    /// Why these values cannot be innopilot's, if they cannot.
    pub fn check(&self) -> Result<(), String> {
        match self.device_limit_pages_s {
            Some(l) if !(l.is_finite() && l > 0.0 && l <= Self::MAX_DEVICE_PAGES_S) => Err(
                format!(
                    "learned device_limit_pages_s {l} is not a rate a device flushes (0 < rate ≤ {:.0})",
                    Self::MAX_DEVICE_PAGES_S
                ),
            ),
            _ => Ok(()),
        }
    }

    /// Whether `self` says something `before` did not, or moved a value by more than a
    /// tenth: worth writing to the state file now rather than at the next write. The
    /// limit is an average updated every second users are held; a write a second during
    /// a stall would be I/O on the device that is the limit.
    pub fn news_since(&self, before: &Learned) -> bool {
        match (self.device_limit_pages_s, before.device_limit_pages_s) {
            (Some(now), Some(then)) => (now - then).abs() > 0.1 * then,
            (now, then) => now.is_some() && then.is_none(),
        }
    }
}

/// A control policy.
pub trait Policy: Send {
    fn id(&self) -> PolicyId;

    /// A proposal of this policy, its id on it.
    fn propose(&self, knob: Knob, value: u64, intent: Intent, reason: String) -> Proposal
    where
        Self: Sized,
    {
        Proposal::new(self.id(), knob, value, intent, reason)
    }

    /// Proposals for this tick. Must be a pure function of the input and the policy's
    /// own state.
    fn decide(&mut self, input: &PolicyInput<'_>) -> Vec<Proposal>;
    /// Forgets internal state (after a reconnect or a server restart, or when the
    /// operator hands a knob back) so the next decision starts without a bump.
    fn reset(&mut self) {}
    /// Adds what this policy has measured about the machine to `into` ([`Learned`]).
    fn learned(&self, into: &mut Learned) {
        let _ = into;
    }
    /// Starts from what an earlier run, or the policy this one replaces, measured.
    fn recall(&mut self, from: &Learned) {
        let _ = from;
    }
}

/// What `policies` have measured, together.
pub fn learned(policies: &[Box<dyn Policy>]) -> Learned {
    let mut l = Learned::default();
    for p in policies {
        p.learned(&mut l);
    }
    l
}

/// Hands `from` to every policy.
pub fn recall(policies: &mut [Box<dyn Policy>], from: &Learned) {
    for p in policies {
        p.recall(from);
    }
}

#[cfg(test)]
mod learned_tests {
    use super::Learned;
    use proptest::prelude::*;

    fn limit(l: f64) -> Learned {
        Learned {
            device_limit_pages_s: Some(l),
        }
    }

    #[test]
    fn only_a_rate_a_device_flushes_passes() {
        for good in [0.5, 495.0, Learned::MAX_DEVICE_PAGES_S] {
            assert!(limit(good).check().is_ok(), "{good}");
        }
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, 2e9] {
            let e = limit(bad).check().unwrap_err();
            assert!(e.contains("device_limit_pages_s"), "{bad}: {e}");
        }
        assert!(Learned::default().check().is_ok());
    }

    proptest! {
        /// News: a first value, or a move of more than a tenth either way; never
        /// the loss of one (a run that measured nothing keeps the last run's).
        #[test]
        fn news_is_a_first_value_or_a_tenth(then in 1.0f64..1e6, ratio in 0.5f64..1.5) {
            let now = then * ratio;
            prop_assert!(limit(now).news_since(&Learned::default()));
            prop_assert!(!Learned::default().news_since(&limit(then)));
            if (ratio - 1.0).abs() > 0.11 {
                prop_assert!(limit(now).news_since(&limit(then)));
            }
            if (ratio - 1.0).abs() < 0.09 {
                prop_assert!(!limit(now).news_since(&limit(then)));
            }
            prop_assert!(!limit(then).news_since(&limit(then)));
        }
    }
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
            let plan = self.tick_signals(policies, &signals);
            (signals, plan)
        }

        /// [`Loop::tick`] from signals made by hand rather than by the window.
        pub fn tick_signals(
            &mut self,
            policies: &mut [&mut dyn Policy],
            signals: &Signals,
        ) -> Plan {
            let input = PolicyInput {
                signals,
                caps: &self.caps,
                current: &self.current,
                baseline: &self.baseline,
            };
            let plan = plan(policies.iter_mut().map(|p| &mut **p), &input, &self.guard);
            for c in &plan.changes {
                self.guard.record_applied(signals.t_ms, c.knob, c.from);
                self.current.insert(c.knob, c.to);
                self.applied.push((signals.t_ms, c.knob, c.from, c.to));
            }
            plan
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
