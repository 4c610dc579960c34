//! Undo guard (seed 002, WL#6965): undo tablespaces grow while history is long and
//! only shrink by truncation. Above `budget_bytes` (total undo size,
//! [`Sample::undo_bytes`]) the policy makes sure truncation can happen, and happens
//! rarely enough not to cost throughput:
//!
//! - it needs at least two undo tablespaces (one is truncated while the others serve
//!   transactions); the count is `undo_tablespaces` when configured, else what the
//!   server reports ([`Sample::undo_tablespaces`]). With fewer, or unknown, it does
//!   nothing: undo in the system tablespace never shrinks;
//! - innodb_max_undo_log_size (a tablespace larger than this is truncated) goes to
//!   budget / tablespaces, so that the total can come back under budget, but never
//!   below `min_truncate_bytes`: WL#6965 measured 6–15 % TPS loss with a 10 MiB
//!   threshold (MariaDB's default) and about none at 100 MiB;
//! - innodb_undo_log_truncate = ON, proposed only once that threshold is in effect, so
//!   truncation never runs with a threshold that is too small;
//! - when truncation still fires more than `max_truncations_per_hour` (MariaDB's
//!   `Innodb_undo_truncations`, over at least ten minutes), the threshold doubles, at
//!   most once per hour: WL#6965's regression went from 11 % to 4 % by making
//!   truncation rarer;
//! - below `release_below_pct` of the budget both knobs go back to their baseline.
//!
//! When a read view keeps undo from shrinking (purge cannot free what the view may
//! need, and a tablespace holding live undo is not truncated), the reasons say so and
//! name the transaction.
//!
//! [`Sample::undo_bytes`]: crate::server::sample::Sample::undo_bytes
//! [`Sample::undo_tablespaces`]: crate::server::sample::Sample::undo_tablespaces

use std::collections::VecDeque;
use std::time::Duration;

use serde::Deserialize;

use super::{Intent, Policy, PolicyId, PolicyInput, PolicyKind, Proposal};
use crate::config::check::{ConfigError, Section};
use crate::server::Knob;
use crate::signals::purge::estimate;

/// The truncation rate is judged over at least this much counter history.
const RATE_MIN_SPAN_MS: u64 = 10 * 60_000;
/// … and at most this much.
const RATE_SPAN_MS: u64 = 60 * 60_000;
/// Time between two raises of the threshold.
const RAISE_COOLDOWN_MS: u64 = 60 * 60_000;
/// A read view must be this old to be named as what keeps undo from shrinking.
const VIEW_AGE: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, Default)]
struct State {
    engaged: bool,
    /// (t_ms, Innodb_undo_truncations), at least 10 s apart, up to an hour back.
    truncations: VecDeque<(u64, u64)>,
    /// The threshold raised because truncation fired too often.
    raised: Option<u64>,
    raised_at_ms: Option<u64>,
}

fn mib(b: u64) -> String {
    format!("{} MiB", b >> 20)
}

/// The undo tablespace guard. See the module documentation.
pub struct Undo {
    /// Name and rank, as the registry gave them ([`PolicyId::unranked`] until then).
    id: PolicyId,
    cfg: UndoConfig,
    state: State,
}

impl Undo {
    pub fn new(cfg: UndoConfig) -> Self {
        Undo {
            id: PolicyId::unranked(<Self as PolicyKind>::NAME),
            cfg,
            state: State::default(),
        }
    }

    /// Records the truncation counter; returns (truncations, over ms) when the span
    /// is long enough to judge.
    fn truncation_rate(&mut self, t: u64, count: Option<u64>) -> Option<(u64, u64)> {
        let q = &mut self.state.truncations;
        let Some(c) = count else {
            q.clear();
            return None;
        };
        // A counter that went back (server restart) starts over.
        if q.back().is_some_and(|(_, last)| c < *last) {
            q.clear();
        }
        if q.back().is_none_or(|(last_t, _)| t >= last_t + 10_000) {
            q.push_back((t, c));
        }
        while q.len() > 2
            && q.front()
                .is_some_and(|(f, _)| t.saturating_sub(*f) > RATE_SPAN_MS)
        {
            q.pop_front();
        }
        let (t0, c0) = *q.front()?;
        let span = t.saturating_sub(t0);
        (span >= RATE_MIN_SPAN_MS).then(|| (c.saturating_sub(c0), span))
    }
}

