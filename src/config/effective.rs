//! The effective configuration as TOML (`innopilot check-config`): the file's own key
//! names, every value with where it came from (default, file, environment or flag),
//! secrets redacted. The output is itself a valid configuration file: fed back with
//! `--config`, it gives the same configuration (apart from a redacted password).
//!
//! Built by layering tables rather than by serialising [`Config`]: the shipped
//! `config/innopilot.toml` holds every default under its file name (a test in
//! `config` checks that it loads to `Config::default()`), the given file is merged
//! over it key by key, and overrides from the environment and the command line go on
//! top. So the names printed are exactly the names a file takes.

use std::collections::BTreeMap;
use std::fmt;

use crate::config::{Config, ConfigError};

/// Every default, under the names a configuration file uses.
const SHIPPED: &str = include_str!("../../config/innopilot.toml");

/// Where a value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    Default,
    /// The configuration file.
    File,
    /// An environment variable, by name.
    Env(&'static str),
    /// A command-line flag, by name.
    Flag(&'static str),
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Default => f.write_str("default"),
            Origin::File => f.write_str("file"),
            Origin::Env(name) => write!(f, "env {name}"),
            Origin::Flag(name) => write!(f, "flag {name}"),
        }
    }
}

/// A value set outside the file: `key` is dotted (`server.dsn`).
#[derive(Debug, Clone)]
pub struct Override {
    pub key: &'static str,
    pub value: String,
    pub origin: Origin,
}

/// The layered configuration, ready to print.
#[derive(Debug, Clone)]
pub struct Effective {
    table: toml::Table,
    origins: BTreeMap<String, Origin>,
    redacted: Vec<String>,
}

impl Effective {
    /// Layers the defaults, the file's text (`file`: its name and content; already
    /// validated by [`Config::parse`]) and `overrides`.
    pub fn build(file: Option<(&str, &str)>, overrides: &[Override]) -> Result<Self, ConfigError> {
        let mut table: toml::Table = toml::from_str(SHIPPED).map_err(|e| ConfigError::Parse {
            path: "config/innopilot.toml (built in)".into(),
            message: e.message().to_string(),
        })?;
        let mut origins = BTreeMap::new();
        for key in leaves(&table, "") {
            origins.insert(key, Origin::Default);
        }
        if let Some((path, src)) = file {
            let given: toml::Table = toml::from_str(src).map_err(|e| ConfigError::Parse {
                path: path.to_string(),
                message: e.message().to_string(),
            })?;
            merge(&mut table, &given, "", &mut origins);
        }
        for o in overrides {
            set(&mut table, o.key, toml::Value::String(o.value.clone()));
            origins.insert(o.key.to_string(), o.origin.clone());
        }
        let mut redacted = Vec::new();
        if let Some(toml::Value::String(dsn)) = table
            .get_mut("server")
            .and_then(|s| s.as_table_mut())
            .and_then(|s| s.get_mut("dsn"))
        {
            let clean = redact_dsn(dsn);
            if clean != *dsn {
                *dsn = clean;
                redacted.push("server.dsn".to_string());
            }
        }
        Ok(Effective {
            table,
            origins,
            redacted,
        })
    }

    /// Where `key` (dotted) came from, if it is set.
    pub fn origin(&self, key: &str) -> Option<&Origin> {
        self.origins.get(key)
    }

    /// The TOML text: every `key = value` line ends with `# <origin>`.
    pub fn to_toml(&self) -> String {
        let plain = toml::to_string(&self.table).unwrap_or_default();
        let mut out = String::new();
        let mut section = String::new();
        for line in plain.lines() {
            let trimmed = line.trim();
            if let Some(h) = trimmed.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                section = h.trim().to_string();
                out.push_str(line);
                out.push('\n');
                continue;
            }
            match trimmed.split_once(" = ") {
                Some((key, _)) if !trimmed.starts_with('#') => {
                    let key = key.trim().trim_matches('"');
                    let path = if section.is_empty() {
                        key.to_string()
                    } else {
                        format!("{section}.{key}")
                    };
                    let origin = self
                        .origins
                        .get(&path)
                        .map(ToString::to_string)
                        .unwrap_or_else(|| "default".into());
                    let note = if self.redacted.contains(&path) {
                        ", password redacted"
                    } else {
                        ""
                    };
                    out.push_str(&format!("{line}  # {origin}{note}\n"));
                }
                _ => {
                    out.push_str(line);
                    out.push('\n');
                }
            }
        }
        out
    }

    /// Validates the layered result as a configuration (what `--config` would load).
    pub fn config(&self) -> Result<Config, ConfigError> {
        Config::parse(&self.to_toml(), "effective configuration")
    }
}

/// Dotted paths of every non-table value under `t`.
fn leaves(t: &toml::Table, prefix: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (k, v) in t {
        let path = join(prefix, k);
        match v {
            toml::Value::Table(sub) => out.extend(leaves(sub, &path)),
            _ => out.push(path),
        }
    }
    out
}

fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_string()
    } else {
        format!("{prefix}.{key}")
    }
}

