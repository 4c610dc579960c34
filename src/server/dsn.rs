//! Where to connect and as whom: DSN parsing, password sources (DSN, environment,
//! password file, my.cnf-style defaults file) and redaction. A [`ConnectTarget`] can be
//! printed anywhere: its `Display` never shows the password.

use std::fmt;
use std::path::{Path, PathBuf};

/// A parsed, validated connection target. The password is held separately from
/// everything that is ever printed.
#[derive(Clone, PartialEq, Eq)]
pub struct ConnectTarget {
    pub user: String,
    password: Option<String>,
    pub host: String,
    pub port: u16,
    /// Unix socket path; when set, host/port are only used for messages.
    pub socket: Option<PathBuf>,
    /// `ssl-mode` query parameter: disabled, preferred (default), required, verify_ca,
    /// verify_identity.
    pub ssl_mode: SslMode,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SslMode {
    Disabled,
    #[default]
    Preferred,
    Required,
    VerifyCa,
    VerifyIdentity,
}

impl ConnectTarget {
    pub fn password(&self) -> Option<&str> {
        self.password.as_deref()
    }

    pub fn has_password(&self) -> bool {
        self.password.is_some()
    }

    /// Sets the password unless one is already present (sources are applied in order
    /// of precedence, highest first).
    pub fn fill_password(&mut self, password: Option<String>) {
        if self.password.is_none() {
            self.password = password.filter(|p| !p.is_empty());
        }
    }

    /// Removes the password from any text (server or driver messages may echo parts
    /// of the connection string).
    pub fn redact(&self, text: &str) -> String {
        redact(text, self.password())
    }
}

/// Replaces every occurrence of `secret` in `text` with `***`.
pub fn redact(text: &str, secret: Option<&str>) -> String {
    match secret {
        Some(s) if !s.is_empty() => text.replace(s, "***"),
        _ => text.to_string(),
    }
}

impl fmt::Display for ConnectTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.socket {
            Some(s) => write!(f, "{}@unix:{}", self.user, s.display()),
            None => write!(f, "{}@{}:{}", self.user, self.host, self.port),
        }
    }
}

impl fmt::Debug for ConnectTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnectTarget")
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("host", &self.host)
            .field("port", &self.port)
            .field("socket", &self.socket)
            .field("ssl_mode", &self.ssl_mode)
            .finish()
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DsnError {
    #[error("invalid DSN {shown}: {problem}. Expected mysql://USER[:PASSWORD]@HOST[:PORT][/][?socket=/path/mysqld.sock&ssl-mode=required], e.g. mysql://innopilot@127.0.0.1:3306/")]
    Invalid { shown: String, problem: String },
    #[error("cannot read password file {path}: {message}. Create it with the password on its first line, readable by innopilot only (chmod 600)")]
    PasswordFile { path: String, message: String },
    #[error("cannot read defaults file {path}: {message}")]
    DefaultsFile { path: String, message: String },
    #[error("no server to connect to: pass --dsn, set INNOPILOT_DSN, set server.dsn in the config file, or give a --defaults-file with a [client] section")]
    Missing,
}

/// Shows a DSN with any password replaced, for error messages.
fn shown(dsn: &str) -> String {
    // Redact between "://user:" and the last '@' before the host.
    if let Some(scheme_end) = dsn.find("://") {
        let rest = &dsn[scheme_end + 3..];
        if let Some(at) = rest.rfind('@') {
            let userinfo = &rest[..at];
            if let Some(colon) = userinfo.find(':') {
                return format!(
                    "{}{}:***{}",
                    &dsn[..scheme_end + 3],
                    &userinfo[..colon],
                    &rest[at..]
                );
            }
        } else if let Some(colon) = rest.find(':') {
            // No `@`: "user:password" and "host:port" look alike; hide what follows
            // the colon rather than risk showing a password.
            return format!("{}{}:***", &dsn[..scheme_end + 3], &rest[..colon]);
        }
    }
    dsn.to_string()
}

/// A DSN as it may be shown (configuration dumps, messages): any password replaced by
/// `***`, whether or not the DSN is valid.
pub fn redact_dsn(dsn: &str) -> String {
    shown(dsn)
}

