//! The free-pages policy against hand-built samples and a closed loop whose plant is
//! MariaDB's free list as `buf_flush_LRU_list_batch()` keeps it.

use super::*;
use crate::policy::testkit::{self, Loop};
use crate::server::sample::Sample;
use crate::server::KnobValues;
use proptest::prelude::*;

const BASE: u64 = 1536;

fn baseline() -> KnobValues {
    KnobValues::from([(Knob::LruScanDepth, BASE)])
}

/// An evicting pool: the free list at 3/4 of the depth in effect (it swings between
/// D/2 and D), `reads` pages read a second, and a share of them waiting for a free
/// page that the depth decides (`wait_share(D)`).
struct Pool {
    t_ms: u64,
    reads: u64,
    waits: f64,
    rate: u64,
    evicting: bool,
}

impl Pool {
    fn new(rate: u64) -> Self {
        Pool {
            t_ms: 1_000,
            reads: 1_000_000,
            waits: 10_000.0,
            rate,
            evicting: true,
        }
    }

    fn sample(&mut self, depth: u64, wait_share: impl Fn(u64) -> f64) -> Sample {
        self.t_ms += 1_000;
        self.reads += self.rate;
        self.waits += self.rate as f64 * wait_share(depth);
        Sample {
            t_ms: self.t_ms,
            free_pages: Some(if self.evicting {
                depth * 3 / 4
            } else {
                8 * depth
            }),
            pages_read: Some(self.reads),
            free_page_waits: Some(self.waits as u64),
            ..Sample::default()
        }
    }
}

fn run(
    lp: &mut Loop,
    p: &mut FreePages,
    pool: &mut Pool,
    secs: u64,
    wait_share: impl Fn(u64) -> f64 + Copy,
) {
    for _ in 0..secs {
        let d = lp.current[&Knob::LruScanDepth];
        let s = pool.sample(d, wait_share);
        lp.tick(&mut [p], s);
    }
}

fn policy() -> FreePages {
    FreePages::new(FreePagesConfig::default())
}

/// A MariaDB loop at the default depth, the policy, and a pool read at 6 000 pages/s.
fn start() -> (Loop, FreePages, Pool) {
    (
        Loop::new(testkit::mariadb(), baseline()),
        policy(),
        Pool::new(6_000),
    )
}

/// A pool whose users wait for `share` of their reads once the depth is down to 256,
/// and never above it.
fn waits_at_256(share: f64) -> impl Fn(u64) -> f64 + Copy {
    move |d| if d <= 256 { share } else { 0.0 }
}

/// The values innodb_lru_scan_depth was set to, in order.
fn depths(lp: &Loop) -> Vec<u64> {
    lp.changes(Knob::LruScanDepth).iter().map(|c| c.2).collect()
}

/// The probe's machine: no waits down to 256 (e at 6 000 reads/s waited for 0.7–1.4 %
/// of its reads at 256, within the default 5 %).
#[test]
fn halves_the_reserve_each_step_down_to_min_pages_while_nobody_waits() {
    let (mut lp, mut p, mut pool) = start();
    run(&mut lp, &mut p, &mut pool, 60, waits_at_256(0.011));
    let steps = depths(&lp);
    assert_eq!(steps, vec![768, 384, 256], "{:?}", lp.applied);
    // One halving a step (10 s), each after a full step of evidence at the value before.
    let times: Vec<u64> = lp.changes(Knob::LruScanDepth).iter().map(|c| c.0).collect();
    assert!(times.windows(2).all(|w| w[1] - w[0] >= 10_000), "{times:?}");
    assert_eq!(lp.current[&Knob::LruScanDepth], 256);
}

