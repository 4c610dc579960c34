//! Where to connect and as whom: DSN parsing, password sources (DSN, environment,
//! password file, my.cnf-style option files) and redaction. A [`ConnectTarget`] can be
//! printed anywhere: its `Display` never shows the password.
//!
//! The DSN is parsed here rather than by `sqlx::mysql::MySqlConnectOptions::from_str`
//! (whose spellings it accepts: `ssl-mode`/`sslmode`, `ssl-ca`/`sslca`, ...): sqlx 0.8
//! ignores unknown parameters, so a typo such as `ssl_mod=required` would connect in
//! plain text without a word, and it offers no getter for the password or the TLS
//! files, which innopilot needs to layer the other sources on top and to redact
//! messages. The parsed target is handed to sqlx as typed options.

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
    /// TLS settings as given; [`Tls::effective_mode`] resolves the mode used.
    pub tls: Tls,
    /// Setting (`user`, `host`, `port`, `socket`, `ssl-mode`, ...) → where it came
    /// from (`--dsn`, `FILE:LINE [client]`, `built-in default`, ...), for `status
    /// --verbose`. Never holds the password.
    pub sources: std::collections::BTreeMap<String, String>,
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

    /// Sets the password whatever was there (a password typed at `--ask-pass`).
    pub fn replace_password(&mut self, password: String) {
        self.password = Some(password);
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
    #[error("the option files read ({files}) name no user, host, port or socket in [client], [client-server], [client-mariadb] or [innopilot]: say where to connect there, or pass --dsn or -h/-P/-S")]
    EmptyDefaults { files: String },
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
        tls: Tls::default(),
        sources: Default::default(),
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
                target.tls.mode = Some(v.parse().map_err(|e: String| invalid(dsn, e))?)
            }
            "ssl-ca" | "ssl_ca" | "sslca" => target.tls.ca = Some(PathBuf::from(v)),
            "ssl-cert" | "ssl_cert" | "sslcert" => target.tls.cert = Some(PathBuf::from(v)),
            "ssl-key" | "ssl_key" | "sslkey" => target.tls.key = Some(PathBuf::from(v)),
            _ => {
                return Err(invalid(
                    dsn,
                    "an unknown parameter after `?` (known: socket, ssl-mode, ssl-ca, ssl-cert, ssl-key; a `?` or `@` in the password must be percent-encoded: %3F, %40)",
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

/// Option groups read from a defaults file, as the `mariadb` client reads them;
/// `[innopilot]` is read last and wins.
pub const OPTION_GROUPS: &[&str] = &["client", "client-server", "client-mariadb", "innopilot"];

/// Where the `mariadb` client looks for option files when none is named, in order
/// (later files override earlier ones): `/etc/my.cnf`, `/etc/mysql/my.cnf`,
/// `~/.my.cnf`.
pub fn standard_option_files() -> Vec<PathBuf> {
    let mut files = vec![
        PathBuf::from("/etc/my.cnf"),
        PathBuf::from("/etc/mysql/my.cnf"),
    ];
    if let Some(home) = std::env::var_os("HOME") {
        files.push(Path::new(&home).join(".my.cnf"));
    }
    files
}

/// Connection settings from option files, with where each came from.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ClientDefaults {
    pub user: Option<String>,
    pub password: Option<String>,
    pub host: Option<String>,
    pub port: Option<u16>,
    pub socket: Option<PathBuf>,
    pub tls: Tls,
    /// Setting name → `FILE:LINE [group]` it was read from.
    pub sources: std::collections::BTreeMap<&'static str, String>,
    /// Every file read, includes too, in order.
    pub files: Vec<PathBuf>,
}

impl ClientDefaults {
    /// Whether any setting that says where to connect, or as whom, was found.
    pub fn is_empty(&self) -> bool {
        self.user.is_none() && self.host.is_none() && self.port.is_none() && self.socket.is_none()
    }

    /// Fills unset settings from `other` (of lower precedence).
    fn fill_from(&mut self, other: ClientDefaults) {
        self.user = self.user.take().or(other.user);
        self.password = self.password.take().or(other.password);
        self.host = self.host.take().or(other.host);
        self.port = self.port.or(other.port);
        self.socket = self.socket.take().or(other.socket);
        self.tls.fill_from(&other.tls);
        for (k, v) in other.sources {
            self.sources.entry(k).or_insert(v);
        }
    }
}

/// Nesting limit for `!include`: deeper means a cycle.
const MAX_INCLUDE_DEPTH: usize = 10;

/// Settings of the plain groups and of `[innopilot]` while reading.
#[derive(Default)]
struct Reading {
    client: ClientDefaults,
    innopilot: ClientDefaults,
    files: Vec<PathBuf>,
}

impl Reading {
    fn finish(self) -> ClientDefaults {
        let mut out = self.innopilot;
        out.fill_from(self.client);
        out.files = self.files;
        out
    }
}

/// Reads an option file as the `mariadb` client does: the groups in
/// [`OPTION_GROUPS`], `!include FILE` and `!includedir DIR` (its `*.cnf` files, in
/// name order; relative paths are relative to the including file), later settings
/// overriding earlier ones.
pub fn read_defaults_file(path: &Path) -> Result<ClientDefaults, DsnError> {
    read_defaults_files(&[path.to_path_buf()], false)
}

/// Reads several option files in order (later ones win); with `skip_missing`, files
/// that do not exist are skipped (the standard search path), else they are errors.
pub fn read_defaults_files(
    paths: &[PathBuf],
    skip_missing: bool,
) -> Result<ClientDefaults, DsnError> {
    let mut r = Reading::default();
    for p in paths {
        if skip_missing && !p.exists() {
            continue;
        }
        read_into(p, &mut r, 0)?;
    }
    Ok(r.finish())
}

fn read_into(path: &Path, r: &mut Reading, depth: usize) -> Result<(), DsnError> {
    let fail = |message: String| DsnError::DefaultsFile {
        path: path.display().to_string(),
        message,
    };
    if depth > MAX_INCLUDE_DEPTH {
        return Err(fail(format!(
            "!include nested deeper than {MAX_INCLUDE_DEPTH} files (a file including itself?)"
        )));
    }
    let text = std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?;
    r.files.push(path.to_path_buf());
    parse_into(&text, Some(path), r, depth)
}

/// Parses option-file text (no `!include` resolution beyond the current directory);
/// errors are `line N: problem`.
pub fn parse_defaults(text: &str) -> Result<ClientDefaults, String> {
    let mut r = Reading::default();
    match parse_into(text, None, &mut r, 0) {
        Ok(()) => Ok(r.finish()),
        Err(DsnError::DefaultsFile { path, message }) if path.is_empty() => Err(message),
        Err(e) => Err(e.to_string()),
    }
}

fn parse_into(
    text: &str,
    path: Option<&Path>,
    r: &mut Reading,
    depth: usize,
) -> Result<(), DsnError> {
    let name = path.map(|p| p.display().to_string()).unwrap_or_default();
    let fail = |message: String| DsnError::DefaultsFile {
        path: name.clone(),
        message,
    };
    let relative = |target: &str| -> PathBuf {
        let t = Path::new(target);
        match path.and_then(Path::parent) {
            Some(dir) if t.is_relative() => dir.join(t),
            _ => t.to_path_buf(),
        }
    };
    let mut group: Option<&'static str> = None;
    for (n, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(target) = line.strip_prefix("!includedir") {
            let dir = relative(target.trim());
            let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
                .map_err(|e| {
                    fail(format!(
                        "line {}: !includedir {}: {e}",
                        n + 1,
                        dir.display()
                    ))
                })?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "cnf") && p.is_file())
                .collect();
            files.sort();
            for f in files {
                read_into(&f, r, depth + 1)?;
            }
            continue;
        }
        if let Some(target) = line.strip_prefix("!include") {
            read_into(&relative(target.trim()), r, depth + 1)?;
            continue;
        }
        if let Some(sec) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            let sec = sec.trim().to_ascii_lowercase();
            group = OPTION_GROUPS.iter().copied().find(|g| *g == sec);
            continue;
        }
        let Some(g) = group else { continue };
        let (k, v) = match line.split_once('=') {
            Some((k, v)) => (k.trim(), v.trim()),
            None => (line, ""),
        };
        let quoted = v
            .strip_prefix('"')
            .and_then(|s| s.strip_suffix('"'))
            .or_else(|| v.strip_prefix('\'').and_then(|s| s.strip_suffix('\'')));
        // An unquoted value ends at a ` #` comment.
        let v = match quoted {
            Some(q) => q.to_string(),
            None => v.split(" #").next().unwrap_or(v).trim().to_string(),
        };
        let out = if g == "innopilot" {
            &mut r.innopilot
        } else {
            &mut r.client
        };
        let here = if name.is_empty() {
            format!("line {} [{g}]", n + 1)
        } else {
            format!("{name}:{} [{g}]", n + 1)
        };
        let is_on = !matches!(v.to_ascii_lowercase().as_str(), "0" | "off" | "false");
        let setting: Option<&'static str> = match k.replace('_', "-").to_ascii_lowercase().as_str()
        {
            "user" => {
                out.user = Some(v);
                Some("user")
            }
            "password" => {
                out.password = Some(v);
                Some("password")
            }
            "host" => {
                out.host = Some(v);
                Some("host")
            }
            "port" => {
                out.port = Some(v.parse().ok().filter(|p| *p > 0).ok_or_else(|| {
                    fail(format!(
                        "line {}: port `{v}` is not a number from 1 to 65535",
                        n + 1
                    ))
                })?);
                Some("port")
            }
            "socket" => {
                out.socket = Some(PathBuf::from(v));
                Some("socket")
            }
            "ssl-mode" => {
                out.tls.mode = Some(
                    v.parse()
                        .map_err(|e| fail(format!("line {}: {e}", n + 1)))?,
                );
                Some("ssl-mode")
            }
            "ssl-ca" => {
                out.tls.ca = Some(relative(&v));
                Some("ssl-ca")
            }
            "ssl-cert" => {
                out.tls.cert = Some(relative(&v));
                Some("ssl-cert")
            }
            "ssl-key" => {
                out.tls.key = Some(relative(&v));
                Some("ssl-key")
            }
            // The MariaDB client's spellings: `ssl` asks for TLS, `skip-ssl` refuses
            // it, `ssl-verify-server-cert` checks the certificate and the host name.
            "ssl" if is_on => {
                out.tls.mode = out.tls.mode.or(Some(SslMode::Required));
                Some("ssl-mode")
            }
            "skip-ssl" | "ssl" => {
                out.tls.mode = Some(SslMode::Disabled);
                Some("ssl-mode")
            }
            "ssl-verify-server-cert" if is_on => {
                out.tls.mode = Some(SslMode::VerifyIdentity);
                Some("ssl-mode")
            }
            _ => None, // other client options (default-character-set, ...) are not ours
        };
        if let Some(s) = setting {
            out.sources.insert(s, here);
        }
    }
    Ok(())
}