impl Policy for Undo {
    fn id(&self) -> PolicyId {
        self.id
    }

    fn decide(&mut self, input: &PolicyInput<'_>) -> Vec<Proposal> {
        if !self.cfg.enabled {
            return Vec::new();
        }
        let s = input.signals;
        let t = s.t_ms;
        let rate = self.truncation_rate(t, s.sample.undo_truncations);
        // Unknown size: nothing to judge by.
        let Some(undo) = s.sample.undo_bytes else {
            return Vec::new();
        };
        let budget = self.cfg.budget_bytes;
        let release_below = (budget as f64 * self.cfg.release_below_pct / 100.0) as u64;
        self.state.engaged = if self.state.engaged {
            undo >= release_below
        } else {
            undo > budget
        };
        let caps = input.caps;
        let mut out = Vec::new();
        if !self.state.engaged {
            self.state.raised = None;
            for knob in [Knob::UndoLogTruncate, Knob::MaxUndoLogSize] {
                if let (true, Some(&base)) = (caps.settable(knob), input.baseline.get(&knob)) {
                    let reason = format!(
                        "undo tablespaces {} are within their budget {} (released below {}): \
                         {knob} back to its baseline {base}",
                        mib(undo),
                        mib(budget),
                        mib(release_below)
                    );
                    out.push(self.propose(knob, base, Intent::Release, reason));
                }
            }
            return out;
        }

        let spaces = match self.cfg.undo_tablespaces {
            0 => s.sample.undo_tablespaces,
            n => Some(n),
        };
        // Truncation needs one tablespace to take offline while another serves.
        let n = match spaces {
            Some(n) if n >= 2 => n,
            _ => return out,
        };
        let situation = format!(
            "undo tablespaces {} exceed their budget {} ({n} tablespaces)",
            mib(undo),
            mib(budget)
        );
        let blocked = estimate(s, VIEW_AGE)
            .and_then(|e| e.culprit)
            .map(|c| {
                format!(
                    "; undo cannot shrink while a read view is open (presumably held by {}): purge \
                     cannot free the undo it may need, and a tablespace with live undo is not \
                     truncated",
                    c.describe()
                )
            })
            .unwrap_or_default();

        // The threshold: the budget shared out, never below the floor, raised when
        // truncation fires too often.
        let floor = self.cfg.min_truncate_bytes;
        let mut target = (budget / n).max(floor);
        let mut why_size = format!(
            "budget / {n} tablespaces = {}, at least {} (WL#6965: 10 MiB cost 6–15 % TPS)",
            mib(budget / n),
            mib(floor)
        );
        let per_hour = self.cfg.max_truncations_per_hour;
        if let Some((count, span)) = rate {
            let hourly = count as f64 * 3_600_000.0 / span as f64;
            let cooled = self
                .state
                .raised_at_ms
                .is_none_or(|r| t.saturating_sub(r) >= RAISE_COOLDOWN_MS);
            if hourly > per_hour as f64 && cooled {
                let cur = input
                    .current
                    .get(&Knob::MaxUndoLogSize)
                    .copied()
                    .unwrap_or(target)
                    .max(self.state.raised.unwrap_or(0))
                    .max(target);
                self.state.raised = Some(cur.saturating_mul(2));
                self.state.raised_at_ms = Some(t);
            }
            if let Some(r) = self.state.raised {
                why_size = format!(
                    "{count} truncations in {} ({hourly:.1}/h, at most {per_hour}/h wanted) \
                     doubled it to {} (WL#6965: rarer truncation, less TPS loss)",
                    humantime::format_duration(Duration::from_secs(span / 1000)),
                    mib(r)
                );
            }
        }
        if let Some(r) = self.state.raised {
            target = target.max(r);
        }

        let cur_size = input.current.get(&Knob::MaxUndoLogSize).copied();
        if caps.settable(Knob::MaxUndoLogSize) {
            let reason = format!(
                "{situation}: innodb_max_undo_log_size {} ({why_size}){blocked}",
                mib(target)
            );
            out.push(self.propose(Knob::MaxUndoLogSize, target, Intent::Act, reason));
        }
        if caps.settable(Knob::UndoLogTruncate) {
            // Only with a sane threshold in effect: truncation at 10 MiB costs more
            // than the disk it saves.
            let sane = cur_size.is_some_and(|c| c >= floor);
            let cur_trunc = input.current.get(&Knob::UndoLogTruncate).copied();
            if sane || cur_trunc == Some(1) {
                let reason = format!(
                    "{situation}: innodb_undo_log_truncate ON, tablespaces above innodb_max_undo_log_size \
                     {} are truncated{blocked}",
                    mib(cur_size.unwrap_or(target))
                );
                out.push(self.propose(Knob::UndoLogTruncate, 1, Intent::Act, reason));
            }
        }
        out
    }

