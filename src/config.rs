//! Configuration: raw TOML (`deny_unknown_fields`) and the command line's settings
//! ([`Overrides`], merged first) are validated once into a typed [`Config`]; every
//! error names the key, the line in the file and the allowed range. This file owns the
//! general sections; each `[policy.NAME]` section belongs to its policy's file, found
//! through [`crate::policy::registry`]; [`check`] is the kit both validate with.
//! `config/innopilot.toml` documents every key, and a test checks that loading it gives
//! exactly [`Config::default()`], so the shipped file and the code cannot drift apart.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

pub use self::check::{hard_range, parse_size, ConfigError};
use self::check::{locate, parse_error, Ctx};
pub use crate::policy::flush::FlushConfig;
pub use crate::policy::purge_rate::PurgeRateConfig;
pub use crate::policy::registry::PolicyConfig;
use crate::policy::registry::Registry;
pub use crate::policy::replica::ReplicaConfig;
pub use crate::policy::undo::UndoConfig;
pub use crate::policy::watermark::WatermarkConfig;
use crate::server::Knob;

pub mod check;
pub mod effective;

/// Validated configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub server: ServerConfig,
    pub sampler: SamplerConfig,
    pub control: ControlConfig,
    pub audit: AuditConfig,
    /// Limits for every knob (all knobs present; defaults filled in).
    pub knobs: BTreeMap<Knob, KnobLimits>,
    pub policy: PolicyConfig,
    pub http: HttpConfig,
    pub check: CheckConfig,
}

/// The limits behind `/check` (freno-compatible): background work (gh-ost, batch
/// jobs, backups) may proceed while every signal is under its limit.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckConfig {
    pub enabled: bool,
    /// Purge debt: InnoDB history list length, undo logs (one per committed transaction that changed rows).
    pub max_history_undo_logs: u64,
    /// Redo fill, percent of the sync-flush point.
    pub max_redo_fill_pct: f64,
    /// Replica lag (on a replica; unknown lag there counts as over the limit).
    pub max_replica_lag: Duration,
}