/// A warning when the command line carries a password in `--dsn`: every local user can
/// read a process's arguments (`ps`, `/proc/PID/cmdline`). `args` are the process's
/// arguments; a DSN from INNOPILOT_DSN or the config file is not in them.
pub fn argv_password_warning<S: AsRef<str>>(args: &[S]) -> Option<String> {
    let mut it = args.iter().map(AsRef::as_ref);
    while let Some(a) = it.next() {
        let dsn = match a.strip_prefix("--dsn=") {
            Some(d) => d,
            None if a == "--dsn" => it.next().unwrap_or(""),
            None => continue,
        };
        if parse_dsn(dsn).is_ok_and(|t| t.has_password()) {
            return Some(
                "the --dsn on the command line holds a password, which every local user can \
                 read (ps, /proc/PID/cmdline): put it in INNOPILOT_PASSWORD, \
                 server.password_file or a --defaults-file instead, and leave it out of the DSN"
                    .into(),
            );
        }
    }
    None
}

fn invalid(dsn: &str, problem: impl Into<String>) -> DsnError {
    DsnError::Invalid {
        shown: format!("`{}`", shown(dsn)),
        problem: problem.into(),
    }
}

fn percent_decode(s: &str, dsn: &str) -> Result<String, DsnError> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| invalid(dsn, "a `%` not followed by two hex digits"))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| invalid(dsn, "percent-encoding is not valid UTF-8"))
}

/// Parses `mysql://USER[:PASSWORD]@HOST[:PORT][/][?socket=...&ssl-mode=...]`.
/// `mariadb://` is accepted as a synonym. IPv6 hosts go in brackets.
pub fn parse_dsn(dsn: &str) -> Result<ConnectTarget, DsnError> {
    let dsn_trim = dsn.trim();
    let rest = dsn_trim
        .strip_prefix("mysql://")
        .or_else(|| dsn_trim.strip_prefix("mariadb://"))
        .ok_or_else(|| invalid(dsn, "it must start with mysql://"))?;
    let (main, query) = match rest.split_once('?') {
        Some((m, q)) => (m, Some(q)),
        None => (rest, None),
    };
    let (authority, path) = match main.split_once('/') {
        Some((a, p)) => (a, p),
        None => (main, ""),
    };
    if !path.is_empty() {
        return Err(invalid(
            dsn,
            "a database name is not needed (innopilot reads only global state); remove the path after the host",
        ));
    }
    let (userinfo, hostport) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    let (user, password) = match userinfo {
        None => return Err(invalid(dsn, "no user: write USER@ before the host")),
        Some(u) => match u.split_once(':') {
            Some((user, pw)) => (percent_decode(user, dsn)?, Some(percent_decode(pw, dsn)?)),
            None => (percent_decode(u, dsn)?, None),
        },
    };
    if user.is_empty() {
        return Err(invalid(dsn, "the user name is empty"));
    }
    let (host, port) = if let Some(h6) = hostport.strip_prefix('[') {
        let (h, after) = h6
            .split_once(']')
            .ok_or_else(|| invalid(dsn, "an IPv6 host lacks its closing `]`"))?;
        let port = match after.strip_prefix(':') {
            Some(p) => Some(p),
            None if after.is_empty() => None,
            None => return Err(invalid(dsn, "unexpected text after the IPv6 host")),
        };
        (h.to_string(), port)
    } else {
        match hostport.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), Some(p)),
            None => (hostport.to_string(), None),
        }
    };
    let port = match port {
        None => 3306,
        Some(p) => match p.parse::<u16>() {
            Ok(0) | Err(_) => {
                // The port text is not echoed: with a raw `@` or `?` in a password
                // the split lands inside it, and what looks like a port is a secret.
                return Err(invalid(dsn, "the port is not a number from 1 to 65535"));
            }
            Ok(n) => n,
        },
    };
    let mut target = ConnectTarget {
        user,
        password: password.filter(|p| !p.is_empty()),
        host: if host.is_empty() {
            "localhost".into()
        } else {
            host
        },
        port,
        socket: None,
        ssl_mode: SslMode::default(),
    };
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair
            .split_once('=')
            .ok_or_else(|| {
                invalid(
                    dsn,
                    "a parameter after `?` has no `=` (a `?`, `@` or `/` in the password must be percent-encoded: %3F, %40, %2F)",
                )
            })?;
        let v = percent_decode(v, dsn)?;
        match k {
            "socket" => target.socket = Some(PathBuf::from(v)),
            "ssl-mode" | "ssl_mode" | "sslmode" => {
                target.ssl_mode = match v.to_ascii_lowercase().as_str() {
                    "disabled" => SslMode::Disabled,
                    "preferred" => SslMode::Preferred,
                    "required" => SslMode::Required,
                    "verify_ca" | "verify-ca" => SslMode::VerifyCa,
                    "verify_identity" | "verify-identity" => SslMode::VerifyIdentity,
                    _ => {
                        return Err(invalid(
                            dsn,
                            "ssl-mode is not one of disabled, preferred, required, verify_ca, verify_identity",
                        ))
                    }
                }
            }
            _ => {
                return Err(invalid(
                    dsn,
                    "an unknown parameter after `?` (known: socket, ssl-mode; a `?` or `@` in the password must be percent-encoded: %3F, %40)",
                ))
            }
        }
    }
    Ok(target)
}