#[test]
fn waits_double_it_back_and_hold_a_floor() {
    let (mut lp, mut p, mut pool) = start();
    // Users wait for 8 % of their reads below 384 free pages: more than max_wait_pct
    // (5 %), less than the urgent 20 %.
    let share = |d: u64| if d < 384 { 0.08 } else { 0.0 };
    run(&mut lp, &mut p, &mut pool, 200, share);
    let ch = lp.changes(Knob::LruScanDepth);
    let vals = depths(&lp);
    // 1536 → 768 → 384 → 256, waits → 512; then a probe to 256 once the floor has
    // held its six steps, and back.
    assert_eq!(&vals[..4], &[768, 384, 256, 512], "{:?}", lp.applied);
    // The raise waited for half a step of waits at 256 ...
    assert!(ch[3].0 - ch[2].0 >= 5_000, "{ch:?}");
    // ... and the next probe below 512 for the floor's six steps.
    assert_eq!(vals.get(4), Some(&256), "{ch:?}");
    assert!(ch[4].0 - ch[3].0 >= FLOOR_STEPS * 10_000, "{ch:?}");
    assert!(vals.iter().all(|v| *v >= 256), "{vals:?}");
}

#[test]
fn a_burst_of_waits_over_four_times_the_limit_raises_at_once() {
    let (mut lp, mut p, mut pool) = start();
    let share = |d: u64| if d < 384 { 0.3 } else { 0.0 };
    run(&mut lp, &mut p, &mut pool, 40, share);
    let ch = lp.changes(Knob::LruScanDepth);
    let at_256 = ch.iter().find(|c| c.2 == 256).expect("lowered to 256").0;
    let back = ch.iter().find(|c| c.1 == 256).expect("raised from 256").0;
    // The guard's min_dwell (5 s) is the only wait: the policy asks after a second.
    assert!(back - at_256 <= 5_000, "{ch:?}");
}

#[test]
fn waits_that_start_late_are_judged_on_the_last_step() {
    let (mut lp, mut p, mut pool) = start();
    // Ten minutes at 256 with 2 % of the reads waiting (between a quarter of the limit
    // and the limit: nothing to do), then 8 %.
    run(&mut lp, &mut p, &mut pool, 640, waits_at_256(0.02));
    assert_eq!(lp.current[&Knob::LruScanDepth], 256);
    let before = lp.applied.len();
    run(&mut lp, &mut p, &mut pool, 15, waits_at_256(0.08));
    // Averaged since the last change the share would still be about 2.2 %: judged on
    // the last step it is 8 %, and the reserve doubles within a step.
    assert_eq!(
        depths(&lp).last(),
        Some(&512),
        "{:?}",
        &lp.applied[before..]
    );
}

#[test]
fn never_above_the_value_found_at_start() {
    let (mut lp, mut p, mut pool) = start();
    // Waits at any depth: nothing to lower, and nothing above the baseline either.
    run(&mut lp, &mut p, &mut pool, 120, |_| 0.2);
    assert!(lp.applied.is_empty(), "{:?}", lp.applied);
}

#[test]
fn silent_while_the_pool_has_free_pages_or_counters_are_unknown() {
    let (mut lp, mut p, mut pool) = start();
    pool.evicting = false; // a pool still filling: free list far above D
    run(&mut lp, &mut p, &mut pool, 60, |_| 0.0);
    assert!(lp.applied.is_empty(), "{:?}", lp.applied);
    // No pages read: nothing evicts.
    let mut pool = Pool::new(0);
    run(&mut lp, &mut p, &mut pool, 60, |_| 0.0);
    assert!(lp.applied.is_empty(), "{:?}", lp.applied);
    // Counters unknown (an older recording).
    for t in 0..60 {
        lp.tick(
            &mut [&mut p],
            Sample {
                t_ms: 200_000 + t * 1000,
                ..Sample::default()
            },
        );
    }
    assert!(lp.applied.is_empty(), "{:?}", lp.applied);
}

#[test]
fn mysql_and_mariadb_before_10_5_7_are_left_alone() {
    for caps in [
        testkit::mysql(),
        testkit::caps("10.5.6-MariaDB", |_| Some(false)),
    ] {
        let mut lp = Loop::new(caps, baseline());
        let mut p = policy();
        let mut pool = Pool::new(6_000);
        run(&mut lp, &mut p, &mut pool, 60, |_| 0.0);
        assert!(lp.applied.is_empty(), "{:?}", lp.applied);
    }
}

