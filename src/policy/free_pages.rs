//! Free pages: how much of a MariaDB buffer pool the page cleaner keeps empty while
//! the pool evicts, through `innodb_lru_scan_depth`.
//!
//! **The server as it is** (MariaDB ≥ 10.5, `storage/innobase/buf/buf0flu.cc`). When
//! the free list is shorter than half of innodb_lru_scan_depth D
//! (`buf_pool_t::need_LRU_eviction()`), or a thread waits in
//! `buf_LRU_get_free_block()` (buf0lru.cc), `buf_flush_page_cleaner()` runs
//! `buf_flush_LRU(innodb_io_capacity_max)`, and `buf_flush_LRU_list_batch()` evicts
//! clean pages and writes dirty ones from the LRU tail *until the free list holds D
//! pages*. So in a pool that evicts (pages read that are not in it), the free list
//! swings between D/2 and D, and those pages cache nothing. Measured on 10.11.19 under
//! the benchmark's e_purge_behind (a 128 MiB pool, reads capped at 6 000 pages/s,
//! `bench/results/2026-11-30-2/probe.md`): a median free list of 935–1 384 pages at
//! the default D = 1 536 (19 % of MariaDB's default 128 MiB pool; 0.04 % of 64 GiB),
//! 256 at 256 and 2 866–2 962 at 4 096; at the same read rate users ran **1.14–1.16 ×**
//! faster at 256 and 0.83–0.84 × at 4 096, because more of their pages were in the
//! pool. The price of a short list is waiting: when reads take free pages faster than
//! the page cleaner refills them, users wait in `buf_LRU_get_free_block()`
//! (`Innodb_buffer_pool_wait_free`): 45–82 a second at 256 (0.8–1.4 % of the pages
//! read) against none at 1 536.
//!
//! **Rule.** While the pool evicts (the free list at most 5/4 D while pages are read):
//!
//! - every `step` in which at most a quarter of `max_wait_pct` of the pages read met a
//!   wait, D is halved, not below `min_pages` (nor the server's minimum, 100);
//! - once more than `max_wait_pct` met one over half a step (over a second, and
//!   [`MIN_READS`] pages, when more than [`URGENT_WAIT_FACTOR`] times it did), D is
//!   doubled, never above the value found at start, and that value is the floor for
//!   [`FLOOR_STEPS`] steps, so the policy does not probe the same cliff again at once.
//!
//! `max_wait_pct` is 5 %: in a probe users ran no slower, with a lower p99, while 7–9 %
//! of their reads waited (docs/benchmarks.md, the hundred-and-eighth run), and the
//! earlier 2 % gave back the gain on bursts of 2.5–3.3 % as a read view ended (the
//! hundred-and-ninth).
//!
//! The evidence starts at the last change of D and, when a full step passes with
//! nothing decided, again at the end of that step: waits that start late are judged
//! on the last step, not diluted by a long quiet stretch.
//!
//! It never keeps more pages free than the server did: its highest value is the
//! baseline, which innopilot restores on exit. On a machine whose page cleaner cannot
//! keep up at the default (users wait at D = 1 536 already: the benchmark's machines
//! whose e defaults met 0.9–1.0 k waits a second), nothing is lowered. MySQL's
//! variable of the same name is another mechanism (a per-instance scan budget of the
//! once-a-second page cleaner), and MariaDB before 10.5.7 had several pools: the
//! policy proposes nothing there.

use std::time::Duration;

use serde::Deserialize;

use super::{Intent, Policy, PolicyId, PolicyInput, PolicyKind, Proposal};
use crate::config::check::{ConfigError, Section};
use crate::server::flavor::{Flavor, Version};
use crate::server::{Capabilities, Knob};

/// Pages read since the last change below which the share of waits says nothing yet.
pub const MIN_READS: u64 = 200;

/// Steps a floor found by a wait holds before the policy may probe below it again.
pub const FLOOR_STEPS: u64 = 6;

/// A share of waits this many times `max_wait_pct` raises the reserve on any evidence
/// (a second); a smaller excess needs half a step of it. The waits come in bursts (the
/// hundred-and-sixth run: 592 in one second, none in the four either side), and two
/// raises on 4 s windows of 2.0–2.5 % left one repetition at 1 024 for the rest of it.
pub const URGENT_WAIT_FACTOR: f64 = 4.0;

