//! The guard: the last word before the actuator. It owns the safety rules that hold
//! whatever a policy proposes — the configured and server bounds per knob, the largest
//! step per SET, the minimum dwell between two changes of a knob, the global limit on
//! SETs per rolling minute — and the set of knobs the operator has taken over.
//!
//! It is pure bookkeeping: no SQL, no clock. Time comes in as the monotonic `t_ms` of
//! the tick's signals, so the same rules hold against a live server, the simulator and
//! synthetic test sequences.
//!
//! Checks run in a fixed order, and the first that refuses decides the verdict:
//! operator-owned → `manage = false` → not settable on this server → clip into the
//! effective bounds → step limit → no change → dwell → rate limit. A policy's retract
//! of its own last change ([`Intent::Retract`]) back to the value before it is not held by
//! the dwell, once per change.
//!
//! Bounds win over the step limit: a value outside the effective bounds is never
//! applied. When the value in effect is itself outside them (a DBA's baseline), the
//! guard still moves by at most `max_step` if that lands inside the bounds; otherwise
//! it moves to the nearest bound in one larger step.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use serde::Serialize;

use crate::config::KnobLimits;
use crate::policy::Intent;
use crate::server::{Knob, KnobCap};

/// The rate limit's rolling window.
const RATE_WINDOW_MS: u64 = 60_000;

/// What the guard says about one proposed value.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Apply `value` (maybe clipped or step-limited from the proposal; `notes` say how,
    /// in words with numbers).
    Apply { value: u64, notes: Vec<String> },
    /// Nothing to do: the (clipped, step-limited) value equals the current value.
    NoChange { notes: Vec<String> },
    /// Refused, with the reason in words.
    Reject { reason: String, kind: RejectKind },
}

impl Verdict {
    /// The value to apply, if any.
    pub fn value(&self) -> Option<u64> {
        match self {
            Verdict::Apply { value, .. } => Some(*value),
            _ => None,
        }
    }

    fn reject(kind: RejectKind, reason: String) -> Verdict {
        Verdict::Reject { reason, kind }
    }
}

/// Why a proposal was refused, for the audit log and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RejectKind {
    /// The operator changed the knob behind innopilot's back; it is theirs until released.
    OperatorOwned,
    /// Configuration says innopilot may not change this knob.
    NotManaged,
    /// The server cannot change it, or no value satisfies both the configured and the
    /// server's range.
    NotSettable,
    /// The knob changed less than `min_dwell` ago.
    Dwell,
    /// `max_sets_per_minute` SETs already happened in the last 60 s.
    RateLimit,
}

/// A knob the operator took over: someone set it to a value innopilot did not set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OperatorOwned {
    /// Monotonic time when the foreign change was first noticed.
    pub since_ms: u64,
    /// The value last found on the server.
    pub seen: u64,
    /// The value innopilot expected then (its last SET, or the baseline).
    pub expected: u64,
}

/// The effective bounds for a knob on this server: the intersection of the configured
/// range and the server's own. `None` when they do not overlap.
pub fn effective_bounds(limits: &KnobLimits, cap: &KnobCap) -> Option<(u64, u64)> {
    let lo = limits.min.max(cap.server_min.unwrap_or(0));
    let hi = limits.max.min(cap.server_max.unwrap_or(u64::MAX));
    (lo <= hi).then_some((lo, hi))
}

/// Moves from `current` toward `target` by at most `max_step`. Cannot overflow: the
/// distance moved never exceeds the distance between the two.
fn step_toward(current: u64, target: u64, max_step: u64) -> u64 {
    if target >= current {
        current + (target - current).min(max_step)
    } else {
        current - (current - target).min(max_step)
    }
}

fn secs(ms: u64) -> String {
    format!("{:.1} s", ms as f64 / 1000.0)
}

/// The value a knob had before innopilot's last change of it, and when the change
/// before that one came.
#[derive(Debug, Clone, Copy)]
struct UndoPoint {
    value: u64,
    prior_change_ms: Option<u64>,
}

