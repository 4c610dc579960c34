//! Configuration: raw TOML (`deny_unknown_fields`) is validated once into a typed
//! [`Config`]; every error names the key, the line in the file and the allowed range.
//! `config/innopilot.toml` documents every key, and a test checks that loading it gives
//! exactly [`Config::default()`], so the shipped file and the code cannot drift apart.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::server::Knob;

/// A configuration problem. Exit code 2.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {message}")]
    Read { path: String, message: String },
    #[error("{path}: {message}")]
    Parse { path: String, message: String },
    #[error("{path}{}: `{key}` = {value} is invalid: {allowed}", line.map(|l| format!(":{l}")).unwrap_or_default())]
    Invalid {
        path: String,
        line: Option<usize>,
        key: String,
        value: String,
        allowed: String,
    },
}

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
    /// Purge debt: InnoDB history list length, records.
    pub max_history_records: u64,
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

#[derive(Debug, Clone, PartialEq)]
pub struct PolicyConfig {
    pub watermark: WatermarkConfig,
    pub purge_rate: PurgeRateConfig,
    pub flush: FlushConfig,
    pub undo: UndoConfig,
    pub replica: ReplicaConfig,
}

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

/// The MariaDB 10.6.5 adaptive-purge algorithm, configurable.
#[derive(Debug, Clone, PartialEq)]
pub struct WatermarkConfig {
    pub enabled: bool,
    /// Redo fill (percent of the sync-flush point) where throttling starts.
    pub low_pct: f64,
    /// Redo fill where purge runs with one thread and DML delay starts.
    pub high_pct: f64,
    /// Number of buckets = purge threads at low fill; 0 = the value found at start.
    pub max_purge_threads: u64,
    /// Fill must move this many percentage points past a boundary to change bucket.
    pub hysteresis_pct: f64,
    /// Above the high watermark (MariaDB): innodb_max_purge_lag_delay to propose at
    /// most, µs …
    pub high_delay_us: u64,
    /// … and at most what slows row changes by this share (%), at the row time measured.
    pub high_max_slowdown_pct: f64,
    /// Above the high watermark (MariaDB): innodb_max_purge_lag to propose, records.
    pub high_max_purge_lag: u64,
    /// Above the high watermark where purge threads are read-only (MySQL): the smaller
    /// innodb_purge_batch_size to propose.
    pub high_batch_size: u64,
    /// Purgeable history (records) above which foreground protection yields: purge
    /// threads go back to their baseline until it is under 80 % of this. 0 = never
    /// (the default, and MariaDB 10.6.5 as published, which MDEV-32050 reverted for
    /// the unbounded history it left behind). Opt-in because it trades stalls for
    /// debt: docs/policies.md has the simulator's numbers.
    pub yield_history_records: u64,
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
                max_sets_per_minute: 30,
            },
            audit: AuditConfig {
                path: PathBuf::from("/var/lib/innopilot/audit.jsonl"),
                max_bytes: 64 << 20,
                keep: 5,
            },
            knobs: Knob::ALL.iter().map(|k| (*k, default_limits(*k))).collect(),
            policy: PolicyConfig {
                watermark: WatermarkConfig {
                    enabled: true,
                    low_pct: 20.0,
                    high_pct: 80.0,
                    max_purge_threads: 0,
                    hysteresis_pct: 2.0,
                    high_delay_us: 10_000,
                    high_max_slowdown_pct: 20.0,
                    high_max_purge_lag: 100_000,
                    high_batch_size: 100,
                    yield_history_records: 0,
                },
                purge_rate: PurgeRateConfig::default(),
                flush: FlushConfig::default(),
                undo: UndoConfig::default(),
                replica: ReplicaConfig {
                    enabled: false,
                    max_lag: Duration::from_secs(60),
                    resume_lag: Duration::from_secs(10),
                    batch_size: 100,
                },
            },
            check: CheckConfig {
                enabled: true,
                max_history_records: 1_000_000,
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
        Knob::MaxPurgeLag => l(true, 0, 4_294_967_295, 4_294_967_295, 5),
        Knob::MaxPurgeLagDelay => l(true, 0, 100_000, 10_000, 2),
        Knob::IoCapacity => l(true, 100, 20_000, 2_000, 5),
        Knob::IoCapacityMax => l(true, 200, 40_000, 4_000, 5),
        Knob::LogFileSize => l(false, 64 << 20, 4 << 30, 1 << 30, 600),
        Knob::RedoLogCapacity => l(false, 64 << 20, 4 << 30, 1 << 30, 600),
        Knob::UndoLogTruncate => l(true, 0, 1, 1, 60),
        Knob::MaxUndoLogSize => l(true, 10 << 20, 16 << 30, 16 << 30, 60),
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
    #[serde(default)]
    policy: RawPolicy,
    #[serde(default)]
    http: RawHttp,
    #[serde(default)]
    check: RawCheck,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCheck {
    enabled: Option<bool>,
    max_history_records: Option<i64>,
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
struct RawReplica {
    enabled: Option<bool>,
    #[serde(default, with = "humantime_serde")]
    max_lag: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    resume_lag: Option<Duration>,
    batch_size: Option<i64>,
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

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPolicy {
    #[serde(default)]
    watermark: RawWatermark,
    #[serde(default)]
    purge_rate: RawPurgeRate,
    #[serde(default)]
    flush: RawFlush,
    #[serde(default)]
    undo: RawUndo,
    #[serde(default)]
    replica: RawReplica,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWatermark {
    enabled: Option<bool>,
    low_pct: Option<f64>,
    high_pct: Option<f64>,
    max_purge_threads: Option<i64>,
    hysteresis_pct: Option<f64>,
    high_delay_us: Option<i64>,
    high_max_slowdown_pct: Option<f64>,
    high_max_purge_lag: Option<i64>,
    high_batch_size: Option<i64>,
    yield_history_records: Option<i64>,
}

/// Parses "64MiB", "512M", "1G", "4096" (bytes).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a size like \"64MiB\""))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        other => {
            return Err(format!(
                "unknown size unit {other:?} (use B, KiB, MiB or GiB)"
            ))
        }
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("{s:?} is too large"))
}

/// Finds the 1-based line of `key` in `[section]` (or of the section header).
fn locate(src: &str, section: &str, key: &str) -> Option<usize> {
    let mut current = String::new();
    let mut header_line = None;
    for (i, raw) in src.lines().enumerate() {
        let line = raw.trim();
        if let Some(h) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            current = h.trim().replace([' ', '"'], "");
            if current == section {
                header_line = Some(i + 1);
            }
            continue;
        }
        let k = line
            .split('=')
            .next()
            .unwrap_or("")
            .trim()
            .trim_matches('"');
        if current == section && k == key {
            return Some(i + 1);
        }
        // Inline tables: `[knobs]` + `innodb_purge_threads = { max = 4 }`.
        if let Some((parent, child)) = section.rsplit_once('.') {
            if current == parent && k == child && line.contains(key) {
                return Some(i + 1);
            }
        }
    }
    header_line
}

