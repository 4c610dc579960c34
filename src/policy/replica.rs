//! Replica lag as a foreground signal (seed 004: a backup plus a buffer-pool dump made
//! a replica fall 11 hours behind in a day). On a replica the foreground is the SQL
//! thread applying the source's changes, and purge competes with it for CPU, I/O and
//! redo. With `[policy.replica] enabled`, lag above `max_lag` throttles purge:
//!
//! - where `innodb_purge_threads` is dynamic (MariaDB ≥ 10.7.1): one purge thread;
//! - elsewhere (MySQL, older MariaDB): `innodb_purge_batch_size` = `batch_size` (never
//!   above the baseline), so each purge batch takes less from the applier.
//!
//! It never proposes a DML delay: on a replica that would slow the applier itself.
//! Once the lag is below `resume_lag` the knob is handed back to its baseline
//! (`Release`, so any other policy's `Act` wins), and the policy stays silent until the
//! next time the lag crosses `max_lag`. Unknown lag (not a replica, SQL thread stopped)
//! holds the current state: a stopped applier is not a reason to stop throttling, nor
//! to start.
//!
//! It is a foreground-protection policy, so the registry ranks it with the watermark
//! policy and lets it win their ties on purge threads; both ask for one thread in the
//! cases that matter (high redo fill, high lag).

use std::time::Duration;

use serde::Deserialize;

use super::{Intent, Policy, PolicyId, PolicyInput, PolicyKind, Proposal};
use crate::config::check::{ConfigError, Section};
use crate::server::Knob;

/// See the module documentation.
pub struct ReplicaLag {
    /// Name and rank, as the registry gave them ([`PolicyId::unranked`] until then).
    id: PolicyId,
    cfg: ReplicaConfig,
    /// Throttling because the lag went above `max_lag`.
    active: bool,
    /// Handing the throttled knob back until it is at its baseline.
    releasing: bool,
}

impl ReplicaLag {
    pub fn new(cfg: ReplicaConfig) -> Self {
        ReplicaLag {
            id: PolicyId::unranked(<Self as PolicyKind>::NAME),
            cfg,
            active: false,
            releasing: false,
        }
    }

    fn secs(d: Duration) -> u64 {
        d.as_secs()
    }

    fn knob(input: &PolicyInput<'_>) -> Option<Knob> {
        if input.caps.settable(Knob::PurgeThreads) {
            Some(Knob::PurgeThreads)
        } else if input.caps.settable(Knob::PurgeBatchSize) {
            Some(Knob::PurgeBatchSize)
        } else {
            None
        }
    }
}

impl Policy for ReplicaLag {
    fn id(&self) -> PolicyId {
        self.id
    }

    fn decide(&mut self, input: &PolicyInput<'_>) -> Vec<Proposal> {
        if !self.cfg.enabled {
            return Vec::new();
        }
        let Some(knob) = Self::knob(input) else {
            return Vec::new();
        };
        let Some(&base) = input.baseline.get(&knob) else {
            return Vec::new();
        };
        let max = Self::secs(self.cfg.max_lag);
        let resume = Self::secs(self.cfg.resume_lag);
        let lag = input.signals.sample.replica_lag_s;
        match lag {
            Some(l) if !self.active && l > max => {
                self.active = true;
                self.releasing = false;
            }
            Some(l) if self.active && l <= resume => {
                self.active = false;
                self.releasing = true;
            }
            _ => {}
        }
        let shown = lag
            .map(|l| format!("{l} s"))
            .unwrap_or_else(|| "unknown".into());
        if self.active {
            let (value, what) = match knob {
                Knob::PurgeThreads => (1, "1 purge thread".to_string()),
                _ => {
                    let v = self.cfg.batch_size.min(base).max(1);
                    (v, format!("innodb_purge_batch_size {v} undo pages"))
                }
            };
            let reason = format!(
                "replica lag {shown} went above policy.replica.max_lag {max} s and is not yet \
                 back to resume_lag {resume} s: the SQL thread is the foreground here, so \
                 purge yields: {what} (baseline {base})"
            );
            return vec![Proposal::new(self.id, knob, value, Intent::Act, reason)];
        }
        if self.releasing {
            if input.current.get(&knob) == Some(&base) {
                self.releasing = false;
                return Vec::new();
            }
            let reason = format!(
                "replica lag {shown} is back to policy.replica.resume_lag {resume} s or less: \
                 {knob} back to its baseline {base}"
            );
            return vec![Proposal::new(self.id, knob, base, Intent::Release, reason)];
        }
        Vec::new()
    }

    fn reset(&mut self) {
        // After a reconnect or restart the baseline is read anew; nothing of ours is
        // assumed to be in effect.
        self.active = false;
        self.releasing = false;
    }
}

// ---- configuration: `[policy.replica]` -------------------------------------------

/// Replica lag as a foreground signal (seed 004): on a replica the SQL thread is the
/// foreground, and purge competes with it. Above `max_lag` purge is throttled to one
/// thread (or, where purge threads are read-only, smaller purge batches) until the
/// lag is back under `resume_lag`.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplicaConfig {
    pub enabled: bool,
    pub max_lag: Duration,
    pub resume_lag: Duration,
    /// Where purge threads are read-only (MySQL): innodb_purge_batch_size while lagging.
    pub batch_size: u64,
}

