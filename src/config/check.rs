//! The validation kit every configuration section uses, the general ones in
//! [`crate::config`] and each policy's own in its policy file: the error type, where a
//! key is in the file, and range checks that name the key, its line and the allowed
//! range in one format.

use std::marker::PhantomData;
use std::time::Duration;

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, Visitor};
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
pub(crate) fn locate(src: &str, section: &str, key: &str) -> Option<usize> {
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

/// Configuration keys that were renamed or removed: (old, the new name or `None`,
/// why). An old key is refused with this, not accepted silently.
/// Why the purge-rate PID gains went.
const NO_PID: &str = "the purge-rate delay is a sliding threshold now (the lag follows the drain \
     schedule and the server's per-batch switch does the fast control), with no PID gains to tune";

pub(crate) const KEY_CHANGES: &[(&str, Option<&str>, &str)] = &[
    ("budget_records", Some("budget_undo_logs"), UNDO_LOGS),
    (
        "yield_history_records",
        Some("yield_history_undo_logs"),
        UNDO_LOGS,
    ),
    (
        "max_history_records",
        Some("max_history_undo_logs"),
        UNDO_LOGS,
    ),
    (
        "lower_factor",
        None,
        "innodb_io_capacity_max goes straight back to its baseline when flushing is idle, \
         there is no step down any more",
    ),
    ("kp", None, NO_PID),
    ("ki", None, NO_PID),
    ("kd", None, NO_PID),
    ("high_delay_us", None, NO_REDO_DELAY),
    ("high_max_slowdown_pct", None, NO_REDO_DELAY),
    ("high_max_purge_lag", None, NO_REDO_DELAY),
    ("last_resort_delay_us", None, NO_REDO_DELAY),
    ("last_resort_max_slowdown_pct", None, NO_REDO_DELAY),
    (
        "last_resort_fill_pct",
        Some("probe_fill_pct"),
        "there is no last-resort DML delay any more: above this fill io_capacity probes upward",
    ),
    (
        "capacity_max_ratio",
        None,
        "innodb_io_capacity_max is the flush policy's lever now, held at the page rate the \
         redo needs and capped at what the device sustains (MariaDB's page cleaner flushes \
         from io_capacity_max and in batches of it past 7/8 of the maximum checkpoint age), \
         not a multiple of innodb_io_capacity, which stays at its baseline",
    ),
];

const UNDO_LOGS: &str = "history is counted in undo logs (one per committed transaction that \
                         changed rows), not in rows or records; the value keeps its meaning";
const NO_REDO_DELAY: &str = "redo pressure is never handled by delaying DML (MariaDB applies \
                             that delay exactly when a read view ends, on top of the purge \
                             surge); only [policy.purge_rate] sets the DML delay";

/// A TOML or type error as `path:LINE: `section.key`: message`, like the range errors.
pub(crate) fn parse_error(src: &str, path: &str, e: &toml::de::Error) -> ConfigError {
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
    for (old, new, why) in KEY_CHANGES {
        if message.contains(&format!("unknown field `{old}`")) {
            message = match new {
                Some(new) => format!("`{old}` is now `{new}`: {why}; rename the key"),
                None => format!("`{old}` was removed: {why}; delete the key"),
            };
        }
    }
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

/// What a check gives: the value (`or` when the file does not set it), or why not.
pub type Checked<T> = Result<T, ConfigError>;

/// The file being validated, for messages.
pub struct Ctx<'a> {
    pub(crate) path: &'a str,
    pub(crate) src: &'a str,
}

impl<'a> Ctx<'a> {
    /// The checks of one section, `[policy.flush]` say, named `policy.flush`.
    pub fn section(&'a self, name: impl Into<String>) -> Section<'a> {
        Section {
            cx: self,
            name: name.into(),
        }
    }
}

/// The range checks of one section: every error names `section.key`, its line and the
/// allowed range. It displays as the section's name (`policy.flush`).
pub struct Section<'a> {
    cx: &'a Ctx<'a>,
    name: String,
}

impl std::fmt::Display for Section<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name)
    }
}