    fn reset(&mut self) {
        self.state = State::default();
    }
}

// ---- configuration: `[policy.undo]` -------------------------------------------

/// Undo tablespace guard (seed 002, `crate::policy::undo`).
#[derive(Debug, Clone, PartialEq)]
pub struct UndoConfig {
    pub enabled: bool,
    /// Total undo tablespace size above which truncation is made sure of.
    pub budget_bytes: u64,
    /// Below this share of the budget (%) the knobs go back to their baseline.
    pub release_below_pct: f64,
    /// innodb_max_undo_log_size is never proposed below this (WL#6965: 10 MiB cost
    /// 6–15 % TPS, 100 MiB about nothing).
    pub min_truncate_bytes: u64,
    /// More truncations than this per hour double innodb_max_undo_log_size.
    pub max_truncations_per_hour: u64,
    /// Number of undo tablespaces; 0 = as the server reports it.
    pub undo_tablespaces: u64,
}

impl Default for UndoConfig {
    fn default() -> Self {
        UndoConfig {
            enabled: true,
            budget_bytes: 1 << 30,
            release_below_pct: 50.0,
            min_truncate_bytes: 128 << 20,
            max_truncations_per_hour: 6,
            undo_tablespaces: 0,
        }
    }
}

/// `[policy.undo]` as the file says it.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawUndo {
    enabled: Option<bool>,
    budget_size: Option<String>,
    release_below_pct: Option<f64>,
    min_truncate_size: Option<String>,
    max_truncations_per_hour: Option<i64>,
    undo_tablespaces: Option<i64>,
}

impl PolicyKind for Undo {
    const NAME: &'static str = "undo";
    type Config = UndoConfig;
    type Raw = RawUndo;

    fn validate(r: RawUndo, s: &Section<'_>) -> Result<UndoConfig, ConfigError> {
        let d = &UndoConfig::default();
        Ok(UndoConfig {
            enabled: r.enabled.unwrap_or(d.enabled),
            budget_bytes: s.size(
                "budget_size",
                r.budget_size,
                d.budget_bytes,
                10 << 20,
                1 << 50,
            )?,
            release_below_pct: s.float(
                "release_below_pct",
                r.release_below_pct,
                d.release_below_pct,
                0.0,
                99.0,
            )?,
            min_truncate_bytes: s.size(
                "min_truncate_size",
                r.min_truncate_size,
                d.min_truncate_bytes,
                10 << 20,
                256 << 40,
            )?,
            max_truncations_per_hour: s.int(
                "max_truncations_per_hour",
                r.max_truncations_per_hour,
                d.max_truncations_per_hour,
                1,
                3600,
            )?,
            undo_tablespaces: s.int(
                "undo_tablespaces",
                r.undo_tablespaces,
                d.undo_tablespaces,
                0,
                127,
            )?,
        })
    }