/// A TOML or type error as `path:LINE: `section.key`: message`, like the range errors.
fn parse_error(src: &str, path: &str, e: &toml::de::Error) -> ConfigError {
    let Some(span) = e.span() else {
        return ConfigError::Parse {
            path: path.to_string(),
            message: e.message().to_string(),
        };
    };
    let start = span.start.min(src.len());
    let line = src[..start].matches('\n').count() + 1;
    // The section and key the error points into, for a message that names them.
    let mut section = String::new();
    for l in src[..start].lines() {
        if let Some(h) = l.trim().strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = h.trim().to_string();
        }
    }
    let this_line = src.lines().nth(line - 1).unwrap_or("");
    let key = this_line.split('=').next().unwrap_or("").trim();
    let mut message = e.message().trim_end().to_string();
    if message.contains("expected a duration")
        || message.contains("invalid type") && message.contains("duration")
    {
        message.push_str(" (durations are strings such as \"500ms\", \"1s\", \"2m\")");
    }
    let named = if key.is_empty() || key.starts_with('[') || !this_line.contains('=') {
        String::new()
    } else if section.is_empty() {
        format!("`{key}`: ")
    } else {
        format!("`{section}.{key}`: ")
    };
    ConfigError::Parse {
        path: format!("{path}:{line}"),
        message: format!("{named}{message}"),
    }
}

struct Ctx<'a> {
    path: &'a str,
    src: &'a str,
}

impl Ctx<'_> {
    fn invalid(
        &self,
        section: &str,
        key: &str,
        value: impl ToString,
        allowed: impl Into<String>,
    ) -> ConfigError {
        ConfigError::Invalid {
            path: self.path.to_string(),
            line: locate(self.src, section, key),
            key: format!("{section}.{key}"),
            value: value.to_string(),
            allowed: allowed.into(),
        }
    }

    fn duration(
        &self,
        section: &str,
        key: &str,
        v: Option<Duration>,
        default: Duration,
        min: Duration,
        max: Duration,
    ) -> Result<Duration, ConfigError> {
        let d = v.unwrap_or(default);
        if d < min || d > max {
            return Err(self.invalid(
                section,
                key,
                format!("\"{}\"", humantime::format_duration(d)),
                format!(
                    "allowed from \"{}\" to \"{}\"",
                    humantime::format_duration(min),
                    humantime::format_duration(max)
                ),
            ));
        }
        Ok(d)
    }

    fn int(
        &self,
        section: &str,
        key: &str,
        v: Option<i64>,
        default: u64,
        min: u64,
        max: u64,
    ) -> Result<u64, ConfigError> {
        let Some(n) = v else { return Ok(default) };
        if n < 0 || (n as u64) < min || (n as u64) > max {
            return Err(self.invalid(section, key, n, format!("allowed from {min} to {max}")));
        }
        Ok(n as u64)
    }

    fn float(
        &self,
        section: &str,
        key: &str,
        v: Option<f64>,
        default: f64,
        min: f64,
        max: f64,
    ) -> Result<f64, ConfigError> {
        let x = v.unwrap_or(default);
        if !x.is_finite() || x < min || x > max {
            return Err(self.invalid(section, key, x, format!("allowed from {min} to {max}")));
        }
        Ok(x)
    }
}