/// Whether a free list of `free` pages under innodb_lru_scan_depth `depth` is the page
/// cleaner's reserve of an evicting pool (it holds D/2 to D there; a pool that still
/// fills has more). With pages being read, the policy's and `diagnose`'s one test.
pub fn held_at_depth(free: u64, depth: u64) -> bool {
    free <= depth + depth / 4
}

/// The server's own minimum of innodb_lru_scan_depth.
const SERVER_MIN: u64 = 100;

/// Counters at the last change (or the start of an evicting stretch).
#[derive(Debug, Clone, Copy)]
struct Mark {
    t_ms: u64,
    waits: u64,
    reads: u64,
}

/// See the module documentation.
pub struct FreePages {
    id: PolicyId,
    cfg: FreePagesConfig,
    /// Where the current stretch of evidence starts.
    mark: Option<Mark>,
    /// The value in effect at the last tick: a change (ours or anyone's) restarts
    /// the evidence.
    last_depth: Option<u64>,
    /// A value found too low: (floor, until t_ms).
    floor: Option<(u64, u64)>,
}

impl FreePages {
    pub fn new(cfg: FreePagesConfig) -> Self {
        FreePages {
            id: PolicyId::unranked(<Self as PolicyKind>::NAME),
            cfg,
            mark: None,
            last_depth: None,
            floor: None,
        }
    }

    /// MariaDB ≥ 10.5.7 (one buffer pool, the page cleaner that refills the free list
    /// to innodb_lru_scan_depth), with the variable writable.
    pub fn applies(caps: &Capabilities) -> bool {
        caps.identity.flavor == Flavor::MariaDb
            && caps.identity.version >= Version::new(10, 5, 7)
            && caps.settable(Knob::LruScanDepth)
    }

    fn proposal(&self, value: u64, reason: String) -> Proposal {
        Proposal::new(self.id, Knob::LruScanDepth, value, Intent::Act, reason)
    }
}

impl Policy for FreePages {
    fn id(&self) -> PolicyId {
        self.id
    }

    fn decide(&mut self, input: &PolicyInput<'_>) -> Vec<Proposal> {
        if !self.cfg.enabled || !Self::applies(input.caps) {
            return Vec::new();
        }
        let s = &input.signals.sample;
        let (Some(&depth), Some(&base)) = (
            input.current.get(&Knob::LruScanDepth),
            input.baseline.get(&Knob::LruScanDepth),
        ) else {
            return Vec::new();
        };
        let (Some(free), Some(reads), Some(waits)) =
            (s.free_pages, s.pages_read, s.free_page_waits)
        else {
            self.mark = None;
            return Vec::new();
        };
        let now = Mark {
            t_ms: s.t_ms,
            waits,
            reads,
        };
        if self.last_depth != Some(depth) {
            self.last_depth = Some(depth);
            self.mark = Some(now);
            return Vec::new();
        }
        let Some(mark) = self.mark else {
            self.mark = Some(now);
            return Vec::new();
        };
        // A counter that went back: the server restarted under us.
        if reads < mark.reads || waits < mark.waits || now.t_ms < mark.t_ms {
            self.mark = Some(now);
            return Vec::new();
        }
        let (dt_ms, dr, dw) = (now.t_ms - mark.t_ms, reads - mark.reads, waits - mark.waits);
        // The free list held near D while pages are read: the page cleaner is evicting.
        let evicting = held_at_depth(free, depth) && dr > 0;
        if !evicting {
            self.mark = Some(now);
            return Vec::new();
        }
        if dt_ms < 1000 || dr < MIN_READS {
            return Vec::new();
        }
        let share_pct = 100.0 * dw as f64 / dr as f64;
        let max = self.cfg.max_wait_pct;
        let step_ms = self.cfg.step.as_millis() as u64;
        let rate = dr as f64 * 1000.0 / dt_ms as f64;
        let seen = format!(
            "the pool evicts (free list {free} pages, innodb_lru_scan_depth {depth}, \
             {rate:.0} pages read/s) and {share_pct:.2} % of the pages read over the last \
             {:.0} s waited for a free page",
            dt_ms as f64 / 1000.0
        );
        let urgent = share_pct > URGENT_WAIT_FACTOR * max;
        if share_pct > max && depth < base && (urgent || dt_ms >= step_ms / 2) {
            let to = depth.saturating_mul(2).min(base);
            self.floor = Some((to, now.t_ms + FLOOR_STEPS * step_ms));
            return vec![self.proposal(
                to,
                format!(
                    "{seen} (more than policy.free_pages.max_wait_pct {max} %): the page \
                     cleaner keeps {to} pages free again instead of {depth}, and the policy \
                     goes no lower for {} s",
                    FLOOR_STEPS * step_ms / 1000
                ),
            )];
        }
        let floor = match self.floor {
            Some((f, until)) if now.t_ms < until => f,
            _ => 0,
        };
        let lowest = self.cfg.min_pages.max(SERVER_MIN).max(floor);
        if dt_ms >= step_ms && share_pct <= max / 4.0 && depth > lowest {
            let to = (depth / 2).max(lowest);
            let held = if floor > self.cfg.min_pages {
                format!(", not below {floor}, where users waited")
            } else {
                String::new()
            };
            return vec![self.proposal(
                to,
                format!(
                    "{seen} (at most a quarter of policy.free_pages.max_wait_pct {max} %): the \
                     page cleaner keeps {to} pages free instead of {depth}, so about {} more \
                     pages cache data{held}",
                    depth - to
                ),
            )];
        }
        // Nothing decided on a full step: the next judgement is on the next step alone,
        // so waits that start late are not diluted by a long quiet stretch.
        if dt_ms >= step_ms {
            self.mark = Some(now);
        }
        Vec::new()
    }

