//! The pure planning step: signals → every policy's proposals → the arbiter (one per
//! knob) → the guard's review → a [`Plan`] of changes in a safe order and refusals.
//!
//! No I/O and no clock: the controller calls [`plan`] and then only *performs* the
//! plan (SET, read back, audit); the policies' tests call the same function, so what
//! they check is what runs.

use crate::control::actuator::order_changes;
use crate::control::guard::{Guard, RejectKind, Verdict};
use crate::policy::arbiter::{arbitrate, Decision};
use crate::policy::{Policy, PolicyInput};
use crate::server::Knob;

/// A change the guard let through.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    pub knob: Knob,
    /// The value in effect now.
    pub from: u64,
    /// The value to set (maybe clipped or step-limited from the proposal).
    pub to: u64,
    /// What the guard changed on the way, in words.
    pub notes: Vec<String>,
    /// The arbiter's winner and the proposals it beat.
    pub decision: Decision,
}

/// A proposal the guard refused.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    pub knob: Knob,
    /// The value in effect now (it stays).
    pub current: u64,
    pub reason: String,
    pub kind: RejectKind,
    pub decision: Decision,
}

/// A winning proposal already in effect: the knob is held where it is.
#[derive(Debug, Clone, PartialEq)]
pub struct Held {
    pub knob: Knob,
    /// The value in effect (it stays).
    pub current: u64,
    /// What the guard made of the proposal on the way, in words: a proposal past a
    /// bound is held at the bound, and says so here.
    pub notes: Vec<String>,
    pub decision: Decision,
}

/// What one tick should do.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    /// In the order they must be applied ([`order_changes`]: e.g. io_capacity_max is
    /// raised before io_capacity, lowered after it).
    pub changes: Vec<Change>,
    pub refused: Vec<Refusal>,
    /// Winning proposals already in effect.
    pub unchanged: Vec<Held>,
}

impl Plan {
    /// Every knob's arbiter decision, whatever the guard made of it, in knob order.
    pub fn into_decisions(self) -> Vec<Decision> {
        let mut all: Vec<(Knob, Decision)> = self
            .changes
            .into_iter()
            .map(|c| (c.knob, c.decision))
            .chain(self.refused.into_iter().map(|r| (r.knob, r.decision)))
            .chain(self.unchanged.into_iter().map(|h| (h.knob, h.decision)))
            .collect();
        all.sort_by_key(|(k, _)| *k);
        all.into_iter().map(|(_, d)| d).collect()
    }
}

/// Asks every policy, arbitrates, and has the guard review each winner against what
/// is in effect (`input.current`). Knobs the server does not report are skipped.
pub fn plan<'a, P, I>(policies: I, input: &PolicyInput<'_>, guard: &Guard) -> Plan
where
    P: Policy + ?Sized + 'a,
    I: IntoIterator<Item = &'a mut P>,
{
    let mut proposals = Vec::new();
    for p in policies {
        proposals.extend(p.decide(input));
    }
    let mut out = Plan::default();
    let mut applies = Vec::new();
    for (knob, decision) in arbitrate(proposals) {
        let Some(&current) = input.current.get(&knob) else {
            continue;
        };
        match guard.review(
            input.signals.t_ms,
            knob,
            decision.winner.value,
            current,
            input.caps.knob(knob),
            decision.winner.intent,
        ) {
            Verdict::Apply { value, notes } => applies.push(Change {
                knob,
                from: current,
                to: value,
                notes,
                decision,
            }),
            Verdict::NoChange { notes } => out.unchanged.push(Held {
                knob,
                current,
                notes,
                decision,
            }),
            Verdict::Reject { reason, kind } => out.refused.push(Refusal {
                knob,
                current,
                reason,
                kind,
                decision,
            }),
        }
    }
    let mut order: Vec<(Knob, u64, u64)> = applies.iter().map(|c| (c.knob, c.from, c.to)).collect();
    order_changes(&mut order);
    for (knob, _, _) in order {
        if let Some(i) = applies.iter().position(|c| c.knob == knob) {
            out.changes.push(applies.swap_remove(i));
        }
    }
    out
}