/// Safety rules between the arbiter and the actuator, and the state they need.
#[derive(Debug, Clone)]
pub struct Guard {
    limits: BTreeMap<Knob, KnobLimits>,
    max_sets_per_minute: u32,
    /// When each knob was last changed by innopilot (monotonic ms).
    last_change_ms: BTreeMap<Knob, u64>,
    /// What innopilot's last change of each knob may be undone to by a retract.
    undo_point: BTreeMap<Knob, UndoPoint>,
    /// Times of SETs in the rate window, all knobs together.
    recent_sets_ms: VecDeque<u64>,
    operator: BTreeMap<Knob, OperatorOwned>,
}

impl Guard {
    pub fn new(limits: BTreeMap<Knob, KnobLimits>, max_sets_per_minute: u32) -> Self {
        Guard {
            limits,
            max_sets_per_minute,
            last_change_ms: BTreeMap::new(),
            undo_point: BTreeMap::new(),
            recent_sets_ms: VecDeque::new(),
            operator: BTreeMap::new(),
        }
    }

    /// Replaces the limits (config reload). Dwell and rate history are kept, so a
    /// reload can never be used to burst past either.
    pub fn set_limits(&mut self, limits: BTreeMap<Knob, KnobLimits>, max_sets_per_minute: u32) {
        self.limits = limits;
        self.max_sets_per_minute = max_sets_per_minute;
    }

    pub fn limits(&self, knob: Knob) -> Option<&KnobLimits> {
        self.limits.get(&knob)
    }

    pub fn max_sets_per_minute(&self) -> u32 {
        self.max_sets_per_minute
    }

    /// When innopilot last changed `knob` (monotonic ms).
    pub fn last_change_ms(&self, knob: Knob) -> Option<u64> {
        self.last_change_ms.get(&knob).copied()
    }

    /// SETs in the 60 s up to `now_ms`. A recorded time later than `now_ms` (which a
    /// monotonic clock never gives) counts as recent, erring on the side of fewer SETs.
    pub fn sets_in_last_minute(&self, now_ms: u64) -> usize {
        self.recent_sets_ms
            .iter()
            .filter(|t| now_ms.saturating_sub(**t) < RATE_WINDOW_MS)
            .count()
    }

