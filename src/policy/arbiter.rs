//! The arbiter: one value per knob per tick. `Act` beats `Release`; among `Act`
//! proposals the policy of highest priority (lowest [`PolicyId::priority`], then
//! lowest [`PolicyId::tie_break`]) wins: avoid sync flush > protect the foreground >
//! reduce debt > save I/O. The losers are kept so the audit log can say what lost.
//!
//! [`PolicyId::priority`]: super::PolicyId::priority
//! [`PolicyId::tie_break`]: super::PolicyId::tie_break

use std::collections::BTreeMap;

use serde::Serialize;

use super::{Intent, Proposal};
use crate::server::Knob;

/// The winning proposal for one knob and the ones it beat.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Decision {
    pub winner: Proposal,
    pub losers: Vec<Proposal>,
}

impl Decision {
    /// The other proposals for this knob, for the audit log: `"policy: value (reason)"`,
    /// and `"policy: value, the same value (reason)"` where a loser asked for what won.
    /// Two releases to the baseline tie, and the one ranked first is recorded as the
    /// decision's policy: without the mark, a policy handing back its own change reads
    /// as overruled (twenty-second real-server run: purge_rate took back a fifth purge
    /// thread that did not purge faster, in the same tick as the watermark's release,
    /// and the log named only the watermark).
    pub fn lost_to(&self) -> Vec<String> {
        self.losers
            .iter()
            .map(|l| {
                let same = if l.value == self.winner.value {
                    ", the same value"
                } else {
                    ""
                };
                format!("{}: {}{same} ({})", l.policy.name(), l.value, l.reason)
            })
            .collect()
    }
}

fn rank(p: &Proposal) -> (u8, u8, u8) {
    let intent = match p.intent {
        Intent::Act | Intent::Retract => 0,
        Intent::Release => 1,
    };
    (intent, p.policy.priority(), p.policy.tie_break())
}

/// Picks one proposal per knob. Stable: among equals, the first proposed wins.
pub fn arbitrate(proposals: Vec<Proposal>) -> BTreeMap<Knob, Decision> {
    let mut by_knob: BTreeMap<Knob, Vec<Proposal>> = BTreeMap::new();
    for p in proposals {
        by_knob.entry(p.knob).or_default().push(p);
    }
    by_knob
        .into_iter()
        .map(|(knob, mut ps)| {
            let best = ps
                .iter()
                .enumerate()
                .min_by_key(|(i, p)| (rank(p), *i))
                .map(|(i, _)| i)
                .unwrap_or(0);
            let winner = ps.remove(best);
            (knob, Decision { winner, losers: ps })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::registry::Registry;
    use crate::policy::PolicyId;

    fn p(policy: PolicyId, knob: Knob, value: u64, intent: Intent) -> Proposal {
        Proposal::new(policy, knob, value, intent, String::new())
    }

    #[test]
    fn priority_and_intent() {
        let ids = Registry::standard();
        let (purge_rate, watermark) = (ids.id("purge_rate").unwrap(), ids.id("watermark").unwrap());
        let out = arbitrate(vec![
            p(purge_rate, Knob::PurgeThreads, 8, Intent::Act),
            p(watermark, Knob::PurgeThreads, 2, Intent::Act),
            p(watermark, Knob::MaxPurgeLagDelay, 0, Intent::Release),
            p(purge_rate, Knob::MaxPurgeLagDelay, 3000, Intent::Act),
        ]);
        assert_eq!(out[&Knob::PurgeThreads].winner.value, 2);
        assert_eq!(out[&Knob::PurgeThreads].losers.len(), 1);
        assert_eq!(out[&Knob::MaxPurgeLagDelay].winner.value, 3000);
    }

    /// A loser that asked for the winning value is marked, so the audit log does not
    /// read as one policy overruling another that agreed with it.
    #[test]
    fn lost_to_marks_the_same_value() {
        let ids = Registry::standard();
        let (purge_rate, watermark) = (ids.id("purge_rate").unwrap(), ids.id("watermark").unwrap());
        let mut give_back = p(purge_rate, Knob::PurgeThreads, 4, Intent::Release);
        give_back.reason = "the fifth thread did not purge faster".into();
        let out = arbitrate(vec![
            give_back,
            p(watermark, Knob::PurgeThreads, 4, Intent::Release),
            p(purge_rate, Knob::MaxPurgeLag, 90_000, Intent::Act),
            p(watermark, Knob::MaxPurgeLag, 0, Intent::Release),
        ]);
        let threads = &out[&Knob::PurgeThreads];
        assert_eq!(threads.winner.policy, watermark);
        assert_eq!(
            threads.lost_to(),
            vec!["purge_rate: 4, the same value (the fifth thread did not purge faster)"]
        );
        assert_eq!(out[&Knob::MaxPurgeLag].lost_to(), vec!["watermark: 0 ()"]);
    }
}