/// Merges `given` into `base` key by key, recording every leaf it sets as the file's.
fn merge(
    base: &mut toml::Table,
    given: &toml::Table,
    prefix: &str,
    origins: &mut BTreeMap<String, Origin>,
) {
    for (k, v) in given {
        let path = join(prefix, k);
        match (base.get_mut(k), v) {
            (Some(toml::Value::Table(b)), toml::Value::Table(g)) => merge(b, g, &path, origins),
            (_, toml::Value::Table(g)) => {
                let mut fresh = toml::Table::new();
                merge(&mut fresh, g, &path, origins);
                base.insert(k.clone(), toml::Value::Table(fresh));
            }
            (_, value) => {
                base.insert(k.clone(), value.clone());
                origins.insert(path, Origin::File);
            }
        }
    }
}

/// Sets a dotted key, creating tables on the way.
fn set(table: &mut toml::Table, key: &str, value: toml::Value) {
    let mut parts: Vec<&str> = key.split('.').collect();
    let last = parts.pop().unwrap_or(key);
    let mut t = table;
    for p in parts {
        let entry = t
            .entry(p.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        if !entry.is_table() {
            *entry = toml::Value::Table(toml::Table::new());
        }
        t = match entry {
            toml::Value::Table(sub) => sub,
            _ => unreachable!("made a table just above"),
        };
    }
    t.insert(last.to_string(), value);
}

/// A DSN without its password: the one in `user:password@` and a `password=` query
/// parameter are removed, everything else is kept as written.
pub fn redact_dsn(dsn: &str) -> String {
    let (scheme, rest) = match dsn.split_once("://") {
        Some((s, r)) => (format!("{s}://"), r),
        None => (String::new(), dsn),
    };
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let authority = match authority.rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split_once(':').map_or(userinfo, |(u, _)| u);
            format!("{user}@{host}")
        }
        None => authority.to_string(),
    };
    let tail = match tail.split_once('?') {
        Some((path, query)) => {
            let kept: Vec<&str> = query
                .split('&')
                .filter(|kv| {
                    !kv.split('=')
                        .next()
                        .is_some_and(|k| k.eq_ignore_ascii_case("password"))
                })
                .collect();
            if kept.is_empty() {
                path.to_string()
            } else {
                format!("{path}?{}", kept.join("&"))
            }
        }
        None => tail.to_string(),
    };
    format!("{scheme}{authority}{tail}")
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIVEN: &str = r#"
[server]
query_timeout = "3s"
dsn = "mysql://innopilot:s3cret@db1:3307/?ssl-mode=required"

[audit]
max_size = "128MiB"

[knobs]
innodb_purge_threads = { max = 4 }

[policy.replica]
enabled = true
"#;

    #[test]
    fn output_parses_and_round_trips_with_origins() {
        let e = Effective::build(Some(("given.toml", GIVEN)), &[]).unwrap();
        let text = e.to_toml();
        let parsed: toml::Table = toml::from_str(&text).expect("the output is TOML");
        assert!(parsed.contains_key("policy"));
        assert!(!text.contains("s3cret"), "{text}");
        assert!(
            text.contains("dsn = \"mysql://innopilot@db1:3307/?ssl-mode=required\"  # file, password redacted"),
            "{text}"
        );
        assert!(text.contains("max = 4  # file"), "{text}");
        assert!(text.contains("max_size = \"128MiB\"  # file"), "{text}");
        assert!(text.contains("interval = \"1s\"  # default"), "{text}");
        // Fed back, the same configuration, apart from the redacted password.
        let mut original = Config::parse(GIVEN, "given.toml").unwrap();
        original.server.dsn = Some("mysql://innopilot@db1:3307/?ssl-mode=required".into());
        assert_eq!(Config::parse(&text, "out.toml").unwrap(), original);
        // And once more: printing the printed configuration changes nothing.
        let again = Effective::build(Some(("out.toml", &text)), &[]).unwrap();
        assert_eq!(again.config().unwrap(), original);
    }

    #[test]
    fn defaults_alone_give_the_default_config() {
        let e = Effective::build(None, &[]).unwrap();
        assert_eq!(e.config().unwrap(), Config::default());
        assert_eq!(e.origin("sampler.interval"), Some(&Origin::Default));
    }

    #[test]
    fn overrides_name_their_source() {
        let e = Effective::build(
            Some(("given.toml", GIVEN)),
            &[Override {
                key: "server.dsn",
                value: "mysql://u:pw@h/".into(),
                origin: Origin::Env("INNOPILOT_DSN"),
            }],
        )
        .unwrap();
        let text = e.to_toml();
        assert!(
            text.contains("dsn = \"mysql://u@h/\"  # env INNOPILOT_DSN, password redacted"),
            "{text}"
        );
    }

    #[test]
    fn dsn_redaction() {
        assert_eq!(redact_dsn("mysql://u:p@h:1/"), "mysql://u@h:1/");
        assert_eq!(redact_dsn("mysql://u@h"), "mysql://u@h");
        assert_eq!(redact_dsn("mysql://u:p:q@h"), "mysql://u@h");
        assert_eq!(
            redact_dsn("mysql://u@h/?password=x&ssl-mode=required"),
            "mysql://u@h/?ssl-mode=required"
        );
        assert_eq!(redact_dsn("mysql://u@h/?password=x"), "mysql://u@h/");
    }
}