    /// Reviews one proposed value. `now_ms` is the monotonic time from Signals (never
    /// read a clock). `current` is the value in effect; `cap` is what the server lets
    /// innopilot do with the knob (`None` if it was not probed).
    ///
    /// `intent` is the winning proposal's. A policy's retract of its own last change
    /// ([`Intent::Retract`]) is held by every rule except that a value equal to the one
    /// before innopilot's last change of the knob is not held by `min_dwell`. The dwell
    /// damps flapping; an undo that users are paying for now should not wait for it
    /// (the sixty-fifth real-server run's e: a sixth purge thread, users waiting for
    /// free pages the next second, TPS at 0.05–0.38 × the median for four seconds, and
    /// the take-back refused for `min_dwell`). Each change allows at most one such
    /// undo, which is itself a change the dwell then holds.
    pub fn review(
        &self,
        now_ms: u64,
        knob: Knob,
        proposed: u64,
        current: u64,
        cap: Option<&KnobCap>,
        intent: Intent,
    ) -> Verdict {
        if let Some(o) = self.operator.get(&knob) {
            return Verdict::reject(
                RejectKind::OperatorOwned,
                format!(
                    "{knob} was set to {} outside innopilot (expected {}) {} ago; \
                     left alone until released",
                    o.seen,
                    o.expected,
                    secs(now_ms.saturating_sub(o.since_ms)),
                ),
            );
        }
        let Some(lim) = self.limits.get(&knob) else {
            return Verdict::reject(
                RejectKind::NotManaged,
                format!("no limits configured for {knob}"),
            );
        };
        if !lim.manage {
            return Verdict::reject(
                RejectKind::NotManaged,
                format!("knobs.{knob}.manage = false"),
            );
        }
        let cap = match cap {
            None => {
                return Verdict::reject(
                    RejectKind::NotSettable,
                    format!("no capability information for {knob} (server not probed)"),
                )
            }
            Some(c) if !c.settable() => {
                return Verdict::reject(
                    RejectKind::NotSettable,
                    format!("{knob} cannot be changed on this server: {}", c.note),
                )
            }
            Some(c) => c,
        };
        let Some((lo, hi)) = effective_bounds(lim, cap) else {
            let show = |v: Option<u64>| v.map_or_else(|| "?".to_string(), |v| v.to_string());
            return Verdict::reject(
                RejectKind::NotSettable,
                format!(
                    "no value satisfies both the configured range [{}, {}] \
                     (knobs.{knob}.min/max) and the server's range [{}, {}]",
                    lim.min,
                    lim.max,
                    show(cap.server_min),
                    show(cap.server_max),
                ),
            );
        };

        let mut notes = Vec::new();
        let target = proposed.clamp(lo, hi);
        if target != proposed {
            // Name the bound that bit, so the operator knows whether config or the
            // server is the one to change.
            let (side, bound, from_config) = if proposed > hi {
                ("above the upper", hi, lim.max == hi)
            } else {
                ("below the lower", lo, lim.min == lo)
            };
            let source = if from_config {
                format!("knobs.{knob}.{}", if proposed > hi { "max" } else { "min" })
            } else {
                "the server's own limit".to_string()
            };
            notes.push(format!(
                "clipped: proposed {proposed} is {side} bound {bound} ({source})"
            ));
        }

        let stepped = step_toward(current, target, lim.max_step);
        // Bounds win over the step limit: only reachable when `current` is outside the
        // bounds, since `target` is inside and a step from inside toward it stays inside.
        let value = stepped.clamp(lo, hi);
        if value != stepped {
            notes.push(format!(
                "current {current} is outside the bounds [{lo}, {hi}]: moving {current} → \
                 {value}, the nearest bound, in one step larger than max_step {} (wanted \
                 {target}); a value outside the bounds is never applied",
                lim.max_step
            ));
        } else if value != target {
            notes.push(format!(
                "step limited: wanted {target}, moving {current} → {value} (max_step {})",
                lim.max_step
            ));
        }

        if value == current {
            return Verdict::NoChange { notes };
        }

        if let Some(&last) = self.last_change_ms.get(&knob) {
            let elapsed = now_ms.saturating_sub(last);
            let held = |ms: u64| Duration::from_millis(ms) < lim.min_dwell;
            if held(elapsed) {
                // Only a change that itself waited its dwell can be undone early: an
                // early undo cannot be undone early in turn, so a knob changes at most
                // twice within one dwell.
                let undo = intent == Intent::Retract
                    && self.undo_point.get(&knob).is_some_and(|u| {
                        u.value == value
                            && u.prior_change_ms
                                .is_none_or(|p| !held(last.saturating_sub(p)))
                    });
                if !undo {
                    return Verdict::reject(
                        RejectKind::Dwell,
                        format!(
                            "changed {} ago; min_dwell {} (would move {current} → {value})",
                            secs(elapsed),
                            humantime::format_duration(lim.min_dwell),
                        ),
                    );
                }
                notes.push(format!(
                    "a retract: back to {value}, the value before innopilot's change {} \
                     ago, not held by min_dwell {}",
                    secs(elapsed),
                    humantime::format_duration(lim.min_dwell),
                ));
            }
        }

        let in_window = self.sets_in_last_minute(now_ms);
        if in_window >= self.max_sets_per_minute as usize {
            return Verdict::reject(
                RejectKind::RateLimit,
                format!(
                    "{in_window} SETs in the last 60 s; max_sets_per_minute {}; {} \
                     (would move {current} → {value})",
                    self.max_sets_per_minute,
                    self.next_slot(now_ms),
                ),
            );
        }

        Verdict::Apply { value, notes }
    }