impl Section<'_> {
    pub fn invalid(
        &self,
        key: &str,
        value: impl ToString,
        allowed: impl Into<String>,
    ) -> ConfigError {
        ConfigError::Invalid {
            path: self.cx.path.to_string(),
            line: locate(self.cx.src, &self.name, key),
            key: format!("{}.{key}", self.name),
            value: value.to_string(),
            allowed: allowed.into(),
        }
    }

    pub fn duration(
        &self,
        key: &str,
        v: Option<Duration>,
        default: Duration,
        min: Duration,
        max: Duration,
    ) -> Result<Duration, ConfigError> {
        let d = v.unwrap_or(default);
        if d < min || d > max {
            return Err(self.invalid(
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

    pub fn int(&self, key: &str, v: Option<i64>, or: u64, min: u64, max: u64) -> Checked<u64> {
        let Some(n) = v else { return Ok(or) };
        if n < 0 || (n as u64) < min || (n as u64) > max {
            return Err(self.invalid(key, n, format!("allowed from {min} to {max}")));
        }
        Ok(n as u64)
    }

    pub fn float(&self, key: &str, v: Option<f64>, or: f64, min: f64, max: f64) -> Checked<f64> {
        let x = v.unwrap_or(or);
        if !x.is_finite() || x < min || x > max {
            return Err(self.invalid(key, x, format!("allowed from {min} to {max}")));
        }
        Ok(x)
    }

    /// A size string ("64MiB") within `[min, max]` bytes.
    pub fn size(&self, key: &str, v: Option<String>, or: u64, min: u64, max: u64) -> Checked<u64> {
        let Some(s) = v else { return Ok(or) };
        let n = parse_size(&s).map_err(|e| self.invalid(key, format!("{s:?}"), e))?;
        if n < min || n > max {
            let show = |b: u64| {
                if b >= 1 << 20 && b % (1 << 20) == 0 {
                    format!("\"{}MiB\"", b >> 20)
                } else {
                    b.to_string()
                }
            };
            return Err(self.invalid(
                key,
                format!("{s:?}"),
                format!("allowed from {} to {}", show(min), show(max)),
            ));
        }
        Ok(n)
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
        Knob::MaxDirtyPagesPctLwm => (0, 99),
        Knob::FlushNeighbors => (0, 2),
        Knob::LruScanDepth => (100, 1 << 32),
    }
}

// ---- reading `[policy.*]` tables from the whole document ---------------------------
//
// Each policy's raw form is read from the whole file, not from a detached table, so
// that a type error or an unknown key still carries its position in the file.

/// Reads the raw form of `[policy.<want>]` (`Default` when the file has none). With
/// `want` = `None` only checks that every `[policy.*]` table is one of `names`.
pub(crate) fn read_policy_table<R: de::DeserializeOwned + Default>(
    src: &str,
    names: &[&'static str],
    want: Option<&str>,
) -> Result<R, toml::de::Error> {
    let seed = Tables::<R> {
        names,
        want,
        top: true,
        raw: PhantomData,
    };
    Ok(seed
        .deserialize(toml::Deserializer::new(src))?
        .unwrap_or_default())
}

/// The document (`top`) or its `policy` table.
struct Tables<'a, R> {
    names: &'a [&'static str],
    want: Option<&'a str>,
    top: bool,
    raw: PhantomData<R>,
}

impl<'de, R: Deserialize<'de>> DeserializeSeed<'de> for Tables<'_, R> {
    type Value = Option<R>;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Option<R>, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de, R: Deserialize<'de>> Visitor<'de> for Tables<'_, R> {
    type Value = Option<R>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str(if self.top {
            "a TOML document"
        } else {
            "a table of policy sections"
        })
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<R>, A::Error> {
        let mut out = None;
        if self.top {
            while let Some(key) = map.next_key::<String>()? {
                if key == "policy" {
                    out = map.next_value_seed(Tables { top: false, ..self })?;
                } else {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            return Ok(out);
        }
        while let Some(name) = map.next_key_seed(Name(self.names))? {
            if Some(name.as_str()) == self.want {
                out = Some(map.next_value::<R>()?);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(out)
    }
}

/// A `[policy.NAME]` table name, refused unless registered (worded as serde words an
/// unknown field, like every other unknown key).
struct Name<'a>(&'a [&'static str]);

impl<'de> DeserializeSeed<'de> for Name<'_> {
    type Value = String;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<String, D::Error> {
        d.deserialize_identifier(self)
    }
}

impl<'de> Visitor<'de> for Name<'_> {
    type Value = String;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a policy name")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<String, E> {
        if self.0.contains(&v) {
            return Ok(v.to_string());
        }
        let quoted: Vec<String> = self.0.iter().map(|n| format!("`{n}`")).collect();
        let expected = match quoted.len() {
            0 => "there are no fields".to_string(),
            1 => quoted[0].clone(),
            2 => format!("{} or {}", quoted[0], quoted[1]),
            _ => format!("one of {}", quoted.join(", ")),
        };
        Err(E::custom(format!(
            "unknown field `{v}`, expected {expected}"
        )))
    }
}