    fn reset(&mut self) {
        self.mark = None;
        self.last_depth = None;
        self.floor = None;
    }
}

// ---- configuration: `[policy.free_pages]` ----------------------------------------

/// The free pages MariaDB's page cleaner keeps while the pool evicts
/// (innodb_lru_scan_depth): halved every `step` while at most a quarter of
/// `max_wait_pct` of the pages read waited for a free page, down to `min_pages`;
/// doubled back, never above the value found at start, when more waited.
#[derive(Debug, Clone, PartialEq)]
pub struct FreePagesConfig {
    pub enabled: bool,
    /// Lowest innodb_lru_scan_depth the policy sets (the server's own minimum is 100).
    pub min_pages: u64,
    /// Percent of the pages read that may meet a free-page wait.
    pub max_wait_pct: f64,
    /// Evidence a halving needs.
    pub step: Duration,
}

impl Default for FreePagesConfig {
    fn default() -> Self {
        FreePagesConfig {
            enabled: true,
            min_pages: 256,
            max_wait_pct: 5.0,
            step: Duration::from_secs(10),
        }
    }
}

/// `[policy.free_pages]` as the file says it.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFreePages {
    enabled: Option<bool>,
    min_pages: Option<i64>,
    max_wait_pct: Option<f64>,
    #[serde(default, with = "humantime_serde")]
    step: Option<Duration>,
}

impl PolicyKind for FreePages {
    const NAME: &'static str = "free_pages";
    type Config = FreePagesConfig;
    type Raw = RawFreePages;

    fn validate(r: RawFreePages, s: &Section<'_>) -> Result<FreePagesConfig, ConfigError> {
        let d = FreePagesConfig::default();
        Ok(FreePagesConfig {
            enabled: r.enabled.unwrap_or(d.enabled),
            min_pages: s.int("min_pages", r.min_pages, d.min_pages, SERVER_MIN, 1 << 20)?,
            max_wait_pct: s.float("max_wait_pct", r.max_wait_pct, d.max_wait_pct, 0.01, 50.0)?,
            step: s.duration(
                "step",
                r.step,
                d.step,
                Duration::from_secs(1),
                Duration::from_secs(3600),
            )?,
        })
    }

    fn build(cfg: &FreePagesConfig, id: PolicyId) -> Option<Box<dyn Policy>> {
        super::boxed_if(
            cfg.enabled,
            FreePages {
                id,
                ..FreePages::new(cfg.clone())
            },
        )
    }
}

#[cfg(test)]
mod tests;