    /// When the rate limit lets the next SET through, in words.
    fn next_slot(&self, now_ms: u64) -> String {
        let max = self.max_sets_per_minute as usize;
        if max == 0 {
            return "no SET is ever allowed".to_string();
        }
        let mut times: Vec<u64> = self
            .recent_sets_ms
            .iter()
            .copied()
            .filter(|t| now_ms.saturating_sub(*t) < RATE_WINDOW_MS)
            .collect();
        times.sort_unstable();
        // A slot frees once all but max − 1 of the SETs in the window have aged out.
        let Some(t) = times.len().checked_sub(max).map(|i| times[i]) else {
            return "next slot now".to_string();
        };
        let wait = t.saturating_add(RATE_WINDOW_MS).saturating_sub(now_ms);
        format!("next slot in {}", secs(wait))
    }

    /// Called when a value was applied (or, in dry-run, would have been) over `from`:
    /// starts the dwell, counts toward the rate limit.
    pub fn record_applied(&mut self, now_ms: u64, knob: Knob, from: u64) {
        let prior_change_ms = self.last_change_ms.insert(knob, now_ms);
        self.undo_point.insert(
            knob,
            UndoPoint {
                value: from,
                prior_change_ms,
            },
        );
        // Prune here rather than in `review`, which only reads.
        self.recent_sets_ms
            .retain(|t| now_ms.saturating_sub(*t) < RATE_WINDOW_MS);
        self.recent_sets_ms.push_back(now_ms);
    }

    /// Hands `knob` to the operator: `seen` was found on the server where innopilot
    /// expected `expected`. Marking an already owned knob only updates `seen`: the time
    /// and the expectation of the first takeover are what the operator needs to know.
    pub fn mark_operator_owned(&mut self, knob: Knob, now_ms: u64, seen: u64, expected: u64) {
        self.operator
            .entry(knob)
            .and_modify(|o| o.seen = seen)
            .or_insert(OperatorOwned {
                since_ms: now_ms,
                seen,
                expected,
            });
    }

    /// Hands an operator-owned knob back to innopilot. Returns whether it was owned.
    /// Dwell history is kept: the knob's last change by innopilot still counts.
    pub fn release(&mut self, knob: Knob) -> bool {
        self.operator.remove(&knob).is_some()
    }

    pub fn operator_owned(&self) -> impl Iterator<Item = (Knob, &OperatorOwned)> {
        self.operator.iter().map(|(k, o)| (*k, o))
    }