/// Reads a password file: the first line, without its line ending.
pub fn read_password_file(path: &Path) -> Result<String, DsnError> {
    let text = std::fs::read_to_string(path).map_err(|e| DsnError::PasswordFile {
        path: path.display().to_string(),
        message: e.to_string(),
    })?;
    Ok(text.lines().next().unwrap_or("").to_string())
}

/// The `[client]` (and `[innopilot]`, which wins) section of a my.cnf-style file.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ClientDefaults {
    pub user: Option<String>,
    pub password: Option<String>,
    pub host: Option<String>,
    pub port: Option<u16>,
    pub socket: Option<PathBuf>,
}

pub fn read_defaults_file(path: &Path) -> Result<ClientDefaults, DsnError> {
    let text = std::fs::read_to_string(path).map_err(|e| DsnError::DefaultsFile {
        path: path.display().to_string(),
        message: e.to_string(),
    })?;
    parse_defaults(&text).map_err(|message| DsnError::DefaultsFile {
        path: path.display().to_string(),
        message,
    })
}

pub fn parse_defaults(text: &str) -> Result<ClientDefaults, String> {
    let mut out = ClientDefaults::default();
    let mut in_section = false;
    for (n, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(sec) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            in_section = matches!(sec.trim(), "client" | "innopilot");
            continue;
        }
        if !in_section {
            continue;
        }
        let (k, v) = match line.split_once('=') {
            Some((k, v)) => (k.trim(), v.trim()),
            None => (line, ""),
        };
        let v = v
            .strip_prefix('"')
            .and_then(|s| s.strip_suffix('"'))
            .or_else(|| v.strip_prefix('\'').and_then(|s| s.strip_suffix('\'')))
            .unwrap_or(v)
            .to_string();
        match k.replace('-', "_").as_str() {
            "user" => out.user = Some(v),
            "password" => out.password = Some(v),
            "host" => out.host = Some(v),
            "port" => {
                out.port = Some(v.parse().map_err(|_| {
                    format!("line {}: port `{v}` is not a number from 1 to 65535", n + 1)
                })?)
            }
            "socket" => out.socket = Some(PathBuf::from(v)),
            _ => {} // other client options (ssl-*, default-character-set) are not ours
        }
    }
    Ok(out)
}

