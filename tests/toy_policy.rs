//! A policy is one file plus one registry line: this file is a whole policy (its
//! logic, its `[policy.toy]` section, its `PolicyKind` impl), registered with one line,
//! and the simulator's controller runs it and applies what it decides.

use std::time::Duration;

use innopilot::config::check::{ConfigError, Section};
use innopilot::config::Config;
use innopilot::policy::registry::Registry;
use innopilot::policy::PolicyKind;
use innopilot::policy::{Intent, Policy, PolicyId, PolicyInput, Proposal};
use innopilot::server::Knob;
use innopilot::sim::compare::run_with;
use innopilot::sim::{Peer, Scenario};
use serde::Deserialize;

/// Sets innodb_purge_batch_size to `batch_size` once `after` has passed since its first
/// tick.
struct Toy {
    id: PolicyId,
    cfg: ToyConfig,
    start_ms: Option<u64>,
}

impl Policy for Toy {
    fn id(&self) -> PolicyId {
        self.id
    }

    fn decide(&mut self, input: &PolicyInput<'_>) -> Vec<Proposal> {
        let t = input.signals.t_ms;
        let start = *self.start_ms.get_or_insert(t);
        if t - start < self.cfg.after.as_millis() as u64 {
            return Vec::new();
        }
        vec![Proposal::new(
            self.id,
            Knob::PurgeBatchSize,
            self.cfg.batch_size,
            Intent::Act,
            "the toy policy's moment has come".into(),
        )]
    }
}

#[derive(Debug, Clone, PartialEq)]
struct ToyConfig {
    enabled: bool,
    after: Duration,
    batch_size: u64,
}

impl Default for ToyConfig {
    fn default() -> Self {
        ToyConfig {
            enabled: false,
            after: Duration::from_secs(60),
            batch_size: 300,
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawToy {
    enabled: Option<bool>,
    #[serde(default, with = "humantime_serde")]
    after: Option<Duration>,
    batch_size: Option<i64>,
}

impl PolicyKind for Toy {
    const NAME: &'static str = "toy";
    type Config = ToyConfig;
    type Raw = RawToy;

    fn validate(r: RawToy, s: &Section<'_>) -> Result<ToyConfig, ConfigError> {
        let d = ToyConfig::default();
        Ok(ToyConfig {
            enabled: r.enabled.unwrap_or(d.enabled),
            after: s.duration("after", r.after, d.after, Duration::ZERO, d.after * 60)?,
            batch_size: s.int("batch_size", r.batch_size, d.batch_size, 1, 5000)?,
        })
    }

    fn build(cfg: &ToyConfig, id: PolicyId) -> Option<Box<dyn Policy>> {
        cfg.enabled.then(|| {
            let cfg = cfg.clone();
            Box::new(Toy {
                id,
                cfg,
                start_ms: None,
            }) as Box<dyn Policy>
        })
    }
}

/// The one registry line: the standard policies, then the toy, ranked last.
fn registry() -> Registry {
    Registry::standard().with::<Toy>(9, 0)
}

#[test]
fn the_toy_policy_decides_in_the_simulator() {
    let text = "[policy.toy]\nenabled = true\nafter = \"20s\"\nbatch_size = 1234\n";
    let cfg = Config::parse_with(text, "toy.toml", &registry()).unwrap();
    assert_eq!(cfg.policy.get::<Toy>().unwrap().batch_size, 1234);
    let scenario = Scenario::named("long_read_view").unwrap().scaled(0.25);
    let run = run_with(&scenario, &Peer::named("innopilot").unwrap(), 1, Some(&cfg)).unwrap();
    let toy: Vec<_> = run.decisions.iter().filter(|d| d.policy == "toy").collect();
    let first = toy.first().expect("the toy policy never decided");
    assert_eq!(
        (first.knob.as_str(), first.to, first.outcome.as_str()),
        ("innodb_purge_batch_size", 1234, "applied"),
        "{first:?}"
    );
    assert!((20.0..23.0).contains(&first.t_s), "{first:?}");
}

#[test]
fn its_section_is_checked_like_any_other() {
    let e = Config::parse_with("[policy.toy]\n\nbatch_size = 0\n", "toy.toml", &registry())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("toy.toml:3") && e.contains("policy.toy.batch_size") && e.contains("from 1"),
        "{e}"
    );
    let e = Config::parse_with("[policy.toy]\nbatchsize = 7\n", "toy.toml", &registry())
        .unwrap_err()
        .to_string();
    assert!(e.contains("toy.toml:2") && e.contains("batchsize"), "{e}");
    // Without its registry line the section is an unknown key.
    let e = Config::parse("[policy.toy]\nenabled = true\n", "toy.toml")
        .unwrap_err()
        .to_string();
    assert!(e.contains("toy.toml:1") && e.contains("toy"), "{e}");
}
