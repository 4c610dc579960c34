//! Peers: what innopilot is compared with. A static peer is a startup configuration and
//! nothing else (the server's built-in behaviour does the rest); a controller peer runs
//! the real [`Controller`](crate::control::Controller) with a configuration.
//!
//! Flavor-specific peers ("MySQL 8 defaults") run the scenario on their flavor;
//! flavor-neutral ones ("one purge thread", innopilot) on the scenario's.

use serde::Serialize;

use crate::config::Config;
use crate::policy::registry::Registry;
use crate::policy::watermark::Watermark;
use crate::policy::PolicyKind;
use crate::server::{Knob, KnobValues};

use super::scenario::SimFlavor;

/// Who drives the knobs during the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Driver {
    /// Nobody: the startup configuration stays.
    Static,
    /// innopilot with its default configuration and every enabled policy.
    Innopilot,
    /// innopilot's watermark policy alone, as MariaDB 10.6.5 published it.
    Watermark1065,
    /// innopilot with its defaults plus redo resizing on every flavor (the redo knobs
    /// managed; by default only MariaDB's is): the benchmark's `innopilot_redo` arm.
    /// On MariaDB the same as [`Driver::Innopilot`] since resizing is on by default.
    InnopilotRedo,
}

#[derive(Debug, Clone, Serialize)]
pub struct Peer {
    pub name: &'static str,
    pub title: &'static str,
    /// The flavor this peer is about; `None`: the scenario's.
    pub flavor: Option<SimFlavor>,
    /// Startup configuration on top of the flavor's defaults and the scenario's.
    pub knobs: KnobValues,
    /// Multiplies the scenario's redo size at startup (the benchmark's `redo_static`
    /// arm: the static fix a DBA would try first).
    pub redo_factor: Option<f64>,
    pub driver: Driver,
}

/// Names of the built-in peers, in table order.
pub const NAMES: &[&str] = &[
    "mysql8_defaults",
    "mariadb1011_defaults",
    "mysql_threshold",
    "mariadb1065_adaptive",
    "one_purge_thread",
    "mariadb_threshold",
    "redo_static",
    "innopilot",
    "innopilot_redo",
];

/// The benchmark's `redo_static` arm sizes the redo this many times the scenario's
/// (bench/bench.py, `REDO_STATIC_FACTOR`).
pub const REDO_STATIC_FACTOR: f64 = 8.0;

impl Peer {
    pub fn named(name: &str) -> Option<Peer> {
        let p = |name, title, flavor, knobs, driver| Peer {
            name,
            title,
            flavor,
            knobs,
            redo_factor: None,
            driver,
        };
        Some(match name {
            "mysql8_defaults" => p(
                "mysql8_defaults",
                "MySQL 8.0 with its defaults",
                Some(SimFlavor::MySql80),
                KnobValues::new(),
                Driver::Static,
            ),
            "mariadb1011_defaults" => p(
                "mariadb1011_defaults",
                "MariaDB 10.11 with its defaults",
                Some(SimFlavor::MariaDb1011),
                KnobValues::new(),
                Driver::Static,
            ),
            // Seed 000: the threshold DML delay, with the 10 ms cap the article used.
            "mysql_threshold" => p(
                "mysql_threshold",
                "MySQL 8.0, innodb_max_purge_lag 100000 + delay 10 ms",
                Some(SimFlavor::MySql80),
                KnobValues::from([
                    (Knob::MaxPurgeLag, 100_000),
                    (Knob::MaxPurgeLagDelay, 10_000),
                ]),
                Driver::Static,
            ),
            // Seed 003: 20/80 watermarks, N = innodb_purge_threads buckets.
            "mariadb1065_adaptive" => p(
                "mariadb1065_adaptive",
                "MariaDB, 10.6.5 adaptive purge (watermarks 20/80, N = purge threads)",
                Some(SimFlavor::MariaDb1011),
                KnobValues::new(),
                Driver::Watermark1065,
            ),
            // Oracle support's advice quoted under seed 000.
            "one_purge_thread" => p(
                "one_purge_thread",
                "innodb_purge_threads = 1 (the conservative support advice)",
                None,
                KnobValues::from([(Knob::PurgeThreads, 1)]),
                Driver::Static,
            ),
            // The benchmark's threshold arm runs on MariaDB, whose delay applies only
            // while purge handles pages (policy::server_model).
            "mariadb_threshold" => p(
                "mariadb_threshold",
                "MariaDB 10.11, innodb_max_purge_lag 100000 + delay 10 ms",
                Some(SimFlavor::MariaDb1011),
                KnobValues::from([
                    (Knob::MaxPurgeLag, 100_000),
                    (Knob::MaxPurgeLagDelay, 10_000),
                ]),
                Driver::Static,
            ),
            "redo_static" => Peer {
                redo_factor: Some(REDO_STATIC_FACTOR),
                ..p(
                    "redo_static",
                    "static redo 8 x the scenario's (what a DBA tries first)",
                    None,
                    KnobValues::new(),
                    Driver::Static,
                )
            },
            "innopilot" => p(
                "innopilot",
                "innopilot, default configuration, every enabled policy",
                None,
                KnobValues::new(),
                Driver::Innopilot,
            ),
            "innopilot_redo" => p(
                "innopilot_redo",
                "innopilot, default configuration plus redo resizing on MySQL too",
                None,
                KnobValues::new(),
                Driver::InnopilotRedo,
            ),
            _ => return None,
        })
    }