impl ClientDefaults {
    /// Turns a defaults file alone into a target (when no DSN was given).
    pub fn to_target(&self) -> ConnectTarget {
        ConnectTarget {
            user: self.user.clone().unwrap_or_else(|| "root".into()),
            password: self.password.clone().filter(|p| !p.is_empty()),
            host: self.host.clone().unwrap_or_else(|| "localhost".into()),
            port: self.port.unwrap_or(3306),
            socket: self.socket.clone(),
            ssl_mode: SslMode::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_the_common_forms() {
        let t = parse_dsn("mysql://innopilot:s3cret@db1:3307/").unwrap();
        assert_eq!(
            (t.user.as_str(), t.host.as_str(), t.port),
            ("innopilot", "db1", 3307)
        );
        assert_eq!(t.password(), Some("s3cret"));
        let t = parse_dsn("mysql://root@127.0.0.1").unwrap();
        assert_eq!((t.port, t.password()), (3306, None));
        let t = parse_dsn("mysql://u@localhost?socket=/run/mysqld/mysqld.sock").unwrap();
        assert_eq!(
            t.socket.as_deref(),
            Some(Path::new("/run/mysqld/mysqld.sock"))
        );
        let t = parse_dsn("mariadb://u:p%40ss@[::1]:3310/?ssl-mode=required").unwrap();
        assert_eq!(
            (t.host.as_str(), t.port, t.password()),
            ("::1", 3310, Some("p@ss"))
        );
        assert_eq!(t.ssl_mode, SslMode::Required);
    }

    #[test]
    fn errors_never_show_the_password() {
        for bad in [
            "mysql://u:topsecret@h:99999/",
            "mysql://u:topsecret@h/db",
            "mysql://u:topsecret@h?foo=bar",
            "mysql://u:topsecret@h?ssl-mode=maybe",
            "mysql://:topsecret@h",
        ] {
            let e = parse_dsn(bad).unwrap_err().to_string();
            assert!(!e.contains("topsecret"), "{e}");
            assert!(e.contains("mysql://"), "{e}");
        }
        let t = parse_dsn("mysql://u:topsecret@h").unwrap();
        assert!(!format!("{t} {t:?}").contains("topsecret"));
        assert_eq!(
            t.redact("Access denied (using password topsecret)"),
            "Access denied (using password ***)"
        );
    }

    #[test]
    fn errors_never_echo_a_password_holding_at_and_question_marks() {
        // Raw (not percent-encoded) `@` and `?` move every split into the password;
        // no fragment of it may come back in the message.
        for dsn in [
            "mysql://u:p4ss@w?rd-tail@127.0.0.1:3306/",
            "mysql://u:p4ss?w@rd-tail@127.0.0.1:3306/",
            "mysql://u:pa?ssl-mode=w@rd-tail@h/",
            "mysql://u:p4ss@127.0.0.1:rd-tail?@h/",
        ] {
            let e = parse_dsn(dsn).unwrap_err().to_string();
            for fragment in ["p4ss", "w?rd", "w@rd", "rd-tail"] {
                assert!(!e.contains(fragment), "{dsn}: {e}");
            }
            assert!(e.contains("mysql://u:***@"), "{e}");
        }
    }

    #[test]
    fn shown_forms_hide_any_password() {
        assert_eq!(redact_dsn("mysql://u:pw@h:1/"), "mysql://u:***@h:1/");
        assert_eq!(redact_dsn("mysql://u:pw"), "mysql://u:***");
        assert_eq!(redact_dsn("mysql://u@h/"), "mysql://u@h/");
        let args = ["innopilot", "run", "--dsn", "mysql://u:pw@h/"];
        assert!(argv_password_warning(&args).is_some());
        assert!(argv_password_warning(&["x", "--dsn=mysql://u:pw@h/"]).is_some());
        assert!(argv_password_warning(&["x", "--dsn", "mysql://u@h/"]).is_none());
        assert!(argv_password_warning(&["x", "status"]).is_none());
    }

    #[test]
    fn rejects_what_it_cannot_use() {
        assert!(parse_dsn("postgres://u@h").is_err());
        assert!(parse_dsn("mysql://h:3306").is_err());
        assert!(parse_dsn("mysql://u@h:0").is_err());
        assert!(parse_dsn("mysql://u@h:x").is_err());
        assert!(parse_dsn("mysql://u:%zz@h").is_err());
    }

    #[test]
    fn defaults_file_client_section() {
        let d = parse_defaults(
            "[mysqld]\nuser=mysql\n[client]\nuser = innopilot\npassword=\"pw\"\nsocket=/tmp/s.sock\n# c\n[innopilot]\nport=3307\n",
        )
        .unwrap();
        assert_eq!(d.user.as_deref(), Some("innopilot"));
        assert_eq!(d.password.as_deref(), Some("pw"));
        assert_eq!(d.port, Some(3307));
        assert!(parse_defaults("[client]\nport=abc")
            .unwrap_err()
            .contains("line 2"));
    }

    #[test]
    fn fill_password_respects_precedence() {
        let mut t = parse_dsn("mysql://u:first@h").unwrap();
        t.fill_password(Some("second".into()));
        assert_eq!(t.password(), Some("first"));
        let mut t = parse_dsn("mysql://u@h").unwrap();
        t.fill_password(Some(String::new()));
        t.fill_password(Some("second".into()));
        assert_eq!(t.password(), Some("second"));
    }

    proptest! {
        #[test]
        fn never_panics_and_never_leaks(s in ".{0,80}", pw in "[a-zA-Z0-9]{8,16}") {
            let _ = parse_dsn(&s);
            let dsn = format!("mysql://u:{pw}@{s}");
            if let Err(e) = parse_dsn(&dsn) {
                prop_assert!(!e.to_string().contains(&pw));
            }
        }
    }
}
