//! Resolves where to connect and with which password, from the CLI, the environment,
//! the config file and my.cnf-style option files, in that order of precedence, and
//! records where each setting came from; and waits for a server that is not up yet
//! ([`wait_for_server`]).

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::config::Config;
pub use crate::server::dsn::standard_option_files;
use crate::server::dsn::{
    parse_dsn, read_defaults_file, read_defaults_files, read_password_file, ConnectTarget, DsnError,
};
use crate::server::mysql::{LiveOptions, LiveServer};
use crate::server::{Server, ServerError};

/// Environment variable holding the password (never printed).
pub const PASSWORD_ENV: &str = "INNOPILOT_PASSWORD";

/// Connection settings from the command line (and the environment clap reads).
#[derive(Debug, Clone, Default)]
pub struct ConnectArgs<'a> {
    pub dsn: Option<&'a str>,
    /// Where `dsn` came from, for messages: `--dsn` or `INNOPILOT_DSN`.
    pub dsn_source: &'static str,
    pub defaults_file: Option<&'a Path>,
    /// Percona-style `-h`, `-u`, `-P`, `-S`: win over every other source.
    pub host: Option<&'a str>,
    pub user: Option<&'a str>,
    pub port: Option<u16>,
    pub socket: Option<&'a Path>,
    /// A password typed at `--ask-pass`: wins over every other source.
    pub typed_password: Option<String>,
    /// Option files read when nothing else says where to connect (the `mariadb`
    /// client's search path, [`standard_option_files`]); empty in tests.
    pub search_path: Vec<PathBuf>,
}

/// Builds the connection target.
///
/// Target: `--dsn`/INNOPILOT_DSN, else `server.dsn`, else the defaults file (`--defaults-file`
/// or `server.defaults_file`), else the standard option files; then `-h -u -P -S`.
/// TLS: the DSN's parameters, then `[server]` ssl_*, then the option files'.
/// Password: `--ask-pass`, else the DSN's, else INNOPILOT_PASSWORD, else
/// `server.password_file`, else the option files'. Every setting records its source
/// ([`ConnectTarget::sources`]); none is guessed silently.
pub fn resolve(
    args: &ConnectArgs<'_>,
    env_password: Option<String>,
    config: &Config,
) -> Result<ConnectTarget, DsnError> {
    let dsn = match args.dsn.filter(|d| !d.trim().is_empty()) {
        Some(d) => Some((d, args.dsn_source.to_string())),
        None => config
            .server
            .dsn
            .as_deref()
            .map(|d| (d, "server.dsn in the configuration".to_string())),
    };
    let defaults = match args
        .defaults_file
        .or(config.server.defaults_file.as_deref())
    {
        Some(path) => Some(read_defaults_file(path)?),
        None if dsn.is_none() && !args.search_path.is_empty() => {
            let d = read_defaults_files(&args.search_path, true)?;
            (!d.files.is_empty()).then_some(d)
        }
        None => None,
    };
    let flags_say_where = args.host.is_some() || args.socket.is_some() || args.port.is_some();
    let mut target = match (dsn, &defaults) {
        (Some((d, source)), _) => {
            let mut t = parse_dsn(d)?;
            for k in ["user", "host", "port"] {
                t.sources.insert(k.into(), source.clone());
            }
            if t.socket.is_some() {
                t.sources.insert("socket".into(), source.clone());
            }
            if t.tls.mode.is_some() {
                t.sources.insert("ssl-mode".into(), source.clone());
            }
            t
        }
        (None, Some(df)) if !df.is_empty() => df.to_target()?,
        (None, _) if flags_say_where || args.user.is_some() => {
            let mut t = parse_dsn("mysql://root@localhost")?;
            for k in ["user", "host", "port"] {
                t.sources.insert(k.into(), "built-in default".into());
            }
            if let Some(df) = &defaults {
                t.tls = df.tls.clone();
            }
            t
        }
        // Option files that say nothing: an error naming them, not a guessed server.
        (None, Some(df)) => df.to_target()?,
        (None, None) => return Err(DsnError::Missing),
    };
    if let Some(h) = args.host {
        target.host = h.to_string();
        target.sources.insert("host".into(), "-h/--host".into());
    }
    if let Some(u) = args.user {
        target.user = u.to_string();
        target.sources.insert("user".into(), "-u/--user".into());
    }
    if let Some(p) = args.port {
        target.port = p;
        target.sources.insert("port".into(), "-P/--port".into());
    }
    if let Some(s) = args.socket {
        target.socket = Some(s.to_path_buf());
        target.sources.insert("socket".into(), "-S/--socket".into());
    } else if args.port.is_some() || args.host.is_some_and(|h| h != "localhost") {
        // `-h 10.0.0.5` or `-P 3307` asks for TCP, as with the mariadb client: a socket
        // from an option file must not win over it.
        target.socket = None;
        target.sources.remove("socket");
    }
    // TLS: the DSN's parameters, then the configuration's, then the defaults file's.
    if target.tls.mode.is_none() && config.server.tls.mode.is_some() {
        target.sources.insert(
            "ssl-mode".into(),
            "server.ssl_mode in the configuration".into(),
        );
    }
    target.tls.fill_from(&config.server.tls);
    if let Some(df) = &defaults {
        if target.tls.mode.is_none() {
            if let Some(src) = df.sources.get("ssl-mode") {
                target.sources.insert("ssl-mode".into(), src.clone());
            }
        }
        target.tls.fill_from(&df.tls);
    }
    target
        .sources
        .entry("ssl-mode".into())
        .or_insert_with(|| "built-in default".into());
    target.tls.validate().map_err(DsnError::Tls)?;
    if let Some(pw) = args.typed_password.clone().filter(|p| !p.is_empty()) {
        target.replace_password(pw);
    }
    target.fill_password(env_password);
    if !target.has_password() {
        if let Some(pf) = &config.server.password_file {
            target.fill_password(Some(read_password_file(pf)?));
        }
    }
    if let Some(df) = defaults {
        target.fill_password(df.password);
    }
    Ok(target)
}