/// The HTTP endpoints (`/metrics`, `/healthz`, `/readyz`; see `crate::http`).
#[derive(Debug, Clone, PartialEq)]
pub struct HttpConfig {
    pub enabled: bool,
    /// `IP:PORT` to listen on; 127.0.0.1 by default so nothing is exposed by accident.
    pub listen: String,
    /// `/healthz` answers 503 once the last successful sample is older than this.
    pub stale_after: Duration,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ServerConfig {
    /// `mysql://USER[:PASSWORD]@HOST[:PORT]/[?socket=..]`; CLI `--dsn` and
    /// `INNOPILOT_DSN` take precedence.
    pub dsn: Option<String>,
    /// A file whose first line is the password (used when the DSN has none and
    /// INNOPILOT_PASSWORD is unset).
    pub password_file: Option<PathBuf>,
    /// A my.cnf-style file whose `[client]` section gives user, password, host, port,
    /// socket.
    pub defaults_file: Option<PathBuf>,
    pub connect_timeout: Duration,
    pub query_timeout: Duration,
    pub resize_timeout: Duration,
    /// The server's datadir as seen from this host (for undo file sizes on MariaDB).
    pub datadir: Option<PathBuf>,
    /// TLS: `ssl_mode`, `ssl_ca`, `ssl_cert`, `ssl_key`; the DSN's own parameters win,
    /// the defaults file's fill what is left.
    pub tls: crate::server::dsn::Tls,
}

#[derive(Debug, Clone, PartialEq)]
pub struct SamplerConfig {
    pub interval: Duration,
    /// How far back rates and trends look.
    pub window: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnServerLost {
    /// Keep retrying with backoff for as long as it takes.
    Wait,
    /// Give up after `reconnect_budget`, with exit code 4.
    Exit,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ControlConfig {
    pub dry_run: bool,
    /// Baseline and last-set values, written atomically before each SET; read at start
    /// to restore the server after a crash.
    pub state_file: PathBuf,
    /// Upper bound on restoring the baseline at exit.
    pub restore_timeout: Duration,
    /// How long to keep reconnecting before `on_server_lost` applies.
    pub reconnect_budget: Duration,
    pub on_server_lost: OnServerLost,
    /// Global limit on SET GLOBAL statements per rolling minute.
    pub max_sets_per_minute: u32,
}

#[derive(Debug, Clone, PartialEq)]
pub struct AuditConfig {
    /// JSON Lines file, or `-` for standard output.
    pub path: PathBuf,
    /// Rotate (rename to `<path>.1`, keeping `keep` files) past this size; 0 = never
    /// (for logrotate with `copytruncate`).
    pub max_bytes: u64,
    pub keep: u32,
}

impl AuditConfig {
    pub fn is_stdout(&self) -> bool {
        self.path == Path::new("-")
    }
}

/// What the guard allows for one knob.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KnobLimits {
    /// Whether innopilot may change this knob at all.
    pub manage: bool,
    pub min: u64,
    pub max: u64,
    /// Largest change in one SET.
    pub max_step: u64,
    /// Minimum time between two changes of this knob.
    pub min_dwell: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            server: ServerConfig {
                dsn: None,
                password_file: None,
                defaults_file: None,
                connect_timeout: Duration::from_secs(5),
                query_timeout: Duration::from_secs(2),
                resize_timeout: Duration::from_secs(120),
                datadir: None,
                tls: crate::server::dsn::Tls::default(),
            },
            sampler: SamplerConfig {
                interval: Duration::from_secs(1),
                window: Duration::from_secs(10),
            },
            control: ControlConfig {
                dry_run: false,
                state_file: PathBuf::from("/var/lib/innopilot/state.json"),
                restore_timeout: Duration::from_secs(10),
                reconnect_budget: Duration::from_secs(60),
                on_server_lost: OnServerLost::Wait,
                max_sets_per_minute: 120,
            },
            audit: AuditConfig {
                path: PathBuf::from("/var/lib/innopilot/audit.jsonl"),
                max_bytes: 64 << 20,
                keep: 5,
            },
            knobs: Knob::ALL.iter().map(|k| (*k, default_limits(*k))).collect(),
            policy: PolicyConfig::default(),
            check: CheckConfig {
                enabled: true,
                max_history_undo_logs: 1_000_000,
                max_redo_fill_pct: 75.0,
                max_replica_lag: Duration::from_secs(30),
            },
            http: HttpConfig {
                enabled: true,
                listen: "127.0.0.1:29104".into(),
                stale_after: Duration::from_secs(10),
            },
        }
    }
}

/// Settings given on the command line (`run --interval 30s`, …). They are merged into
/// the file's raw form before validation, so every rule across keys holds whatever the
/// source of each value.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Overrides {
    /// `sampler.interval`.
    pub interval: Option<Duration>,
    /// `control.dry_run = true` (the command line can only ask for dry-run).
    pub dry_run: bool,
    /// `audit.path`.
    pub audit: Option<PathBuf>,
    /// `control.state_file`.
    pub state_file: Option<PathBuf>,
    /// `http.listen`; it also turns the endpoints on.
    pub listen: Option<String>,
}

impl Overrides {
    fn merge(&self, raw: &mut Raw) {
        if let Some(i) = self.interval {
            raw.sampler.interval = Some(i);
        }
        if self.dry_run {
            raw.control.dry_run = Some(true);
        }
        if let Some(p) = &self.audit {
            raw.audit.path = Some(p.clone());
        }
        if let Some(p) = &self.state_file {
            raw.control.state_file = Some(p.clone());
        }
        if let Some(l) = &self.listen {
            raw.http.listen = Some(l.clone());
            raw.http.enabled = Some(true);
        }
    }
}