impl Config {
    /// Reads and validates a file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let src = std::fs::read_to_string(path).map_err(|e| ConfigError::Read {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        Config::parse(&src, &path.display().to_string())
    }

    /// Validates TOML text; `path` is used in messages only.
    pub fn parse(src: &str, path: &str) -> Result<Config, ConfigError> {
        let raw: Raw = toml::from_str(src).map_err(|e| parse_error(src, path, &e))?;
        let cx = Ctx { path, src };
        let d = Config::default();
        let secs = Duration::from_secs;
        let ms = Duration::from_millis;

        let server = ServerConfig {
            dsn: raw.server.dsn.filter(|s| !s.trim().is_empty()),
            password_file: raw.server.password_file,
            defaults_file: raw.server.defaults_file,
            connect_timeout: cx.duration(
                "server",
                "connect_timeout",
                raw.server.connect_timeout,
                d.server.connect_timeout,
                ms(100),
                secs(60),
            )?,
            query_timeout: cx.duration(
                "server",
                "query_timeout",
                raw.server.query_timeout,
                d.server.query_timeout,
                ms(100),
                secs(60),
            )?,
            resize_timeout: cx.duration(
                "server",
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
                            cx.invalid(
                                "server",
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
            crate::server::dsn::parse_dsn(dsn)
                .map_err(|e| cx.invalid("server", "dsn", "(not shown)", e.to_string()))?;
        }
        let interval = cx.duration(
            "sampler",
            "interval",
            raw.sampler.interval,
            d.sampler.interval,
            ms(100),
            secs(60),
        )?;
        let window = cx.duration(
            "sampler",
            "window",
            raw.sampler.window,
            d.sampler.window,
            secs(1),
            secs(3600),
        )?;
        if window < interval * 2 {
            return Err(cx.invalid(
                "sampler",
                "window",
                format!("\"{}\"", humantime::format_duration(window)),
                format!(
                    "must be at least twice sampler.interval ({})",
                    humantime::format_duration(interval * 2)
                ),
            ));
        }
        if server.query_timeout * 3 > interval.max(secs(1)) * 10 {
            // A sample is up to 3 queries; a timeout far beyond the interval would let
            // one slow server stall the loop for many ticks.
            return Err(cx.invalid(
                "server",
                "query_timeout",
                format!("\"{}\"", humantime::format_duration(server.query_timeout)),
                "must be at most 3⅓ × max(sampler.interval, 1s)",
            ));
        }
        let control = ControlConfig {
            dry_run: raw.control.dry_run.unwrap_or(d.control.dry_run),
            state_file: raw.control.state_file.unwrap_or(d.control.state_file),
            restore_timeout: cx.duration(
                "control",
                "restore_timeout",
                raw.control.restore_timeout,
                d.control.restore_timeout,
                secs(1),
                secs(300),
            )?,
            reconnect_budget: cx.duration(
                "control",
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
            max_sets_per_minute: cx.int(
                "control",
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
                    .map_err(|e| cx.invalid("audit", "max_size", format!("{s:?}"), e))?,
            },
            keep: cx.int("audit", "keep", raw.audit.keep, d.audit.keep as u64, 1, 100)? as u32,
        };
        if audit.path.as_os_str().is_empty() {
            return Err(cx.invalid(
                "audit",
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
            let sec = format!("knobs.{name}");
            let def = default_limits(knob);
            let hard = hard_range(knob);
            let lim = KnobLimits {
                manage: rk.manage.unwrap_or(def.manage),
                min: cx.int(&sec, "min", rk.min, def.min, hard.0, hard.1)?,
                max: cx.int(&sec, "max", rk.max, def.max, hard.0, hard.1)?,
                max_step: cx.int(&sec, "max_step", rk.max_step, def.max_step, 1, u64::MAX)?,
                min_dwell: cx.duration(
                    &sec,
                    "min_dwell",
                    rk.min_dwell,
                    def.min_dwell,
                    Duration::ZERO,
                    secs(86_400),
                )?,
            };
            if lim.min > lim.max {
                return Err(cx.invalid(
                    &sec,
                    "min",
                    lim.min,
                    format!("must not exceed {sec}.max ({})", lim.max),
                ));
            }
            knobs.insert(knob, lim);
        }

        let w = raw.policy.watermark;
        let dw = &d.policy.watermark;
        let s = "policy.watermark";
        let watermark = WatermarkConfig {
            enabled: w.enabled.unwrap_or(dw.enabled),
            low_pct: cx.float(s, "low_pct", w.low_pct, dw.low_pct, 0.0, 100.0)?,
            high_pct: cx.float(s, "high_pct", w.high_pct, dw.high_pct, 0.0, 150.0)?,
            max_purge_threads: cx.int(
                s,
                "max_purge_threads",
                w.max_purge_threads,
                dw.max_purge_threads,
                0,
                32,
            )?,
            hysteresis_pct: cx.float(
                s,
                "hysteresis_pct",
                w.hysteresis_pct,
                dw.hysteresis_pct,
                0.0,
                20.0,
            )?,
            high_delay_us: cx.int(
                s,
                "high_delay_us",
                w.high_delay_us,
                dw.high_delay_us,
                0,
                10_000_000,
            )?,
            high_max_slowdown_pct: cx.float(
                s,
                "high_max_slowdown_pct",
                w.high_max_slowdown_pct,
                dw.high_max_slowdown_pct,
                1.0,
                90.0,
            )?,
            high_max_purge_lag: cx.int(
                s,
                "high_max_purge_lag",
                w.high_max_purge_lag,
                dw.high_max_purge_lag,
                1,
                4_294_967_295,
            )?,
            high_batch_size: cx.int(
                s,
                "high_batch_size",
                w.high_batch_size,
                dw.high_batch_size,
                1,
                5000,
            )?,
            yield_history_records: cx.int(
                s,
                "yield_history_records",
                w.yield_history_records,
                dw.yield_history_records,
                0,
                10_000_000_000,
            )?,
        };
        if watermark.high_pct <= watermark.low_pct + watermark.hysteresis_pct {
            return Err(cx.invalid(
                s,
                "high_pct",
                watermark.high_pct,
                format!(
                    "must exceed low_pct + hysteresis_pct ({})",
                    watermark.low_pct + watermark.hysteresis_pct
                ),
            ));
        }

        let r = raw.policy.replica;
        let dr = &d.policy.replica;
        let s = "policy.replica";
        let replica = ReplicaConfig {
            enabled: r.enabled.unwrap_or(dr.enabled),
            max_lag: cx.duration(s, "max_lag", r.max_lag, dr.max_lag, secs(1), secs(86_400))?,
            resume_lag: cx.duration(
                s,
                "resume_lag",
                r.resume_lag,
                dr.resume_lag,
                Duration::ZERO,
                secs(86_400),
            )?,
            batch_size: cx.int(s, "batch_size", r.batch_size, dr.batch_size, 1, 5000)?,
        };
        if replica.resume_lag >= replica.max_lag {
            return Err(cx.invalid(
                s,
                "resume_lag",
                format!("\"{}\"", humantime::format_duration(replica.resume_lag)),
                format!(
                    "must be below policy.replica.max_lag (\"{}\")",
                    humantime::format_duration(replica.max_lag)
                ),
            ));
        }

        let h = raw.http;
        let listen = h.listen.unwrap_or(d.http.listen);
        if listen.parse::<std::net::SocketAddr>().is_err() {
            return Err(cx.invalid(
                "http",
                "listen",
                format!("{listen:?}"),
                "an IP:PORT such as \"127.0.0.1:29104\" or \"[::1]:29104\"",
            ));
        }
        let http = HttpConfig {
            enabled: h.enabled.unwrap_or(d.http.enabled),
            listen,
            stale_after: cx.duration(
                "http",
                "stale_after",
                h.stale_after,
                d.http.stale_after,
                secs(1),
                secs(3600),
            )?,
        };
        if http.stale_after < interval * 2 {
            return Err(cx.invalid(
                "http",
                "stale_after",
                format!("\"{}\"", humantime::format_duration(http.stale_after)),
                format!(
                    "must be at least twice sampler.interval ({})",
                    humantime::format_duration(interval * 2)
                ),
            ));
        }

        let c = raw.check;
        let check = CheckConfig {
            enabled: c.enabled.unwrap_or(d.check.enabled),
            max_history_records: cx.int(
                "check",
                "max_history_records",
                c.max_history_records,
                d.check.max_history_records,
                1,
                u32::MAX as u64 * 1000,
            )?,
            max_redo_fill_pct: cx.float(
                "check",
                "max_redo_fill_pct",
                c.max_redo_fill_pct,
                d.check.max_redo_fill_pct,
                1.0,
                100.0,
            )?,
            max_replica_lag: cx.duration(
                "check",
                "max_replica_lag",
                c.max_replica_lag,
                d.check.max_replica_lag,
                secs(1),
                secs(86_400),
            )?,
        };

        let purge_rate = cx.purge_rate(raw.policy.purge_rate, &d.policy.purge_rate)?;
        let flush = cx.flush(raw.policy.flush, &d.policy.flush)?;
        let undo = cx.undo(raw.policy.undo, &d.policy.undo)?;

        Ok(Config {
            server,
            sampler: SamplerConfig { interval, window },
            control,
            audit,
            knobs,
            policy: PolicyConfig {
                watermark,
                replica,
                purge_rate,
                flush,
                undo,
            },
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

/// The widest range config may ask for, per knob (the servers' documented limits).
pub fn hard_range(knob: Knob) -> (u64, u64) {
    match knob {
        Knob::PurgeThreads => (1, 32),
        Knob::PurgeBatchSize => (1, 5000),
        Knob::MaxPurgeLag => (0, 4_294_967_295),
        Knob::MaxPurgeLagDelay => (0, 10_000_000),
        Knob::IoCapacity | Knob::IoCapacityMax => (100, 4_294_967_295),
        Knob::LogFileSize => (4 << 20, 512 << 30),
        Knob::RedoLogCapacity => (8 << 20, 128 << 30),
        Knob::UndoLogTruncate => (0, 1),
        Knob::MaxUndoLogSize => (10 << 20, 256 << 40),
    }
}

// ---- the control policies of issue 4: purge rate, flush, undo ----------------------

/// Rate-based purge control (seed 000, `crate::policy::purge_rate`): keeps *purgeable*
/// history shrinking gradually toward its budget with the least DML delay, and never
/// delays DML for history a read view blocks.
#[derive(Debug, Clone, PartialEq)]
pub struct PurgeRateConfig {
    pub enabled: bool,
    /// Purgeable history (undo logs, as `Innodb_history_list_length` counts them)
    /// tolerated before innopilot acts.
    pub budget_records: u64,
    /// Undo tablespace size above which the records budget shrinks in proportion
    /// (at most 4×); 0 = ignore undo size.
    pub budget_undo_bytes: u64,
    /// The excess over budget should drain over this long: the target history
    /// derivative is −excess / drain_horizon.
    pub drain_horizon: Duration,
    /// PID gains on the normalized rate error (dimensionless, per second, seconds).
    pub kp: f64,
    pub ki: f64,
    pub kd: f64,
    /// Largest DML delay proposed, µs per statement.
    pub max_delay_us: u64,
    /// The delay never pushes the DML rate more than this (%) below what it was
    /// without delay: the users' cost is bounded, debt drains slower instead.
    pub max_dml_slowdown_pct: f64,
    /// Purge threads may be raised up to this where they are dynamic (MariaDB ≥ 10.7.1);
    /// 0 = never raise them.
    pub max_purge_threads: u64,
    /// Purge threads are raised only while redo fill (% of the sync point) is below this.
    pub threads_max_redo_fill_pct: f64,
    /// Below this DML rate (rows/s) the load is quiet: delays are released and purge
    /// catches up on its own.
    pub quiet_dml_rate: f64,
    /// A read view must be at least this old to count as blocking purge.
    pub min_view_age: Duration,
}

impl Default for PurgeRateConfig {
    fn default() -> Self {
        PurgeRateConfig {
            enabled: true,
            budget_records: 500_000,
            budget_undo_bytes: 4 << 30,
            drain_horizon: Duration::from_secs(300),
            kp: 0.3,
            ki: 0.05,
            kd: 0.0,
            max_delay_us: 5_000,
            max_dml_slowdown_pct: 20.0,
            max_purge_threads: 8,
            threads_max_redo_fill_pct: 20.0,
            quiet_dml_rate: 100.0,
            min_view_age: Duration::from_secs(10),
        }
    }
}

/// Flushing and redo headroom (seed 001, `crate::policy::flush`): keeps checkpoint age
/// under a target share of the sync-flush point by raising innodb_io_capacity ahead of
/// need, within what the device has shown it can do.
#[derive(Debug, Clone, PartialEq)]
pub struct FlushConfig {
    pub enabled: bool,
    /// Keep redo fill (and its projection `lookahead` ahead) under this, % of the sync point.
    pub target_fill_pct: f64,
    /// Below this fill, with fill not rising, io_capacity goes back toward its baseline.
    pub idle_fill_pct: f64,
    /// How far ahead the fill trend is projected.
    pub lookahead: Duration,
    /// A projection alone (fill itself under the target) must reach the target for
    /// this long before io_capacity is raised: a warm-up ramp is not a peak.
    pub projection_persist: Duration,
    /// io_capacity is multiplied by this when more flushing is needed …
    pub raise_factor: f64,
    /// … and by this when idle (never below the baseline).
    pub lower_factor: f64,
    /// Never propose io_capacity above this × the best flush rate the device has shown.
    pub device_headroom: f64,
    /// innodb_io_capacity_max = this × innodb_io_capacity (never below its baseline).
    pub capacity_max_ratio: f64,
    /// Last resort: above this fill, with flushing at its ceiling and fill still rising,
    /// a small DML delay instead of a stall.
    pub last_resort_fill_pct: f64,
    pub last_resort_delay_us: u64,
    /// The last-resort delay costs users at most this share of their row rate, at the
    /// row time measured (a cap on top of `last_resort_delay_us`).
    pub last_resort_max_slowdown_pct: f64,
    /// Opt-in: grow the redo log at sustained peaks, shrink it back when quiet.
    pub redo_resize: bool,
    pub redo_grow_fill_pct: f64,
    pub redo_grow_after: Duration,
    pub redo_shrink_fill_pct: f64,
    pub redo_shrink_after: Duration,
    /// Disk budget: the redo log never grows beyond this.
    pub redo_max_bytes: u64,
    /// Crash recovery should take at most about this long (bounds the redo size).
    pub recovery_time_budget: Duration,
}

impl Default for FlushConfig {
    fn default() -> Self {
        FlushConfig {
            enabled: true,
            target_fill_pct: 75.0,
            idle_fill_pct: 30.0,
            lookahead: Duration::from_secs(30),
            projection_persist: Duration::from_secs(10),
            raise_factor: 1.5,
            lower_factor: 0.8,
            device_headroom: 2.0,
            capacity_max_ratio: 2.0,
            last_resort_fill_pct: 95.0,
            last_resort_delay_us: 1_000,
            last_resort_max_slowdown_pct: 20.0,
            redo_resize: false,
            redo_grow_fill_pct: 80.0,
            redo_grow_after: Duration::from_secs(120),
            redo_shrink_fill_pct: 25.0,
            redo_shrink_after: Duration::from_secs(1800),
            redo_max_bytes: 4 << 30,
            recovery_time_budget: Duration::from_secs(300),
        }
    }
}

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

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPurgeRate {
    enabled: Option<bool>,
    budget_records: Option<i64>,
    budget_undo_size: Option<String>,
    #[serde(default, with = "humantime_serde")]
    drain_horizon: Option<Duration>,
    kp: Option<f64>,
    ki: Option<f64>,
    kd: Option<f64>,
    max_delay_us: Option<i64>,
    max_dml_slowdown_pct: Option<f64>,
    max_purge_threads: Option<i64>,
    threads_max_redo_fill_pct: Option<f64>,
    quiet_dml_rate: Option<f64>,
    #[serde(default, with = "humantime_serde")]
    min_view_age: Option<Duration>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFlush {
    enabled: Option<bool>,
    target_fill_pct: Option<f64>,
    idle_fill_pct: Option<f64>,
    #[serde(default, with = "humantime_serde")]
    lookahead: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    projection_persist: Option<Duration>,
    raise_factor: Option<f64>,
    lower_factor: Option<f64>,
    device_headroom: Option<f64>,
    capacity_max_ratio: Option<f64>,
    last_resort_fill_pct: Option<f64>,
    last_resort_delay_us: Option<i64>,
    last_resort_max_slowdown_pct: Option<f64>,
    redo_resize: Option<bool>,
    redo_grow_fill_pct: Option<f64>,
    #[serde(default, with = "humantime_serde")]
    redo_grow_after: Option<Duration>,
    redo_shrink_fill_pct: Option<f64>,
    #[serde(default, with = "humantime_serde")]
    redo_shrink_after: Option<Duration>,
    redo_max_size: Option<String>,
    #[serde(default, with = "humantime_serde")]
    recovery_time_budget: Option<Duration>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawUndo {
    enabled: Option<bool>,
    budget_size: Option<String>,
    release_below_pct: Option<f64>,
    min_truncate_size: Option<String>,
    max_truncations_per_hour: Option<i64>,
    undo_tablespaces: Option<i64>,
}

impl Ctx<'_> {
    /// A size string ("64MiB") within `[min, max]` bytes.
    fn size(
        &self,
        section: &str,
        key: &str,
        v: Option<String>,
        default: u64,
        min: u64,
        max: u64,
    ) -> Result<u64, ConfigError> {
        let Some(s) = v else { return Ok(default) };
        let n = parse_size(&s).map_err(|e| self.invalid(section, key, format!("{s:?}"), e))?;
        if n < min || n > max {
            let show = |b: u64| {
                if b >= 1 << 20 && b % (1 << 20) == 0 {
                    format!("\"{}MiB\"", b >> 20)
                } else {
                    b.to_string()
                }
            };
            return Err(self.invalid(
                section,
                key,
                format!("{s:?}"),
                format!("allowed from {} to {}", show(min), show(max)),
            ));
        }
        Ok(n)
    }

    fn purge_rate(
        &self,
        r: RawPurgeRate,
        d: &PurgeRateConfig,
    ) -> Result<PurgeRateConfig, ConfigError> {
        let s = "policy.purge_rate";
        let secs = Duration::from_secs;
        Ok(PurgeRateConfig {
            enabled: r.enabled.unwrap_or(d.enabled),
            budget_records: self.int(
                s,
                "budget_records",
                r.budget_records,
                d.budget_records,
                1,
                4_294_967_295,
            )?,
            budget_undo_bytes: self.size(
                s,
                "budget_undo_size",
                r.budget_undo_size,
                d.budget_undo_bytes,
                0,
                1 << 50,
            )?,
            drain_horizon: self.duration(
                s,
                "drain_horizon",
                r.drain_horizon,
                d.drain_horizon,
                secs(10),
                secs(86_400),
            )?,
            kp: self.float(s, "kp", r.kp, d.kp, 0.0, 10.0)?,
            ki: self.float(s, "ki", r.ki, d.ki, 0.0, 1.0)?,
            kd: self.float(s, "kd", r.kd, d.kd, 0.0, 100.0)?,
            max_delay_us: self.int(
                s,
                "max_delay_us",
                r.max_delay_us,
                d.max_delay_us,
                1,
                100_000,
            )?,
            max_dml_slowdown_pct: self.float(
                s,
                "max_dml_slowdown_pct",
                r.max_dml_slowdown_pct,
                d.max_dml_slowdown_pct,
                1.0,
                90.0,
            )?,
            max_purge_threads: self.int(
                s,
                "max_purge_threads",
                r.max_purge_threads,
                d.max_purge_threads,
                0,
                32,
            )?,
            threads_max_redo_fill_pct: self.float(
                s,
                "threads_max_redo_fill_pct",
                r.threads_max_redo_fill_pct,
                d.threads_max_redo_fill_pct,
                0.0,
                100.0,
            )?,
            quiet_dml_rate: self.float(
                s,
                "quiet_dml_rate",
                r.quiet_dml_rate,
                d.quiet_dml_rate,
                0.0,
                1e9,
            )?,
            min_view_age: self.duration(
                s,
                "min_view_age",
                r.min_view_age,
                d.min_view_age,
                Duration::ZERO,
                secs(3600),
            )?,
        })
    }

    fn flush(&self, r: RawFlush, d: &FlushConfig) -> Result<FlushConfig, ConfigError> {
        let s = "policy.flush";
        let secs = Duration::from_secs;
        let f = FlushConfig {
            enabled: r.enabled.unwrap_or(d.enabled),
            target_fill_pct: self.float(
                s,
                "target_fill_pct",
                r.target_fill_pct,
                d.target_fill_pct,
                5.0,
                100.0,
            )?,
            idle_fill_pct: self.float(
                s,
                "idle_fill_pct",
                r.idle_fill_pct,
                d.idle_fill_pct,
                0.0,
                100.0,
            )?,
            lookahead: self.duration(
                s,
                "lookahead",
                r.lookahead,
                d.lookahead,
                Duration::ZERO,
                secs(600),
            )?,
            projection_persist: self.duration(
                s,
                "projection_persist",
                r.projection_persist,
                d.projection_persist,
                Duration::ZERO,
                secs(600),
            )?,
            raise_factor: self.float(
                s,
                "raise_factor",
                r.raise_factor,
                d.raise_factor,
                1.05,
                4.0,
            )?,
            lower_factor: self.float(
                s,
                "lower_factor",
                r.lower_factor,
                d.lower_factor,
                0.1,
                0.99,
            )?,
            device_headroom: self.float(
                s,
                "device_headroom",
                r.device_headroom,
                d.device_headroom,
                1.0,
                10.0,
            )?,
            capacity_max_ratio: self.float(
                s,
                "capacity_max_ratio",
                r.capacity_max_ratio,
                d.capacity_max_ratio,
                1.0,
                10.0,
            )?,
            last_resort_fill_pct: self.float(
                s,
                "last_resort_fill_pct",
                r.last_resort_fill_pct,
                d.last_resort_fill_pct,
                0.0,
                150.0,
            )?,
            last_resort_delay_us: self.int(
                s,
                "last_resort_delay_us",
                r.last_resort_delay_us,
                d.last_resort_delay_us,
                0,
                100_000,
            )?,
            last_resort_max_slowdown_pct: self.float(
                s,
                "last_resort_max_slowdown_pct",
                r.last_resort_max_slowdown_pct,
                d.last_resort_max_slowdown_pct,
                1.0,
                90.0,
            )?,
            redo_resize: r.redo_resize.unwrap_or(d.redo_resize),
            redo_grow_fill_pct: self.float(
                s,
                "redo_grow_fill_pct",
                r.redo_grow_fill_pct,
                d.redo_grow_fill_pct,
                0.0,
                150.0,
            )?,
            redo_grow_after: self.duration(
                s,
                "redo_grow_after",
                r.redo_grow_after,
                d.redo_grow_after,
                Duration::ZERO,
                secs(86_400),
            )?,
            redo_shrink_fill_pct: self.float(
                s,
                "redo_shrink_fill_pct",
                r.redo_shrink_fill_pct,
                d.redo_shrink_fill_pct,
                0.0,
                100.0,
            )?,
            redo_shrink_after: self.duration(
                s,
                "redo_shrink_after",
                r.redo_shrink_after,
                d.redo_shrink_after,
                Duration::ZERO,
                secs(7 * 86_400),
            )?,
            redo_max_bytes: self.size(
                s,
                "redo_max_size",
                r.redo_max_size,
                d.redo_max_bytes,
                8 << 20,
                512 << 30,
            )?,
            recovery_time_budget: self.duration(
                s,
                "recovery_time_budget",
                r.recovery_time_budget,
                d.recovery_time_budget,
                secs(1),
                secs(86_400),
            )?,
        };
        let order = [
            (
                "target_fill_pct",
                f.target_fill_pct,
                "idle_fill_pct",
                f.idle_fill_pct,
            ),
            (
                "last_resort_fill_pct",
                f.last_resort_fill_pct,
                "target_fill_pct",
                f.target_fill_pct,
            ),
            (
                "redo_grow_fill_pct",
                f.redo_grow_fill_pct,
                "redo_shrink_fill_pct",
                f.redo_shrink_fill_pct,
            ),
        ];
        for (key, v, below, w) in order {
            if v <= w {
                return Err(self.invalid(s, key, v, format!("must exceed {s}.{below} ({w})")));
            }
        }
        Ok(f)
    }

    fn undo(&self, r: RawUndo, d: &UndoConfig) -> Result<UndoConfig, ConfigError> {
        let s = "policy.undo";
        Ok(UndoConfig {
            enabled: r.enabled.unwrap_or(d.enabled),
            budget_bytes: self.size(
                s,
                "budget_size",
                r.budget_size,
                d.budget_bytes,
                10 << 20,
                1 << 50,
            )?,
            release_below_pct: self.float(
                s,
                "release_below_pct",
                r.release_below_pct,
                d.release_below_pct,
                0.0,
                99.0,
            )?,
            min_truncate_bytes: self.size(
                s,
                "min_truncate_size",
                r.min_truncate_size,
                d.min_truncate_bytes,
                10 << 20,
                256 << 40,
            )?,
            max_truncations_per_hour: self.int(
                s,
                "max_truncations_per_hour",
                r.max_truncations_per_hour,
                d.max_truncations_per_hour,
                1,
                3600,
            )?,
            undo_tablespaces: self.int(
                s,
                "undo_tablespaces",
                r.undo_tablespaces,
                d.undo_tablespaces,
                0,
                127,
            )?,
        })
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
            "[policy.purge_rate]\nbudget_records = 1000\nbudget_undo_size = \"2GiB\"\n\
             [policy.flush]\nredo_resize = true\nredo_max_size = \"8GiB\"\n\
             [policy.undo]\nenabled = false\nmin_truncate_size = \"256MiB\"\n",
            "t",
        )
        .unwrap();
        assert_eq!(c.policy.purge_rate.budget_records, 1000);
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
        let e = err("[policy.flush]\nraise_factor = 1.0\n");
        assert!(e.contains("from 1.05 to 4"), "{e}");
        let e = err("[policy.flush]\nredo_max_size = \"1MiB\"\n");
        assert!(e.contains(":2") && e.contains("\"8MiB\""), "{e}");
        let e = err("[policy.undo]\nmax_truncations_per_hour = 0\n");
        assert!(
            e.contains(":2") && e.contains("policy.undo.max_truncations_per_hour"),
            "{e}"
        );
        let e = err("[policy.undo]\nbudget = \"1GiB\"\n");
        assert!(e.contains(":2") && e.contains("budget"), "{e}");
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