#[test]
fn a_counter_that_goes_back_restarts_the_evidence() {
    let caps = testkit::mariadb();
    let mut p = policy();
    let base = baseline();
    let sig = |t_ms: u64, reads: u64| crate::signals::Signals {
        t_ms,
        sample: Sample {
            t_ms,
            free_pages: Some(1000),
            pages_read: Some(reads),
            free_page_waits: Some(0),
            ..Sample::default()
        },
        ..Default::default()
    };
    assert!(testkit::propose(&mut p, &caps, &base, &base, &sig(1_000, 1_000_000)).is_empty());
    // The server restarted: reads fell. The evidence starts there, so a full step
    // (10 s) is reached at 12 s, not at 11 s as counted from the first sample.
    assert!(testkit::propose(&mut p, &caps, &base, &base, &sig(2_000, 5)).is_empty());
    let ps = testkit::propose(&mut p, &caps, &base, &base, &sig(11_000, 54_005));
    assert!(ps.is_empty(), "9 s since the restart: {ps:?}");
    let ps = testkit::propose(&mut p, &caps, &base, &base, &sig(12_000, 60_005));
    assert_eq!(ps.len(), 1, "{ps:?}");
    assert_eq!(ps[0].value, 768);
    assert!(
        ps[0].reason.contains("about 768 more pages cache data"),
        "{}",
        ps[0].reason
    );
}

#[test]
fn config_is_checked() {
    let bad = [
        ("[policy.free_pages]\nmin_pages = 50\n", "min_pages"),
        ("[policy.free_pages]\nmax_wait_pct = 0\n", "max_wait_pct"),
        ("[policy.free_pages]\nstep = \"0s\"\n", "step"),
        ("[policy.free_pages]\nstpe = \"5s\"\n", "stpe"),
    ];
    for (text, key) in bad {
        let e = crate::config::Config::parse(text, "t.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains(key), "{text}: {e}");
    }
    let c = crate::config::Config::parse(
        "[policy.free_pages]\nenabled = false\nmin_pages = 512\n",
        "t.toml",
    )
    .unwrap();
    assert!(!c.policy.free_pages.enabled);
    assert_eq!(c.policy.free_pages.min_pages, 512);
    let id = PolicyId::unranked(FreePages::NAME);
    assert!(FreePages::build(&c.policy.free_pages, id).is_none());
    assert!(FreePages::build(&FreePagesConfig::default(), id).is_some());
}

proptest! {
    /// Whatever the pool does, every proposal lies between the policy's lowest value
    /// and the baseline, and a proposal above the value in effect follows waits.
    #[test]
    fn proposals_stay_between_min_pages_and_the_baseline(
        base in 100u64..5000,
        steps in prop::collection::vec((0u64..3, 0u64..10_000, 0u64..500), 1..80),
    ) {
        let caps = testkit::mariadb();
        let mut p = policy();
        let baseline = KnobValues::from([(Knob::LruScanDepth, base)]);
        let mut cur = baseline.clone();
        let (mut t, mut reads, mut waits) = (1_000u64, 0u64, 0u64);
        for (free_kind, dr, dw) in steps {
            t += 1_000;
            reads += dr;
            waits += dw.min(dr);
            let d = cur[&Knob::LruScanDepth];
            let free = [d / 2, d, 10 * d][free_kind as usize];
            let sig = crate::signals::Signals {
                t_ms: t,
                sample: Sample {
                    t_ms: t,
                    free_pages: Some(free),
                    pages_read: Some(reads),
                    free_page_waits: Some(waits),
                    ..Sample::default()
                },
                ..Default::default()
            };
            for pr in testkit::propose(&mut p, &caps, &cur, &baseline, &sig) {
                prop_assert_eq!(pr.knob, Knob::LruScanDepth);
                prop_assert!(pr.value <= base, "{} above the baseline {}", pr.value, base);
                prop_assert!(pr.value >= 256.min(d), "{} below min_pages", pr.value);
                prop_assert!(pr.value != d);
                cur.insert(Knob::LruScanDepth, pr.value);
            }
        }
    }
}