    pub fn is_operator_owned(&self, knob: Knob) -> bool {
        self.operator.contains_key(&knob)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::Dynamic;
    use proptest::prelude::*;

    const K: Knob = Knob::PurgeThreads;

    fn lim(min: u64, max: u64, max_step: u64, dwell_s: u64) -> KnobLimits {
        KnobLimits {
            manage: true,
            min,
            max,
            max_step,
            min_dwell: Duration::from_secs(dwell_s),
        }
    }

    fn cap(server_min: Option<u64>, server_max: Option<u64>) -> KnobCap {
        KnobCap {
            exists: true,
            dynamic: Dynamic::Yes,
            server_min,
            server_max,
            note: "dynamic".into(),
        }
    }

    fn guard(l: KnobLimits, max_sets: u32) -> Guard {
        let limits = Knob::ALL.iter().map(|k| (*k, l)).collect();
        Guard::new(limits, max_sets)
    }

    fn reject_kind(v: &Verdict) -> Option<RejectKind> {
        match v {
            Verdict::Reject { kind, .. } => Some(*kind),
            _ => None,
        }
    }

    fn reason(v: &Verdict) -> &str {
        match v {
            Verdict::Reject { reason, .. } => reason,
            other => panic!("expected a rejection, got {other:?}"),
        }
    }

    #[test]
    fn plain_apply_has_no_notes() {
        let g = guard(lim(1, 32, 4, 5), 30);
        let c = cap(Some(1), Some(32));
        assert_eq!(
            g.review(0, K, 6, 4, Some(&c), Intent::Act),
            Verdict::Apply {
                value: 6,
                notes: vec![]
            }
        );
    }

    #[test]
    fn operator_owned_comes_first_and_release_hands_back() {
        let mut g = guard(
            KnobLimits {
                manage: false,
                ..lim(1, 32, 4, 5)
            },
            30,
        );
        g.mark_operator_owned(K, 1_000, 16, 4);
        g.mark_operator_owned(K, 2_000, 20, 5);
        let v = g.review(4_000, K, 6, 4, None, Intent::Act);
        assert_eq!(reject_kind(&v), Some(RejectKind::OperatorOwned));
        let r = reason(&v);
        assert!(
            r.contains("20") && r.contains("expected 4") && r.contains("3.0 s ago"),
            "{r}"
        );
        assert!(g.is_operator_owned(K));
        assert_eq!(g.operator_owned().count(), 1);
        assert!(g.release(K));
        assert!(!g.release(K));
        assert!(!g.is_operator_owned(K));
        // Now the next check (manage = false) decides.
        let v = g.review(4_000, K, 6, 4, None, Intent::Act);
        assert_eq!(reject_kind(&v), Some(RejectKind::NotManaged));
    }

    #[test]
    fn not_managed() {
        let mut l = lim(1, 32, 4, 5);
        l.manage = false;
        let g = guard(l, 30);
        let v = g.review(0, K, 6, 4, Some(&cap(None, None)), Intent::Act);
        assert_eq!(reject_kind(&v), Some(RejectKind::NotManaged));
        assert!(reason(&v).contains("knobs.innodb_purge_threads.manage = false"));
        let g = Guard::new(BTreeMap::new(), 30);
        let v = g.review(0, K, 6, 4, Some(&cap(None, None)), Intent::Act);
        assert_eq!(reject_kind(&v), Some(RejectKind::NotManaged));
    }

    #[test]
    fn not_settable_names_the_cap_note() {
        let g = guard(lim(1, 32, 4, 5), 30);
        let v = g.review(0, K, 6, 4, None, Intent::Act);
        assert_eq!(reject_kind(&v), Some(RejectKind::NotSettable));
        let mut c = cap(None, None);
        c.dynamic = Dynamic::No;
        c.note = "read-only before MariaDB 10.7.1".into();
        let v = g.review(0, K, 6, 4, Some(&c), Intent::Act);
        assert_eq!(reject_kind(&v), Some(RejectKind::NotSettable));
        assert!(reason(&v).contains("read-only before MariaDB 10.7.1"));
        let mut c = cap(None, None);
        c.exists = false;
        assert_eq!(
            reject_kind(&g.review(0, K, 6, 4, Some(&c), Intent::Act)),
            Some(RejectKind::NotSettable)
        );
    }

    #[test]
    fn disjoint_ranges_are_not_settable() {
        let g = guard(lim(64, 128, 4, 5), 30);
        let v = g.review(0, K, 100, 100, Some(&cap(Some(1), Some(32))), Intent::Act);
        assert_eq!(reject_kind(&v), Some(RejectKind::NotSettable));
        let r = reason(&v);
        assert!(r.contains("[64, 128]") && r.contains("[1, 32]"), "{r}");
    }

    #[test]
    fn clipping_names_the_bound_that_bit() {
        let g = guard(lim(2, 16, 100, 5), 30);
        let v = g.review(0, K, 40, 8, Some(&cap(Some(1), Some(32))), Intent::Act);
        assert_eq!(
            v,
            Verdict::Apply {
                value: 16,
                notes: vec!["clipped: proposed 40 is above the upper bound 16 \
                     (knobs.innodb_purge_threads.max)"
                    .into()]
            }
        );
        let v = g.review(0, K, 40, 8, Some(&cap(Some(1), Some(12))), Intent::Act);
        assert_eq!(v.value(), Some(12));
        let Verdict::Apply { notes, .. } = &v else {
            unreachable!()
        };
        assert!(notes[0].contains("the server's own limit"), "{notes:?}");
        let v = g.review(0, K, 0, 8, Some(&cap(Some(1), Some(32))), Intent::Act);
        assert_eq!(v.value(), Some(2));
        let Verdict::Apply { notes, .. } = &v else {
            unreachable!()
        };
        assert!(notes[0].contains("below the lower bound 2"), "{notes:?}");
    }

    #[test]
    fn step_limit_note() {
        let g = guard(lim(1, 32, 2, 5), 30);
        let c = cap(Some(1), Some(32));
        assert_eq!(
            g.review(0, K, 10, 4, Some(&c), Intent::Act),
            Verdict::Apply {
                value: 6,
                notes: vec!["step limited: wanted 10, moving 4 → 6 (max_step 2)".into()]
            }
        );
        assert_eq!(g.review(0, K, 1, 4, Some(&c), Intent::Act).value(), Some(2));
    }

    #[test]
    fn bounds_win_over_the_step_limit() {
        let g = guard(lim(1, 8, 1, 5), 30);
        let c = cap(Some(1), Some(32));
        // The DBA's baseline is 20, above the configured max of 8.
        let v = g.review(0, K, 4, 20, Some(&c), Intent::Act);
        assert_eq!(v.value(), Some(8));
        let Verdict::Apply { notes, .. } = &v else {
            unreachable!()
        };
        assert!(notes[0].contains("outside the bounds [1, 8]"), "{notes:?}");
        // Even a proposal to stay put cannot keep an out-of-bounds value.
        assert_eq!(
            g.review(0, K, 20, 20, Some(&c), Intent::Act).value(),
            Some(8)
        );
        // Where max_step reaches into the bounds, it is still honoured.
        let g = guard(lim(1, 8, 15, 5), 30);
        assert_eq!(
            g.review(0, K, 2, 20, Some(&c), Intent::Act).value(),
            Some(5)
        );
    }

    #[test]
    fn no_change_keeps_notes_and_skips_dwell_and_rate() {
        let mut g = guard(lim(1, 8, 1, 5), 1);
        let c = cap(Some(1), Some(32));
        g.record_applied(0, K, 4);
        assert_eq!(
            g.review(100, K, 8, 8, Some(&c), Intent::Act),
            Verdict::NoChange { notes: vec![] }
        );
        let v = g.review(100, K, 30, 8, Some(&c), Intent::Act);
        let Verdict::NoChange { notes } = v else {
            panic!("{v:?}")
        };
        assert!(notes[0].starts_with("clipped: proposed 30"), "{notes:?}");
    }

    #[test]
    fn dwell() {
        let mut g = guard(lim(1, 32, 4, 5), 30);
        let c = cap(Some(1), Some(32));
        g.record_applied(10_000, K, 4);
        let v = g.review(13_000, K, 6, 4, Some(&c), Intent::Act);
        assert_eq!(reject_kind(&v), Some(RejectKind::Dwell));
        assert!(
            reason(&v).starts_with("changed 3.0 s ago; min_dwell 5s"),
            "{}",
            reason(&v)
        );
        // Other knobs have their own dwell.
        assert_eq!(
            g.review(13_000, Knob::IoCapacity, 6, 4, Some(&c), Intent::Act)
                .value(),
            Some(6)
        );
        assert_eq!(
            g.review(15_000, K, 6, 4, Some(&c), Intent::Act).value(),
            Some(6)
        );
    }

    /// A policy's retract of its own last change is not held by the dwell when it puts
    /// the knob back to the value before that change, once: the undo itself is held,
    /// and so is a retract to any other value, or of a change that skipped the dwell.
    /// The rate limit still holds.
    #[test]
    fn a_retract_skips_the_dwell_once() {
        let mut g = guard(lim(1, 32, 4, 5), 30);
        let c = cap(Some(1), Some(32));
        g.record_applied(0, K, 5);
        g.record_applied(10_000, K, 4);
        let v = g.review(11_000, K, 4, 6, Some(&c), Intent::Retract);
        let Verdict::Apply { value: 4, notes } = v else {
            panic!("{v:?}")
        };
        assert!(
            notes[0]
                .starts_with("a retract: back to 4, the value before innopilot's change 1.0 s ago"),
            "{notes:?}"
        );
        assert_eq!(
            reject_kind(&g.review(11_000, K, 4, 6, Some(&c), Intent::Act)),
            Some(RejectKind::Dwell)
        );
        assert_eq!(
            reject_kind(&g.review(11_000, K, 5, 6, Some(&c), Intent::Retract)),
            Some(RejectKind::Dwell)
        );
        // Undone: the undo is a change like any other, and cannot be undone early.
        g.record_applied(11_000, K, 6);
        assert_eq!(
            reject_kind(&g.review(12_000, K, 6, 4, Some(&c), Intent::Retract)),
            Some(RejectKind::Dwell)
        );
        assert_eq!(
            g.review(16_000, K, 6, 4, Some(&c), Intent::Act).value(),
            Some(6)
        );
        // The rate limit holds for a retract too.
        let mut g = guard(lim(1, 32, 4, 5), 1);
        g.record_applied(10_000, K, 4);
        assert_eq!(
            reject_kind(&g.review(11_000, K, 4, 6, Some(&c), Intent::Retract)),
            Some(RejectKind::RateLimit)
        );
    }

    #[test]
    fn rate_limit_over_a_rolling_minute() {
        let mut g = guard(lim(1, 32, 4, 0), 2);
        let c = cap(Some(1), Some(32));
        g.record_applied(0, Knob::IoCapacity, 4);
        g.record_applied(20_000, Knob::PurgeBatchSize, 4);
        let v = g.review(30_000, K, 6, 4, Some(&c), Intent::Act);
        assert_eq!(reject_kind(&v), Some(RejectKind::RateLimit));
        let r = reason(&v);
        assert!(
            r.contains("2 SETs") && r.contains("next slot in 30.0 s"),
            "{r}"
        );
        assert_eq!(g.sets_in_last_minute(59_999), 2);
        assert_eq!(
            g.review(60_000, K, 6, 4, Some(&c), Intent::Act).value(),
            Some(6)
        );
    }

    #[test]
    fn reload_keeps_history() {
        let mut g = guard(lim(1, 32, 4, 5), 1);
        let c = cap(Some(1), Some(32));
        g.record_applied(0, K, 4);
        let limits = Knob::ALL.iter().map(|k| (*k, lim(1, 32, 4, 0))).collect();
        g.set_limits(limits, 1);
        assert_eq!(g.max_sets_per_minute(), 1);
        assert_eq!(g.limits(K).map(|l| l.min_dwell), Some(Duration::ZERO));
        let v = g.review(1_000, K, 6, 4, Some(&c), Intent::Act);
        assert_eq!(reject_kind(&v), Some(RejectKind::RateLimit));
    }

    #[test]
    fn extremes_do_not_overflow() {
        let g = guard(lim(0, u64::MAX, u64::MAX, 0), 30);
        let c = cap(None, None);
        assert_eq!(
            g.review(u64::MAX, K, u64::MAX, 0, Some(&c), Intent::Act)
                .value(),
            Some(u64::MAX)
        );
        assert_eq!(
            g.review(0, K, 0, u64::MAX, Some(&c), Intent::Act).value(),
            Some(0)
        );
        let g = guard(lim(0, u64::MAX, 1, 0), 30);
        assert_eq!(
            g.review(0, K, u64::MAX, u64::MAX - 1, Some(&c), Intent::Act)
                .value(),
            Some(u64::MAX)
        );
    }

    #[test]
    fn serializes_in_snake_case() {
        let v = Verdict::Reject {
            reason: "r".into(),
            kind: RejectKind::RateLimit,
        };
        assert_eq!(
            serde_json::to_string(&v).unwrap(),
            r#"{"reject":{"reason":"r","kind":"rate_limit"}}"#
        );
    }

    /// Values near both ends of u64 and small ones, so edges are hit often.
    fn any_value() -> impl Strategy<Value = u64> {
        prop_oneof![0u64..64, any::<u64>(), (u64::MAX - 64)..=u64::MAX,]
    }

    proptest! {
        #[test]
        fn apply_stays_in_bounds_and_within_step(
            a in any_value(),
            b in any_value(),
            max_step in any_value(),
            smin in proptest::option::of(any_value()),
            smax in proptest::option::of(any_value()),
            current in any_value(),
            proposed in any_value(),
        ) {
            let l = lim(a.min(b), a.max(b), max_step, 0);
            let c = cap(smin, smax);
            let g = guard(l, 30);
            let v = g.review(0, K, proposed, current, Some(&c), Intent::Act);
            match effective_bounds(&l, &c) {
                None => prop_assert_eq!(reject_kind(&v), Some(RejectKind::NotSettable)),
                Some((lo, hi)) => {
                    let inside = (lo..=hi).contains(&current);
                    match &v {
                        Verdict::Apply { value, .. } => {
                            prop_assert!((lo..=hi).contains(value));
                            prop_assert_ne!(*value, current);
                            if inside {
                                prop_assert!(value.abs_diff(current) <= max_step);
                                // Never past the (clipped) target.
                                let target = proposed.clamp(lo, hi);
                                prop_assert!(value.abs_diff(target) < current.abs_diff(target));
                            }
                        }
                        Verdict::NoChange { .. } => prop_assert!(inside),
                        Verdict::Reject { .. } => prop_assert!(false, "unexpected {:?}", v),
                    }
                }
            }
        }

        #[test]
        fn rate_and_dwell_hold_over_random_sequences(
            max_sets in 1u32..8,
            dwell_ms in proptest::collection::vec(0u64..20_000, Knob::ALL.len()),
            steps in proptest::collection::vec(
                (0usize..Knob::ALL.len(), 0u64..15_000, 0u64..100, 0u64..100),
                1..200,
            ),
        ) {
            let limits: BTreeMap<Knob, KnobLimits> = Knob::ALL
                .iter()
                .zip(&dwell_ms)
                .map(|(k, d)| {
                    (*k, KnobLimits { min_dwell: Duration::from_millis(*d), ..lim(0, 100, 10, 0) })
                })
                .collect();
            let mut g = Guard::new(limits, max_sets);
            let c = cap(None, None);
            let mut now = 0u64;
            let mut applied: Vec<(u64, usize)> = Vec::new();
            for (ki, dt, proposed, current) in steps {
                now += dt;
                let knob = Knob::ALL[ki];
                if let Verdict::Apply { .. } = g.review(now, knob, proposed, current, Some(&c), Intent::Act) {
                    g.record_applied(now, knob, current);
                    applied.push((now, ki));
                }
            }
            for (i, (t, ki)) in applied.iter().enumerate() {
                let in_window = applied[i..]
                    .iter()
                    .take_while(|(u, _)| *u < t + RATE_WINDOW_MS)
                    .count();
                prop_assert!(in_window <= max_sets as usize, "{} SETs from {} ms", in_window, t);
                if let Some((u, _)) = applied[i + 1..].iter().find(|(_, kj)| kj == ki) {
                    prop_assert!(u - t >= dwell_ms[*ki], "knob {} changed at {} and {}", ki, t, u);
                }
            }
        }
    }
}
