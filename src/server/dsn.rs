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
    /// TLS settings as given; [`Tls::mode`] resolves the mode actually used.
    pub tls: Tls,
}

/// `ssl-mode`, as the MySQL client names its values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SslMode {
    Disabled,
    #[default]
    Preferred,
    Required,
    VerifyCa,
    VerifyIdentity,
}

impl SslMode {
    pub const NAMES: &'static str = "disabled, preferred, required, verify-ca, verify-identity";

    pub fn name(self) -> &'static str {
        match self {
            SslMode::Disabled => "disabled",
            SslMode::Preferred => "preferred",
            SslMode::Required => "required",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyIdentity => "verify-identity",
        }
    }
}

impl std::str::FromStr for SslMode {
    type Err = String;

    /// Accepts the client's spellings: `verify-ca`, `verify_ca`, `VERIFY_CA`.
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(
            match s.trim().to_ascii_lowercase().replace('_', "-").as_str() {
                "disabled" => SslMode::Disabled,
                "preferred" => SslMode::Preferred,
                "required" => SslMode::Required,
                "verify-ca" => SslMode::VerifyCa,
                "verify-identity" => SslMode::VerifyIdentity,
                _ => return Err(format!("ssl-mode `{s}` is not one of {}", SslMode::NAMES)),
            },
        )
    }
}

impl fmt::Display for SslMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// TLS settings from one source (DSN, configuration, defaults file); unset fields are
/// filled from the next source by [`Tls::fill_from`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tls {
    pub mode: Option<SslMode>,
    /// CA certificate(s) to verify the server with (PEM).
    pub ca: Option<PathBuf>,
    /// Client certificate (PEM), for accounts created `REQUIRE X509`.
    pub cert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    pub key: Option<PathBuf>,
}

impl Tls {
    /// Fills what is unset here from a source of lower precedence.
    pub fn fill_from(&mut self, other: &Tls) {
        self.mode = self.mode.or(other.mode);
        self.ca = self.ca.take().or_else(|| other.ca.clone());
        self.cert = self.cert.take().or_else(|| other.cert.clone());
        self.key = self.key.take().or_else(|| other.key.clone());
    }

    /// The mode used: as given; else `verify-ca` when a CA is given (a CA is given to
    /// be checked, as the MySQL client does); else `preferred`.
    pub fn effective_mode(&self) -> SslMode {
        match (self.mode, &self.ca) {
            (Some(m), _) => m,
            (None, Some(_)) => SslMode::VerifyCa,
            (None, None) => SslMode::Preferred,
        }
    }