    pub fn all() -> Vec<Peer> {
        NAMES.iter().filter_map(|n| Peer::named(n)).collect()
    }

    /// The controller configuration of a controller peer (`None` for static peers). The
    /// state and audit paths are the caller's to fill in.
    pub fn config(&self) -> Option<Config> {
        match self.driver {
            Driver::Static => None,
            // Built from the default so policies added later take part automatically.
            Driver::Innopilot => Some(Config::default()),
            Driver::Watermark1065 => Some(watermark_only_config()),
            Driver::InnopilotRedo => Some(redo_resize_config()),
        }
    }
}

/// The published 10.6.5 algorithm through innopilot's watermark policy: 20/80, N = the
/// purge threads found at start, no hysteresis, a change per tick allowed (10.6.5 acted
/// before every purge batch). Above the high watermark 10.6.5 paused purge 10 ms between
/// batches; it never delayed DML, and neither does the watermark policy: high mode is
/// "one purge thread". Every other policy of the registry is disabled, as long
/// as it follows the `[policy.NAME] enabled` convention.
pub fn watermark_only_config() -> Config {
    let base = "[control]\nmax_sets_per_minute = 600\n\
                [knobs.innodb_purge_threads]\nmax_step = 32\nmin_dwell = \"0s\"\n\
                [knobs.innodb_max_purge_lag_delay]\nmin_dwell = \"0s\"\n\
                [knobs.innodb_max_purge_lag]\nmin_dwell = \"0s\"\n\
                [knobs.innodb_purge_batch_size]\nmin_dwell = \"0s\"\nmax_step = 5000\n\
                [policy.watermark]\nenabled = true\nlow_pct = 20.0\nhigh_pct = 80.0\n\
                max_purge_threads = 0\nhysteresis_pct = 0.0\n\
                yield_history_undo_logs = 0\nlevel_dwell = \"0s\"\n\
                engage_fill_pct = 0.0\n"
        .to_string();
    let mut text = base;
    let registry = Registry::standard();
    let others = registry
        .names()
        .into_iter()
        .filter(|n| *n != Watermark::NAME);
    for name in others {
        let candidate = format!("{text}[policy.{name}]\nenabled = false\n");
        if Config::parse(&candidate, "(simulator)").is_ok() {
            text = candidate;
        }
    }
    Config::parse(&text, "(simulator)").unwrap_or_else(|_| {
        // Should the knob sections ever be refused, the policy still runs as published
        // with the default guard limits.
        let mut c = Config::default();
        c.policy.watermark.hysteresis_pct = 0.0;
        c.policy.watermark.yield_history_undo_logs = 0;
        c.policy.watermark.level_dwell = std::time::Duration::ZERO;
        c.policy.watermark.engage_fill_pct = 0.0;
        c
    })
}

/// innopilot's defaults plus redo resizing on both flavors: both redo knobs managed
/// (by default only MariaDB's innodb_log_file_size is) and `[policy.flush]
/// redo_resize` on (as by default).
pub fn redo_resize_config() -> Config {
    let text = "[knobs.innodb_log_file_size]\nmanage = true\n\
                [knobs.innodb_redo_log_capacity]\nmanage = true\n\
                [policy.flush]\nredo_resize = true\n";
    Config::parse(text, "(simulator)")
        .unwrap_or_else(|e| panic!("the innopilot_redo peer's configuration is refused: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_peer_builds() {
        for n in NAMES {
            let p = Peer::named(n).unwrap();
            assert_eq!(&p.name, n);
            assert_eq!(p.config().is_some(), p.driver != Driver::Static);
        }
        assert!(Peer::named("nope").is_none());
        let c = redo_resize_config();
        assert!(c.policy.flush.redo_resize);
        assert_eq!(Peer::named("redo_static").unwrap().redo_factor, Some(8.0));
    }

    #[test]
    fn watermark_peer_is_the_published_algorithm() {
        let c = watermark_only_config();
        let w = &c.policy.watermark;
        assert!(w.enabled);
        assert_eq!((w.low_pct, w.high_pct, w.hysteresis_pct), (20.0, 80.0, 0.0));
        assert_eq!(w.max_purge_threads, 0);
        // As published: no limit on the history it leaves behind.
        assert_eq!(w.yield_history_undo_logs, 0);
        assert!(w.level_dwell.is_zero());
        // As published: engaged from the first tick.
        assert_eq!(w.engage_fill_pct, 0.0);
        assert_eq!(c.limits(Knob::PurgeThreads).max_step, 32);
        assert_eq!(c.limits(Knob::PurgeThreads).min_dwell.as_secs(), 0);
    }
}