/// Defaults per knob: ranges a DBA would accept without thinking twice; redo resizing
/// is opt-in.
pub fn default_limits(knob: Knob) -> KnobLimits {
    let l = |manage, min, max, max_step, dwell_s| KnobLimits {
        manage,
        min,
        max,
        max_step,
        min_dwell: Duration::from_secs(dwell_s),
    };
    match knob {
        Knob::PurgeThreads => l(true, 1, 32, 1, 5),
        Knob::PurgeBatchSize => l(true, 10, 5000, 1000, 5),
        Knob::MaxPurgeLag => l(true, 0, 4_294_967_295, 4_294_967_295, 0),
        Knob::MaxPurgeLagDelay => l(true, 0, 100_000, 10_000, 2),
        Knob::IoCapacity => l(true, 100, 20_000, 2_000, 5),
        Knob::IoCapacityMax => l(true, 200, 40_000, 4_000, 5),
        // Redo resizing is on by default where it was measured (MariaDB, the
        // benchmark's h_repeated_bursts); on MySQL it waits for a measurement.
        Knob::LogFileSize => l(true, 64 << 20, 4 << 30, 1 << 30, 600),
        Knob::RedoLogCapacity => l(false, 64 << 20, 4 << 30, 1 << 30, 600),
        Knob::UndoLogTruncate => l(true, 0, 1, 1, 60),
        Knob::MaxUndoLogSize => l(true, 10 << 20, 16 << 30, 16 << 30, 60),
        Knob::MaxDirtyPagesPctLwm => l(true, 0, 10, 10, 5),
        Knob::FlushNeighbors => l(true, 0, 2, 2, 5),
        Knob::LruScanDepth => l(true, 100, 1 << 20, 1 << 20, 5),
    }
}