    /// A client certificate needs its key and the other way round; verification needs
    /// something to verify against only when a CA is named. Checked before connecting.
    pub fn validate(&self) -> Result<(), String> {
        match (&self.cert, &self.key) {
            (Some(_), None) => return Err("ssl-cert is given without ssl-key: give both (the client certificate and its private key)".into()),
            (None, Some(_)) => return Err("ssl-key is given without ssl-cert: give both (the client certificate and its private key)".into()),
            _ => {}
        }
        if self.effective_mode() == SslMode::Disabled && (self.ca.is_some() || self.cert.is_some())
        {
            return Err("ssl-mode is disabled but ssl-ca or ssl-cert is given: remove them or choose another ssl-mode".into());
        }
        for (name, path) in [
            ("ssl-ca", &self.ca),
            ("ssl-cert", &self.cert),
            ("ssl-key", &self.key),
        ] {
            if let Some(p) = path {
                if let Err(e) = std::fs::metadata(p) {
                    return Err(format!("{name} {}: {e}", p.display()));
                }
            }
        }
        Ok(())
    }
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
            .field("tls", &self.tls)
            .finish()
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DsnError {
    #[error("invalid DSN {shown}: {problem}. Expected mysql://USER[:PASSWORD]@HOST[:PORT][/][?socket=/path/mysqld.sock&ssl-mode=verify-ca&ssl-ca=/path/ca.pem], e.g. mysql://innopilot@127.0.0.1:3306/")]
    Invalid { shown: String, problem: String },
    #[error("cannot read password file {path}: {message}. Create it with the password on its first line, readable by innopilot only (chmod 600)")]
    PasswordFile { path: String, message: String },
    #[error("cannot read defaults file {path}: {message}")]
    DefaultsFile { path: String, message: String },
    #[error("TLS settings: {0}")]
    Tls(String),
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
        }
    }
    dsn.to_string()
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
                return Err(invalid(
                    dsn,
                    format!("port `{p}` is not a number from 1 to 65535"),
                ))
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
        tls: Tls::default(),
    };
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair
            .split_once('=')
            .ok_or_else(|| invalid(dsn, format!("parameter `{pair}` has no `=`")))?;
        let v = percent_decode(v, dsn)?;
        match k {
            "socket" => target.socket = Some(PathBuf::from(v)),
            "ssl-mode" | "ssl_mode" | "sslmode" => {
                target.tls.mode = Some(v.parse().map_err(|e: String| invalid(dsn, e))?)
            }
            "ssl-ca" | "ssl_ca" | "sslca" => target.tls.ca = Some(PathBuf::from(v)),
            "ssl-cert" | "ssl_cert" | "sslcert" => target.tls.cert = Some(PathBuf::from(v)),
            "ssl-key" | "ssl_key" | "sslkey" => target.tls.key = Some(PathBuf::from(v)),
            other => {
                return Err(invalid(
                    dsn,
                    format!("unknown parameter `{other}` (known: socket, ssl-mode, ssl-ca, ssl-cert, ssl-key)"),
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
    pub tls: Tls,
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
            "ssl_mode" => {
                out.tls.mode = Some(v.parse().map_err(|e| format!("line {}: {e}", n + 1))?)
            }
            "ssl_ca" => out.tls.ca = Some(PathBuf::from(v)),
            "ssl_cert" => out.tls.cert = Some(PathBuf::from(v)),
            "ssl_key" => out.tls.key = Some(PathBuf::from(v)),
            // The MariaDB client's spellings: `ssl` asks for TLS, `skip-ssl` refuses
            // it, `ssl-verify-server-cert` checks the certificate and the host name.
            "ssl" if !matches!(v.as_str(), "0" | "off" | "OFF" | "false") => {
                out.tls.mode = out.tls.mode.or(Some(SslMode::Required))
            }
            "skip_ssl" | "ssl" => out.tls.mode = Some(SslMode::Disabled),
            "ssl_verify_server_cert" if !matches!(v.as_str(), "0" | "off" | "OFF" | "false") => {
                out.tls.mode = Some(SslMode::VerifyIdentity)
            }
            _ => {} // other client options (default-character-set, ...) are not ours
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
            tls: self.tls.clone(),
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
        assert_eq!(t.tls.mode, Some(SslMode::Required));
        let t = parse_dsn(
            "mysql://u@h/?ssl-mode=VERIFY_IDENTITY&ssl-ca=/ca.pem&ssl-cert=/c.pem&ssl-key=/k.pem",
        )
        .unwrap();
        assert_eq!(t.tls.effective_mode(), SslMode::VerifyIdentity);
        assert_eq!(
            (
                t.tls.ca.as_deref(),
                t.tls.cert.as_deref(),
                t.tls.key.as_deref()
            ),
            (
                Some(Path::new("/ca.pem")),
                Some(Path::new("/c.pem")),
                Some(Path::new("/k.pem"))
            )
        );
        // A CA alone means "verify with it".
        let t = parse_dsn("mysql://u@h/?ssl-ca=/ca.pem").unwrap();
        assert_eq!(t.tls.effective_mode(), SslMode::VerifyCa);
        assert_eq!(
            parse_dsn("mysql://u@h").unwrap().tls.effective_mode(),
            SslMode::Preferred
        );
    }

    #[test]
    fn tls_settings_are_checked_before_connecting() {
        let t = parse_dsn("mysql://u@h/?ssl-cert=/c.pem").unwrap();
        assert!(t.tls.validate().unwrap_err().contains("ssl-key"));
        let t = parse_dsn("mysql://u@h/?ssl-mode=disabled&ssl-ca=/ca.pem").unwrap();
        assert!(t.tls.validate().unwrap_err().contains("disabled"));
        let t = parse_dsn("mysql://u@h/?ssl-ca=/nonexistent/ca.pem").unwrap();
        assert!(t
            .tls
            .validate()
            .unwrap_err()
            .contains("/nonexistent/ca.pem"));
        let mut dsn = Tls {
            mode: Some(SslMode::Required),
            ..Tls::default()
        };
        dsn.fill_from(&Tls {
            mode: Some(SslMode::Disabled),
            ca: Some("/ca.pem".into()),
            ..Tls::default()
        });
        assert_eq!(
            (dsn.mode, dsn.ca.as_deref()),
            (Some(SslMode::Required), Some(Path::new("/ca.pem")))
        );
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
        let d = parse_defaults("[client]\nssl-ca=/ca.pem\nssl-verify-server-cert\n").unwrap();
        assert_eq!(d.tls.mode, Some(SslMode::VerifyIdentity));
        assert_eq!(d.tls.ca.as_deref(), Some(Path::new("/ca.pem")));
        let d = parse_defaults("[client]\nskip-ssl\n").unwrap();
        assert_eq!(d.tls.mode, Some(SslMode::Disabled));
        assert!(parse_defaults("[client]\nssl-mode=sometimes")
            .unwrap_err()
            .contains("verify-identity"));
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