impl Default for ReplicaConfig {
    fn default() -> Self {
        ReplicaConfig {
            enabled: false,
            max_lag: Duration::from_secs(60),
            resume_lag: Duration::from_secs(10),
            batch_size: 100,
        }
    }
}

/// `[policy.replica]` as the file says it.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawReplica {
    enabled: Option<bool>,
    #[serde(default, with = "humantime_serde")]
    max_lag: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    resume_lag: Option<Duration>,
    batch_size: Option<i64>,
}

impl PolicyKind for ReplicaLag {
    const NAME: &'static str = "replica";
    type Config = ReplicaConfig;
    type Raw = RawReplica;

    fn validate(r: RawReplica, s: &Section<'_>) -> Result<ReplicaConfig, ConfigError> {
        let (secs, dr) = (Duration::from_secs, &ReplicaConfig::default());
        let replica = ReplicaConfig {
            enabled: r.enabled.unwrap_or(dr.enabled),
            max_lag: s.duration("max_lag", r.max_lag, dr.max_lag, secs(1), secs(86_400))?,
            resume_lag: s.duration(
                "resume_lag",
                r.resume_lag,
                dr.resume_lag,
                Duration::ZERO,
                secs(86_400),
            )?,
            batch_size: s.int("batch_size", r.batch_size, dr.batch_size, 1, 5000)?,
        };
        if replica.resume_lag >= replica.max_lag {
            return Err(s.invalid(
                "resume_lag",
                format!("\"{}\"", humantime::format_duration(replica.resume_lag)),
                format!(
                    "must be below policy.replica.max_lag (\"{}\")",
                    humantime::format_duration(replica.max_lag)
                ),
            ));
        }
        Ok(replica)
    }

    fn build(cfg: &ReplicaConfig, id: PolicyId) -> Option<Box<dyn Policy>> {
        super::boxed_if(
            cfg.enabled,
            ReplicaLag {
                id,
                ..ReplicaLag::new(cfg.clone())
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::server::flavor::ReplicaSource;
    use crate::server::sample::Sample;
    use crate::server::{Capabilities, KnobValues};
    use crate::signals::Signals;

    fn caps(version: &str) -> Capabilities {
        crate::server::flavor::fixture_caps_writable(version, ReplicaSource::ShowReplicaStatus)
    }

    fn cfg() -> ReplicaConfig {
        ReplicaConfig {
            enabled: true,
            ..Config::default().policy.replica
        }
    }

    fn step(
        p: &mut ReplicaLag,
        caps: &Capabilities,
        lag: Option<u64>,
        current: u64,
    ) -> Vec<Proposal> {
        let s = Signals {
            sample: Sample {
                replica_lag_s: lag,
                is_replica: true,
                ..Sample::default()
            },
            ..Signals::default()
        };
        let base = KnobValues::from([(Knob::PurgeThreads, 4), (Knob::PurgeBatchSize, 300)]);
        let cur = KnobValues::from([(Knob::PurgeThreads, current), (Knob::PurgeBatchSize, 300)]);
        p.decide(&PolicyInput {
            signals: &s,
            caps,
            current: &cur,
            baseline: &base,
        })
    }

    #[test]
    fn throttles_above_max_and_releases_below_resume() {
        let m = caps("10.11.19-MariaDB");
        let mut p = ReplicaLag::new(cfg());
        assert!(
            step(&mut p, &m, Some(30), 4).is_empty(),
            "below max: silent"
        );
        assert!(step(&mut p, &m, None, 4).is_empty(), "unknown: silent");
        let ps = step(&mut p, &m, Some(61), 4);
        assert_eq!(ps.len(), 1);
        assert_eq!(
            (ps[0].knob, ps[0].value, ps[0].intent),
            (Knob::PurgeThreads, 1, Intent::Act)
        );
        assert!(
            ps[0].reason.starts_with("replica lag 61 s"),
            "{}",
            ps[0].reason
        );
        // Between resume and max: still throttling (hysteresis), unknown holds too.
        assert_eq!(step(&mut p, &m, Some(30), 1)[0].intent, Intent::Act);
        assert_eq!(step(&mut p, &m, None, 1)[0].intent, Intent::Act);
        let ps = step(&mut p, &m, Some(5), 1);
        assert_eq!((ps[0].value, ps[0].intent), (4, Intent::Release));
        // Back at the baseline: silent again.
        assert!(step(&mut p, &m, Some(5), 4).is_empty());
        assert!(step(&mut p, &m, Some(5), 4).is_empty());
    }

    #[test]
    fn mysql_uses_smaller_purge_batches() {
        let o = caps("8.0.40");
        let mut p = ReplicaLag::new(cfg());
        let ps = step(&mut p, &o, Some(600), 4);
        assert_eq!(
            (ps[0].knob, ps[0].value),
            (Knob::PurgeBatchSize, 100),
            "{ps:?}"
        );
    }

    #[test]
    fn disabled_builds_nothing() {
        let id = PolicyId::unranked(ReplicaLag::NAME);
        assert!(ReplicaLag::build(&Config::default().policy.replica, id).is_none());
        assert!(ReplicaLag::build(&cfg(), id).is_some());
    }
}