// ---- raw form: exactly what the file says -------------------------------------------

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    #[serde(default)]
    server: RawServer,
    #[serde(default)]
    sampler: RawSampler,
    #[serde(default)]
    control: RawControl,
    #[serde(default)]
    audit: RawAudit,
    #[serde(default)]
    knobs: BTreeMap<String, RawKnob>,
    /// Each `[policy.NAME]` section is read by its policy (through the registry).
    #[serde(default, rename = "policy")]
    _policy: Option<serde::de::IgnoredAny>,
    #[serde(default)]
    http: RawHttp,
    #[serde(default)]
    check: RawCheck,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCheck {
    enabled: Option<bool>,
    max_history_undo_logs: Option<i64>,
    max_redo_fill_pct: Option<f64>,
    #[serde(default, with = "humantime_serde")]
    max_replica_lag: Option<Duration>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHttp {
    enabled: Option<bool>,
    listen: Option<String>,
    #[serde(default, with = "humantime_serde")]
    stale_after: Option<Duration>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawServer {
    dsn: Option<String>,
    password_file: Option<PathBuf>,
    defaults_file: Option<PathBuf>,
    #[serde(default, with = "humantime_serde")]
    connect_timeout: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    query_timeout: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    resize_timeout: Option<Duration>,
    datadir: Option<PathBuf>,
    ssl_mode: Option<String>,
    ssl_ca: Option<PathBuf>,
    ssl_cert: Option<PathBuf>,
    ssl_key: Option<PathBuf>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSampler {
    #[serde(default, with = "humantime_serde")]
    interval: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    window: Option<Duration>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawControl {
    dry_run: Option<bool>,
    state_file: Option<PathBuf>,
    #[serde(default, with = "humantime_serde")]
    restore_timeout: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    reconnect_budget: Option<Duration>,
    on_server_lost: Option<OnServerLost>,
    max_sets_per_minute: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAudit {
    path: Option<PathBuf>,
    max_size: Option<String>,
    keep: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawKnob {
    manage: Option<bool>,
    min: Option<i64>,
    max: Option<i64>,
    max_step: Option<i64>,
    #[serde(default, with = "humantime_serde")]
    min_dwell: Option<Duration>,
}

impl Config {
    /// Reads and validates a file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        Config::load_with(Some(path), &Overrides::default())
    }

    /// The file (or, without one, the built-in defaults) with the command line's
    /// settings on top, validated together.
    pub fn load_with(path: Option<&Path>, overrides: &Overrides) -> Result<Config, ConfigError> {
        let Some(path) = path else {
            return Config::validate("", "command line", &Registry::standard(), overrides);
        };
        let src = std::fs::read_to_string(path).map_err(|e| ConfigError::Read {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        let shown = path.display().to_string();
        Config::validate(&src, &shown, &Registry::standard(), overrides)
    }

    /// Validates TOML text; `path` is used in messages only.
    pub fn parse(src: &str, path: &str) -> Result<Config, ConfigError> {
        Config::parse_with(src, path, &Registry::standard())
    }

    /// Like [`Config::parse`], with the `[policy.*]` sections of `registry`'s policies.
    pub fn parse_with(src: &str, path: &str, registry: &Registry) -> Result<Config, ConfigError> {
        Config::validate(src, path, registry, &Overrides::default())
    }

    fn validate(
        src: &str,
        path: &str,
        registry: &Registry,
        overrides: &Overrides,
    ) -> Result<Config, ConfigError> {
        let mut raw: Raw = toml::from_str(src).map_err(|e| parse_error(src, path, &e))?;
        overrides.merge(&mut raw);
        let cx = Ctx { path, src };
        let d = Config::default();
        let secs = Duration::from_secs;
        let ms = Duration::from_millis;

        let server = ServerConfig {
            dsn: raw.server.dsn.filter(|s| !s.trim().is_empty()),
            password_file: raw.server.password_file,
            defaults_file: raw.server.defaults_file,
            connect_timeout: cx.section("server").duration(
                "connect_timeout",
                raw.server.connect_timeout,
                d.server.connect_timeout,
                ms(100),
                secs(60),
            )?,
            query_timeout: cx.section("server").duration(
                "query_timeout",
                raw.server.query_timeout,
                d.server.query_timeout,
                ms(100),
                secs(60),
            )?,
            resize_timeout: cx.section("server").duration(
                "resize_timeout",
                raw.server.resize_timeout,
                d.server.resize_timeout,
                secs(1),
                secs(3600),
            )?,
            datadir: raw.server.datadir,
            tls: crate::server::dsn::Tls {
                mode: raw
                    .server
                    .ssl_mode
                    .as_deref()
                    .map(|m| {
                        m.parse().map_err(|_: String| {
                            cx.section("server").invalid(
                                "ssl_mode",
                                format!("{m:?}"),
                                format!("one of {}", crate::server::dsn::SslMode::NAMES),
                            )
                        })
                    })
                    .transpose()?,
                ca: raw.server.ssl_ca,
                cert: raw.server.ssl_cert,
                key: raw.server.ssl_key,
            },
        };
        if let Some(dsn) = &server.dsn {
            crate::server::dsn::parse_dsn(dsn).map_err(|e| {
                cx.section("server")
                    .invalid("dsn", "(not shown)", e.to_string())
            })?;
        }
        let interval = cx.section("sampler").duration(
            "interval",
            raw.sampler.interval,
            d.sampler.interval,
            ms(100),
            secs(60),
        )?;
        let window = cx.section("sampler").duration(
            "window",
            raw.sampler.window,
            d.sampler.window,
            secs(1),
            secs(3600),
        )?;
        // Both checks against the interval say where it came from when the command
        // line set it: the file alone may look fine.
        let twice_interval = format!(
            "must be at least twice sampler.interval ({}){}",
            humantime::format_duration(interval * 2),
            match overrides.interval {
                Some(i) => format!(
                    ", and --interval sets sampler.interval to {}",
                    humantime::format_duration(i)
                ),
                None => String::new(),
            }
        );
        if window < interval * 2 {
            return Err(cx.section("sampler").invalid(
                "window",
                format!("\"{}\"", humantime::format_duration(window)),
                twice_interval,
            ));
        }
        if server.query_timeout * 3 > interval.max(secs(1)) * 10 {
            // A sample is up to 3 queries; a timeout far beyond the interval would let
            // one slow server stall the loop for many ticks.
            return Err(cx.section("server").invalid(
                "query_timeout",
                format!("\"{}\"", humantime::format_duration(server.query_timeout)),
                "must be at most 3⅓ × max(sampler.interval, 1s)",
            ));
        }
        let control = ControlConfig {
            dry_run: raw.control.dry_run.unwrap_or(d.control.dry_run),
            state_file: raw.control.state_file.unwrap_or(d.control.state_file),
            restore_timeout: cx.section("control").duration(
                "restore_timeout",
                raw.control.restore_timeout,
                d.control.restore_timeout,
                secs(1),
                secs(300),
            )?,
            reconnect_budget: cx.section("control").duration(
                "reconnect_budget",
                raw.control.reconnect_budget,
                d.control.reconnect_budget,
                secs(1),
                secs(86_400),
            )?,
            on_server_lost: raw
                .control
                .on_server_lost
                .unwrap_or(d.control.on_server_lost),
            max_sets_per_minute: cx.section("control").int(
                "max_sets_per_minute",
                raw.control.max_sets_per_minute,
                d.control.max_sets_per_minute as u64,
                1,
                600,
            )? as u32,
        };
        let audit = AuditConfig {
            path: raw.audit.path.unwrap_or(d.audit.path),
            max_bytes: match raw.audit.max_size {
                None => d.audit.max_bytes,
                Some(s) => parse_size(&s)
                    .map_err(|e| cx.section("audit").invalid("max_size", format!("{s:?}"), e))?,
            },
            keep: cx
                .section("audit")
                .int("keep", raw.audit.keep, d.audit.keep as u64, 1, 100)? as u32,
        };
        if audit.path.as_os_str().is_empty() {
            return Err(cx.section("audit").invalid(
                "path",
                "\"\"",
                "a file path, or \"-\" for standard output",
            ));
        }

        let mut knobs = d.knobs.clone();
        for (name, rk) in raw.knobs {
            let knob: Knob = name.parse().map_err(|e: String| ConfigError::Invalid {
                path: path.to_string(),
                line: locate(src, &format!("knobs.{name}"), "")
                    .or_else(|| locate(src, "knobs", &name)),
                key: format!("knobs.{name}"),
                value: "(section)".into(),
                allowed: e,
            })?;
            let sec = cx.section(format!("knobs.{name}"));
            let def = default_limits(knob);
            let hard = hard_range(knob);
            let lim = KnobLimits {
                manage: rk.manage.unwrap_or(def.manage),
                min: sec.int("min", rk.min, def.min, hard.0, hard.1)?,
                max: sec.int("max", rk.max, def.max, hard.0, hard.1)?,
                max_step: sec.int("max_step", rk.max_step, def.max_step, 1, u64::MAX)?,
                min_dwell: sec.duration(
                    "min_dwell",
                    rk.min_dwell,
                    def.min_dwell,
                    Duration::ZERO,
                    secs(86_400),
                )?,
            };
            if lim.min > lim.max {
                return Err(sec.invalid(
                    "min",
                    lim.min,
                    format!("must not exceed {sec}.max ({})", lim.max),
                ));
            }
            knobs.insert(knob, lim);
        }

        let h = raw.http;
        let listen = h.listen.unwrap_or(d.http.listen);
        if listen.parse::<std::net::SocketAddr>().is_err() {
            return Err(cx.section("http").invalid(
                "listen",
                format!("{listen:?}"),
                "an IP:PORT such as \"127.0.0.1:29104\" or \"[::1]:29104\"",
            ));
        }
        let http = HttpConfig {
            enabled: h.enabled.unwrap_or(d.http.enabled),
            listen,
            stale_after: cx.section("http").duration(
                "stale_after",
                h.stale_after,
                d.http.stale_after,
                secs(1),
                secs(3600),
            )?,
        };
        if http.stale_after < interval * 2 {
            return Err(cx.section("http").invalid(
                "stale_after",
                format!("\"{}\"", humantime::format_duration(http.stale_after)),
                twice_interval,
            ));
        }

        let c = raw.check;
        let check = CheckConfig {
            enabled: c.enabled.unwrap_or(d.check.enabled),
            max_history_undo_logs: cx.section("check").int(
                "max_history_undo_logs",
                c.max_history_undo_logs,
                d.check.max_history_undo_logs,
                1,
                u32::MAX as u64 * 1000,
            )?,
            max_redo_fill_pct: cx.section("check").float(
                "max_redo_fill_pct",
                c.max_redo_fill_pct,
                d.check.max_redo_fill_pct,
                1.0,
                100.0,
            )?,
            max_replica_lag: cx.section("check").duration(
                "max_replica_lag",
                c.max_replica_lag,
                d.check.max_replica_lag,
                secs(1),
                secs(86_400),
            )?,
        };

        let mut policy = registry.parse(&cx)?;
        // The purge-rate policy's threshold leads by the time until the next lag may be
        // set: a tick with no dwell, else the dwell and the tick after it (sample times
        // jitter by milliseconds, so the tick the dwell ends on may come just too early).
        let dwell = knobs
            .get(&Knob::MaxPurgeLag)
            .map_or(default_limits(Knob::MaxPurgeLag).min_dwell, |l| l.min_dwell);
        policy.purge_rate.lag_step = if dwell.is_zero() {
            interval
        } else {
            dwell + interval
        };

        Ok(Config {
            server,
            sampler: SamplerConfig { interval, window },
            control,
            audit,
            knobs,
            policy,
            http,
            check,
        })
    }

    pub fn limits(&self, knob: Knob) -> KnobLimits {
        self.knobs
            .get(&knob)
            .copied()
            .unwrap_or_else(|| default_limits(knob))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(src: &str) -> String {
        Config::parse(src, "test.toml").unwrap_err().to_string()
    }

    #[test]
    fn server_tls_keys() {
        let c = Config::parse(
            "[server]\nssl_mode = \"VERIFY_IDENTITY\"\nssl_ca = \"/etc/ca.pem\"\n",
            "test.toml",
        )
        .unwrap();
        assert_eq!(
            c.server.tls.mode,
            Some(crate::server::dsn::SslMode::VerifyIdentity)
        );
        assert_eq!(c.server.tls.ca.as_deref(), Some(Path::new("/etc/ca.pem")));
        let e = err("[server]\nssl_mode = \"sometimes\"\n");
        assert!(
            e.contains("test.toml:2") && e.contains("server.ssl_mode") && e.contains("verify-ca"),
            "{e}"
        );
    }

    #[test]
    fn empty_file_is_the_default() {
        assert_eq!(Config::parse("", "x").unwrap(), Config::default());
    }

    #[test]
    fn shipped_file_is_exactly_the_default() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/innopilot.toml");
        let c = Config::load(&path).unwrap();
        assert_eq!(c, Config::default());
    }

    #[test]
    fn unknown_key_names_key_and_line() {
        let e = err("[sampler]\ninterval = \"1s\"\nintervall = \"2s\"\n");
        assert!(e.contains("intervall") && e.contains("test.toml:3"), "{e}");
        let e = err("[samplr]\n");
        assert!(e.contains("samplr") && e.contains("test.toml:1"), "{e}");
    }

    /// A renamed or removed key is refused with what to do, not as a bare unknown key.
    #[test]
    fn renamed_and_removed_keys_say_what_to_do() {
        let e = err("[policy.purge_rate]\nbudget_records = 5000\n");
        assert!(
            e.contains("test.toml:2")
                && e.contains("is now `budget_undo_logs`")
                && e.contains("undo logs"),
            "{e}"
        );
        let e = err("[check]\nmax_history_records = 5000\n");
        assert!(e.contains("is now `max_history_undo_logs`"), "{e}");
        let e = err("[policy.watermark]\nhigh_delay_us = 0\n");
        assert!(
            e.contains("`high_delay_us` was removed") && e.contains("delete the key"),
            "{e}"
        );
        let e = err("[policy.flush]\nlast_resort_fill_pct = 95.0\n");
        assert!(e.contains("is now `probe_fill_pct`"), "{e}");
        let e = err("[policy.flush]\ncapacity_max_ratio = 2.0\n");
        assert!(
            e.contains("test.toml:2")
                && e.contains("`capacity_max_ratio` was removed")
                && e.contains("innodb_io_capacity_max is the flush policy's lever")
                && e.contains("delete the key"),
            "{e}"
        );
    }

    #[test]
    fn bad_duration_names_line() {
        let e = err("[sampler]\n\ninterval = \"1 fortnight-ish\"\n");
        assert!(
            e.contains("test.toml:3")
                && e.contains("`sampler.interval`")
                && e.contains("\"500ms\""),
            "{e}"
        );
        let e = err("[sampler]\ninterval = 5\n");
        assert!(
            e.contains("test.toml:2") && e.contains("sampler.interval"),
            "{e}"
        );
    }

    #[test]
    fn out_of_range_names_key_line_and_range() {
        let e = err("[control]\n# c\nmax_sets_per_minute = 0\n");
        assert!(
            e.contains("test.toml:3")
                && e.contains("control.max_sets_per_minute")
                && e.contains("from 1 to 600"),
            "{e}"
        );
        let e = err("[sampler]\ninterval = \"10ms\"\n");
        assert!(
            e.contains(":2") && e.contains("sampler.interval") && e.contains("100ms"),
            "{e}"
        );
        let e = err("[knobs.innodb_purge_threads]\nmin = 4\nmax = 2\n");
        assert!(e.contains(":2") && e.contains("must not exceed"), "{e}");
        let e = err("[knobs.innodb_purge_threads]\nmax = 64\n");
        assert!(e.contains("from 1 to 32"), "{e}");
        let e = err("[knobs.innodb_flush_log_at_trx_commit]\nmax = 1\n");
        assert!(e.contains("not a knob") && e.contains(":1"), "{e}");
        let e = err("[policy.watermark]\nlow_pct = 50\nhigh_pct = 40\n");
        assert!(e.contains(":3") && e.contains("high_pct"), "{e}");
        let e = err("[knobs]\ninnodb_io_capacity = { max = -5 }\n");
        assert!(
            e.contains(":2") && e.contains("knobs.innodb_io_capacity.max"),
            "{e}"
        );
    }

    #[test]
    fn http_and_replica_sections() {
        let c = Config::parse(
            "[http]\nlisten = \"0.0.0.0:9999\"\nstale_after = \"30s\"\n[policy.replica]\nenabled = true\nmax_lag = \"2m\"\n",
            "t",
        )
        .unwrap();
        assert_eq!(c.http.listen, "0.0.0.0:9999");
        assert_eq!(c.http.stale_after, Duration::from_secs(30));
        assert!(c.policy.replica.enabled);
        assert_eq!(c.policy.replica.max_lag, Duration::from_secs(120));
        let e = err("[http]\nlisten = \"localhost\"\n");
        assert!(e.contains(":2") && e.contains("http.listen"), "{e}");
        let e = err("[http]\nstale_after = \"1s\"\n");
        assert!(e.contains("twice sampler.interval"), "{e}");
        let e = err("[policy.replica]\nmax_lag = \"10s\"\nresume_lag = \"10s\"\n");
        assert!(
            e.contains(":3") && e.contains("policy.replica.resume_lag"),
            "{e}"
        );
    }

    #[test]
    fn policy_sections_validate_with_key_line_and_range() {
        let c = Config::parse(
            "[policy.purge_rate]\nbudget_undo_logs = 1000\nbudget_undo_size = \"2GiB\"\n\
             [policy.flush]\nredo_resize = true\nredo_max_size = \"8GiB\"\n\
             [policy.undo]\nenabled = false\nmin_truncate_size = \"256MiB\"\n",
            "t",
        )
        .unwrap();
        assert_eq!(c.policy.purge_rate.budget_undo_logs, 1000);
        assert_eq!(c.policy.purge_rate.budget_undo_bytes, 2 << 30);
        assert!(c.policy.flush.redo_resize);
        assert_eq!(c.policy.flush.redo_max_bytes, 8 << 30);
        assert!(!c.policy.undo.enabled);
        assert_eq!(c.policy.undo.min_truncate_bytes, 256 << 20);
        let e = err("[policy.purge_rate]\n\nmax_delay_us = 0\n");
        assert!(
            e.contains(":3")
                && e.contains("policy.purge_rate.max_delay_us")
                && e.contains("from 1"),
            "{e}"
        );
        let e = err("[policy.purge_rate]\nbudget_undo_size = \"lots\"\n");
        assert!(e.contains(":2") && e.contains("budget_undo_size"), "{e}");
        let e = err("[policy.flush]\ntarget_fill_pct = 20\nidle_fill_pct = 30\n");
        assert!(
            e.contains(":2")
                && e.contains("policy.flush.target_fill_pct")
                && e.contains("idle_fill_pct"),
            "{e}"
        );
        // The grow counts its seconds at the maximum within a pressure episode.
        let e = err("[policy.flush]\ntarget_fill_pct = 96\nprobe_fill_pct = 99\n");
        assert!(
            e.contains("policy.flush.redo_grow_fill_pct")
                && e.contains("must exceed policy.flush.target_fill_pct (96)"),
            "{e}"
        );
        let e = err("[policy.flush]\nraise_factor = 1.0\n");
        assert!(e.contains("from 1.05 to 4"), "{e}");
        let e = err("[policy.flush]\nredo_max_size = \"1MiB\"\n");
        assert!(e.contains(":2") && e.contains("\"8MiB\""), "{e}");
        let e = err("[policy.flush]\nheld_batch = \"10ms\"\n");
        assert!(
            e.contains(":2") && e.contains("policy.flush.held_batch") && e.contains("\"50ms\""),
            "{e}"
        );
        let c = Config::parse("[policy.flush]\nheld_batch = \"750ms\"\n", "t").unwrap();
        assert_eq!(c.policy.flush.held_batch, Duration::from_millis(750));
        let e = err("[policy.undo]\nmax_truncations_per_hour = 0\n");
        assert!(
            e.contains(":2") && e.contains("policy.undo.max_truncations_per_hour"),
            "{e}"
        );
        let e = err("[policy.undo]\nbudget = \"1GiB\"\n");
        assert!(e.contains(":2") && e.contains("budget"), "{e}");
    }

    #[test]
    fn policy_sections_are_read_where_they_are_in_the_file() {
        let e = err("[sampler]\n[policy.nope]\nenabled = true\n");
        assert!(
            e.contains("test.toml:2") && e.contains("nope") && e.contains("`flush`"),
            "{e}"
        );
        let e = err("[policy.flush]\n\nlookahead = 5\n");
        assert!(
            e.contains("test.toml:3") && e.contains("`policy.flush.lookahead`"),
            "{e}"
        );
        let e = err("[policy]\nflush = 3\n");
        assert!(e.contains("test.toml:2"), "{e}");
    }

    #[test]
    fn command_line_settings_are_validated_with_the_file() {
        let o = Overrides {
            interval: Some(Duration::from_secs(30)),
            ..Overrides::default()
        };
        let e = Config::load_with(None, &o).unwrap_err().to_string();
        assert!(
            e.contains("`sampler.window` = \"10s\"")
                && e.contains("twice sampler.interval (1m)")
                && e.contains("--interval sets sampler.interval to 30s"),
            "{e}"
        );
        let o = Overrides {
            interval: Some(Duration::from_secs(2)),
            dry_run: true,
            audit: Some("-".into()),
            state_file: Some("/tmp/s.json".into()),
            listen: Some("127.0.0.1:1".into()),
        };
        let c = Config::load_with(None, &o).unwrap();
        assert_eq!(c.sampler.interval, Duration::from_secs(2));
        assert!(c.control.dry_run && c.audit.is_stdout() && c.http.enabled);
        assert_eq!(c.http.listen, "127.0.0.1:1");
        assert_eq!(c.control.state_file, Path::new("/tmp/s.json"));
        assert_eq!(
            Config::load_with(None, &Overrides::default()).unwrap(),
            Config::default()
        );
    }

    #[test]
    fn dsn_errors_never_show_the_password() {
        let e = err("[server]\ndsn = \"mysql://u:hunter22@h:99999/\"\n");
        assert!(e.contains(":2") && !e.contains("hunter22"), "{e}");
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("64MiB").unwrap(), 64 << 20);
        assert_eq!(parse_size("1G").unwrap(), 1 << 30);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert!(parse_size("lots").is_err());
        assert!(parse_size("99999999999999GiB").is_err());
        assert!(err("[audit]\nmax_size = \"3 parsecs\"\n").contains(":2"));
    }

    proptest::proptest! {
        #[test]
        fn never_panics(s in "\\PC{0,200}") {
            let _ = Config::parse(&s, "fuzz.toml");
        }
    }
}