impl ClientDefaults {
    /// Turns option files alone into a target (when no DSN was given). Refuses files
    /// that say nothing about where to connect instead of guessing a server.
    pub fn to_target(&self) -> Result<ConnectTarget, DsnError> {
        if self.is_empty() {
            return Err(DsnError::EmptyDefaults {
                files: self
                    .files
                    .iter()
                    .map(|f| f.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
        let mut sources = self.sources.clone();
        sources.remove("password");
        let mut default = |k: &'static str| {
            sources
                .entry(k)
                .or_insert_with(|| "built-in default".to_string());
        };
        if self.socket.is_none() {
            default("host");
            default("port");
        }
        default("user");
        Ok(ConnectTarget {
            user: self.user.clone().unwrap_or_else(|| "root".into()),
            password: self.password.clone().filter(|p| !p.is_empty()),
            host: self.host.clone().unwrap_or_else(|| "localhost".into()),
            port: self.port.unwrap_or(3306),
            socket: self.socket.clone(),
            tls: self.tls.clone(),
            sources: sources
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
        })
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
        assert_eq!(shown("mysql://u:pw@h:1/"), "mysql://u:***@h:1/");
        assert_eq!(shown("mysql://u:pw"), "mysql://u:***");
        assert_eq!(shown("mysql://u@h/"), "mysql://u@h/");
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