    fn build(cfg: &UndoConfig, id: PolicyId) -> Option<Box<dyn Policy>> {
        super::boxed_if(
            cfg.enabled,
            Undo {
                id,
                ..Undo::new(cfg.clone())
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::testkit::{self, find};
    use crate::server::sample::{Sample, TrxInfo};
    use crate::server::{Capabilities, KnobValues};
    use crate::signals::Signals;
    use proptest::prelude::*;

    /// MariaDB's defaults: truncation OFF, 10 MiB threshold.
    fn baseline() -> KnobValues {
        KnobValues::from([(Knob::UndoLogTruncate, 0), (Knob::MaxUndoLogSize, 10 << 20)])
    }

    fn signals(
        t_s: u64,
        undo: Option<u64>,
        spaces: Option<u64>,
        truncations: Option<u64>,
    ) -> Signals {
        Signals {
            t_ms: t_s * 1000,
            history_len: Some(1_000),
            sample: Sample {
                t_ms: t_s * 1000,
                undo_bytes: undo,
                undo_tablespaces: spaces,
                undo_truncations: truncations,
                history_len: Some(1_000),
                ..Sample::default()
            },
            ..Signals::default()
        }
    }

    fn decide(u: &mut Undo, caps: &Capabilities, cur: &KnobValues, s: &Signals) -> Vec<Proposal> {
        testkit::propose(u, caps, cur, &baseline(), s)
    }

    #[test]
    fn over_budget_sets_a_sane_threshold_then_turns_truncation_on() {
        let mut u = Undo::new(UndoConfig::default());
        let caps = testkit::mariadb();
        let s = signals(1, Some(3 << 30), Some(2), Some(0));
        let ps = decide(&mut u, &caps, &baseline(), &s);
        let size = find(&ps, Knob::MaxUndoLogSize).unwrap();
        // 1 GiB over 2 tablespaces.
        assert_eq!(
            (size.value, size.intent),
            (512 << 20, Intent::Act),
            "{}",
            size.reason
        );
        assert!(
            size.reason.starts_with(
                "undo tablespaces 3072 MiB exceed their budget 1024 MiB (2 tablespaces)"
            ),
            "{}",
            size.reason
        );
        // Not yet: the 10 MiB threshold is still in effect.
        assert!(find(&ps, Knob::UndoLogTruncate).is_none());
        let mut cur = baseline();
        cur.insert(Knob::MaxUndoLogSize, 512 << 20);
        let ps = decide(
            &mut u,
            &caps,
            &cur,
            &signals(2, Some(3 << 30), Some(2), Some(0)),
        );
        let tr = find(&ps, Knob::UndoLogTruncate).unwrap();
        assert_eq!((tr.value, tr.intent), (1, Intent::Act), "{}", tr.reason);
        // Many tablespaces: never below the floor.
        let mut u = Undo::new(UndoConfig::default());
        let ps = decide(
            &mut u,
            &caps,
            &baseline(),
            &signals(1, Some(3 << 30), Some(64), None),
        );
        assert_eq!(find(&ps, Knob::MaxUndoLogSize).unwrap().value, 128 << 20);
    }

    #[test]
    fn releases_below_half_the_budget_with_hysteresis() {
        let mut u = Undo::new(UndoConfig::default());
        let caps = testkit::mariadb();
        decide(
            &mut u,
            &caps,
            &baseline(),
            &signals(1, Some(2 << 30), Some(2), None),
        );
        // 800 MiB: under budget but above half of it: still engaged.
        let ps = decide(
            &mut u,
            &caps,
            &baseline(),
            &signals(2, Some(800 << 20), Some(2), None),
        );
        assert_eq!(find(&ps, Knob::MaxUndoLogSize).unwrap().intent, Intent::Act);
        let ps = decide(
            &mut u,
            &caps,
            &baseline(),
            &signals(3, Some(20 << 20), Some(2), None),
        );
        for knob in [Knob::UndoLogTruncate, Knob::MaxUndoLogSize] {
            let p = find(&ps, knob).unwrap();
            assert_eq!(p.intent, Intent::Release, "{}", p.reason);
            assert_eq!(Some(&p.value), baseline().get(&knob));
        }
    }

    #[test]
    fn needs_two_tablespaces_and_a_known_size() {
        let caps = testkit::mariadb();
        for spaces in [None, Some(0), Some(1)] {
            let mut u = Undo::new(UndoConfig::default());
            let ps = decide(
                &mut u,
                &caps,
                &baseline(),
                &signals(1, Some(9 << 30), spaces, None),
            );
            assert!(ps.is_empty(), "{spaces:?}: {ps:?}");
        }
        // Configured count overrides what the server says.
        let mut u = Undo::new(UndoConfig {
            undo_tablespaces: 4,
            ..UndoConfig::default()
        });
        let ps = decide(
            &mut u,
            &caps,
            &baseline(),
            &signals(1, Some(9 << 30), None, None),
        );
        assert_eq!(find(&ps, Knob::MaxUndoLogSize).unwrap().value, 256 << 20);
        let mut u = Undo::new(UndoConfig::default());
        assert!(decide(&mut u, &caps, &baseline(), &signals(1, None, Some(2), None)).is_empty());
        let mut u = Undo::new(UndoConfig {
            enabled: false,
            ..UndoConfig::default()
        });
        assert!(decide(
            &mut u,
            &caps,
            &baseline(),
            &signals(1, Some(9 << 30), Some(2), None)
        )
        .is_empty());
    }

    #[test]
    fn truncating_too_often_doubles_the_threshold_at_most_hourly() {
        let mut u = Undo::new(UndoConfig::default());
        let caps = testkit::mariadb();
        let mut cur = baseline();
        cur.insert(Knob::MaxUndoLogSize, 512 << 20);
        cur.insert(Knob::UndoLogTruncate, 1);
        let mut sizes = Vec::new();
        // One truncation a minute for two hours.
        for t in 0..=7200u64 {
            let s = signals(t, Some(2 << 30), Some(2), Some(t / 60));
            let ps = decide(&mut u, &caps, &cur, &s);
            let v = find(&ps, Knob::MaxUndoLogSize).unwrap();
            if v.value != cur[&Knob::MaxUndoLogSize] {
                sizes.push((t, v.value));
                assert!(v.reason.contains("truncations in"), "{}", v.reason);
                cur.insert(Knob::MaxUndoLogSize, v.value);
            }
        }
        assert_eq!(sizes, vec![(600, 1 << 30), (4200, 2 << 30)]);
    }

    #[test]
    fn a_blocking_read_view_is_named() {
        let mut u = Undo::new(UndoConfig::default());
        let mut s = signals(1, Some(3 << 30), Some(2), None);
        s.sample.oldest_trx = Some(TrxInfo {
            trx_id: "1234".into(),
            thread_id: Some(56),
            age_s: 312,
            user: Some("app".into()),
            host: Some("10.0.0.5".into()),
            state: None,
            isolation: None,
            command: None,
            holds_read_view: true,
            active_count: None,
        });
        let ps = decide(&mut u, &testkit::mariadb(), &baseline(), &s);
        let r = &find(&ps, Knob::MaxUndoLogSize).unwrap().reason;
        assert!(
            r.contains("undo cannot shrink while a read view is open (presumably held by trx 1234 (thread 56, app@10.0.0.5) open 312 s)"),
            "{r}"
        );
    }

    proptest! {
        #[test]
        fn proposals_stay_in_bounds(
            seq in prop::collection::vec((0u64..(64u64 << 30), 0u64..200), 1..100),
            spaces in 0u64..16,
            cur_size in (10u64 << 20)..(8u64 << 30),
            cur_trunc in 0u64..=1,
        ) {
            let mut u = Undo::new(UndoConfig::default());
            let caps = testkit::mysql();
            let mut cur = baseline();
            cur.insert(Knob::MaxUndoLogSize, cur_size);
            cur.insert(Knob::UndoLogTruncate, cur_trunc);
            for (i, (undo, trunc)) in seq.into_iter().enumerate() {
                let s = signals(i as u64 * 60, Some(undo), Some(spaces), Some(trunc * i as u64));
                let ps = decide(&mut u, &caps, &cur, &s);
                for p in &ps {
                    match p.knob {
                        Knob::UndoLogTruncate => {
                            prop_assert!(p.value <= 1);
                            if p.value == 1 {
                                prop_assert!(spaces >= 2);
                                prop_assert!(cur_size >= UndoConfig::default().min_truncate_bytes || cur_trunc == 1);
                            }
                        }
                        Knob::MaxUndoLogSize => {
                            if p.intent == Intent::Act {
                                prop_assert!(p.value >= UndoConfig::default().min_truncate_bytes);
                            }
                        }
                        other => prop_assert!(false, "unexpected {}", other),
                    }
                }
            }
        }
    }
}