/// [`resolve`] with only a DSN and a defaults file from the command line, and no
/// search path.
pub fn resolve_target(
    cli_dsn: Option<&str>,
    cli_defaults_file: Option<&Path>,
    env_password: Option<String>,
    config: &Config,
) -> Result<ConnectTarget, DsnError> {
    resolve(
        &ConnectArgs {
            dsn: cli_dsn,
            dsn_source: "--dsn",
            defaults_file: cli_defaults_file,
            ..ConnectArgs::default()
        },
        env_password,
        config,
    )
}

/// A live server handle with the config's timeouts (nothing is sent yet).
pub fn live_server(target: ConnectTarget, config: &Config) -> LiveServer {
    LiveServer::new(
        target,
        LiveOptions {
            connect_timeout: config.server.connect_timeout,
            query_timeout: config.server.query_timeout,
            resize_timeout: config.server.resize_timeout,
            datadir: config.server.datadir.clone(),
        },
    )
}

/// Probes until the server answers or `limit` passes (`run --wait-for-server`). Only
/// "cannot reach" errors are retried, once a second; anything else (a wrong password,
/// a missing privilege) fails at once.
pub async fn wait_for_server<S: Server>(
    server: &mut S,
    limit: Duration,
) -> Result<(), ServerError> {
    let deadline = tokio::time::Instant::now() + limit;
    let mut attempts = 0u64;
    loop {
        match server.probe().await {
            Ok(_) => return Ok(()),
            Err(e) if e.is_connection_lost() && tokio::time::Instant::now() < deadline => {
                if attempts % 10 == 0 {
                    tracing::warn!("waiting for the server: {e}");
                }
                attempts += 1;
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Raises the soft limit on open files to the hard limit, so that nothing innopilot
/// serves on the side (the HTTP endpoints) can starve the database connection or the
/// restore of a descriptor. Returns the limit now in effect, or why it could not be
/// raised (then the old one stays: innopilot works within it).
pub fn raise_fd_limit() -> Result<u64, String> {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut lim = getrlimit(Resource::Nofile);
    let Some(hard) = lim.maximum else {
        // No hard limit (Linux always has one for open files): nothing to raise to.
        return Ok(lim.current.unwrap_or(u64::MAX));
    };
    if lim.current.is_some_and(|soft| soft >= hard) {
        return Ok(hard);
    }
    lim.current = Some(hard);
    setrlimit(Resource::Nofile, lim).map_err(|e| e.to_string())?;
    Ok(hard)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::testkit::Scripted;
    use crate::sim::model::SimServer;
    use crate::sim::scenario::SimFlavor;
    use crate::sim::Scenario;

    fn unreachable_for(probes: &[Option<bool>]) -> Scripted<SimServer> {
        let sc = Scenario::named("long_read_view").unwrap();
        let mut s = Scripted::new(SimServer::for_scenario(&sc, SimFlavor::MySql80, 1));
        s.probes = probes.iter().copied().collect();
        s
    }

    #[tokio::test(start_paused = true)]
    async fn waits_for_a_server_that_comes_up_and_not_for_one_that_refuses() {
        let limit = Duration::from_secs(60);
        let mut s = unreachable_for(&[Some(true), Some(true), Some(true)]);
        let started = tokio::time::Instant::now();
        wait_for_server(&mut s, limit).await.unwrap();
        assert_eq!((s.probe_count, started.elapsed().as_secs()), (4, 3));
        // Not a reachability problem: no retry.
        let mut s = unreachable_for(&[Some(true), Some(false)]);
        let e = wait_for_server(&mut s, limit).await.unwrap_err();
        assert!(!e.is_connection_lost() && s.probe_count == 2, "{e}");
        // Still unreachable at the limit: the last error.
        let mut s = unreachable_for(&[Some(true); 100]);
        let e = wait_for_server(&mut s, Duration::from_secs(5))
            .await
            .unwrap_err();
        assert!(e.is_connection_lost() && s.probe_count == 6, "{e}");
    }
    use std::io::Write;

    #[test]
    fn precedence() {
        let mut cfg = Config::default();
        let dir = tempfile::tempdir().unwrap();
        let pwf = dir.path().join("pw");
        std::fs::write(&pwf, "from-file\nignored\n").unwrap();
        let cnf = dir.path().join("my.cnf");
        let mut f = std::fs::File::create(&cnf).unwrap();
        writeln!(f, "[client]\nuser=cnfuser\npassword=from-cnf\nport=3399").unwrap();

        assert!(matches!(
            resolve_target(None, None, None, &cfg),
            Err(DsnError::Missing)
        ));
        let t = resolve_target(None, Some(&cnf), None, &cfg).unwrap();
        assert_eq!(
            (t.user.as_str(), t.port, t.password()),
            ("cnfuser", 3399, Some("from-cnf"))
        );

        cfg.server.password_file = Some(pwf.clone());
        let t = resolve_target(Some("mysql://u@h"), Some(&cnf), None, &cfg).unwrap();
        assert_eq!(t.password(), Some("from-file"));
        let t = resolve_target(Some("mysql://u@h"), None, Some("from-env".into()), &cfg).unwrap();
        assert_eq!(t.password(), Some("from-env"));
        let t = resolve_target(
            Some("mysql://u:in-dsn@h"),
            None,
            Some("from-env".into()),
            &cfg,
        )
        .unwrap();
        assert_eq!(t.password(), Some("in-dsn"));

        cfg.server.password_file = Some(dir.path().join("missing"));
        let e = resolve_target(Some("mysql://u@h"), None, None, &cfg).unwrap_err();
        assert!(e.to_string().contains("chmod 600"), "{e}");
    }

    fn write(path: &Path, text: &str) {
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn option_files_follow_includes_like_the_mariadb_client() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        // A file holding only `!include` (the trial's case), relative to itself.
        write(&d.join("only-include.cnf"), "!include real.cnf\n");
        write(
            &d.join("real.cnf"),
            "[mysqld]\nport=1\n[client]\nuser=app\nhost=db1\nport=3307\n[client-mariadb]\nport=3308 # comment\n",
        );
        let cfg = Config::default();
        let t = resolve_target(None, Some(&d.join("only-include.cnf")), None, &cfg).unwrap();
        assert_eq!(
            (t.user.as_str(), t.host.as_str(), t.port),
            ("app", "db1", 3308)
        );
        let real = d.join("real.cnf").display().to_string();
        assert_eq!(t.sources["port"], format!("{real}:8 [client-mariadb]"));
        assert_eq!(t.sources["user"], format!("{real}:4 [client]"));

        // !includedir: *.cnf in name order, later wins; [innopilot] wins over all.
        std::fs::create_dir(d.join("conf.d")).unwrap();
        write(
            &d.join("conf.d/10-a.cnf"),
            "[client]\nuser=a\nsocket=/run/a.sock\n",
        );
        write(&d.join("conf.d/20-b.cnf"), "[client]\nuser=b\n");
        write(&d.join("conf.d/30-c.txt"), "[client]\nuser=ignored\n");
        write(
            &d.join("main.cnf"),
            "[innopilot]\npassword=pw\n!includedir conf.d\n[client]\npassword=other\n",
        );
        let t = resolve_target(None, Some(&d.join("main.cnf")), None, &cfg).unwrap();
        assert_eq!(t.user, "b");
        assert_eq!(t.password(), Some("pw"));
        assert_eq!(t.socket.as_deref(), Some(Path::new("/run/a.sock")));
        assert!(
            t.sources["user"].contains("20-b.cnf:2 [client]"),
            "{:?}",
            t.sources
        );
        assert!(!t.sources.contains_key("password"));
    }

    #[test]
    fn option_files_that_say_nothing_are_an_error_not_a_guess() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        write(&d.join("only-include.cnf"), "!include empty.cnf\n");
        write(&d.join("empty.cnf"), "[mysqld]\nport=3306\n");
        let cfg = Config::default();
        let e = resolve_target(None, Some(&d.join("only-include.cnf")), None, &cfg)
            .unwrap_err()
            .to_string();
        assert!(e.contains("empty.cnf") && e.contains("[client]"), "{e}");

        write(&d.join("missing.cnf"), "!include nowhere.cnf\n");
        let e = resolve_target(None, Some(&d.join("missing.cnf")), None, &cfg)
            .unwrap_err()
            .to_string();
        assert!(e.contains("nowhere.cnf"), "{e}");

        write(&d.join("loop.cnf"), "[client]\nuser=u\n!include loop.cnf\n");
        let e = resolve_target(None, Some(&d.join("loop.cnf")), None, &cfg)
            .unwrap_err()
            .to_string();
        assert!(e.contains("nested deeper"), "{e}");
    }

    #[test]
    fn flags_win_and_the_search_path_is_read_only_without_a_target() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        write(
            &d.join("home.cnf"),
            "[client]\nuser=me\nsocket=/run/x.sock\npassword=cnf\n",
        );
        let cfg = Config::default();
        let search = vec![d.join("absent.cnf"), d.join("home.cnf")];
        let args = ConnectArgs {
            search_path: search.clone(),
            ..ConnectArgs::default()
        };
        let t = resolve(&args, None, &cfg).unwrap();
        assert_eq!((t.user.as_str(), t.password()), ("me", Some("cnf")));
        assert!(t.sources["socket"].contains("home.cnf:3"));

        // -h and -P ask for TCP: the option file's socket no longer applies.
        let args = ConnectArgs {
            host: Some("10.0.0.5"),
            port: Some(3310),
            user: Some("ops"),
            typed_password: Some("typed".into()),
            search_path: search.clone(),
            ..ConnectArgs::default()
        };
        let t = resolve(&args, Some("env".into()), &cfg).unwrap();
        assert_eq!(
            (t.user.as_str(), t.host.as_str(), t.port, t.socket.as_ref()),
            ("ops", "10.0.0.5", 3310, None)
        );
        assert_eq!(t.password(), Some("typed"));
        assert_eq!(t.sources["host"], "-h/--host");

        // A DSN means the search path is not read at all.
        let args = ConnectArgs {
            dsn: Some("mysql://dsnuser@h"),
            dsn_source: "--dsn",
            search_path: search,
            ..ConnectArgs::default()
        };
        let t = resolve(&args, None, &cfg).unwrap();
        assert_eq!((t.user.as_str(), t.password()), ("dsnuser", None));
        assert_eq!(t.sources["user"], "--dsn");

        // Nothing anywhere: the usual "no server" error.
        let args = ConnectArgs {
            search_path: vec![d.join("absent.cnf")],
            ..ConnectArgs::default()
        };
        assert!(matches!(resolve(&args, None, &cfg), Err(DsnError::Missing)));
    }
}
