//! Resolves where to connect and with which password, from the CLI, the environment,
//! the config file and a my.cnf-style defaults file, in that order of precedence; and
//! waits for a server that is not up yet ([`wait_for_server`]).

use std::path::Path;
use std::time::Duration;

use crate::config::Config;
use crate::server::dsn::{
    parse_dsn, read_defaults_file, read_password_file, ConnectTarget, DsnError,
};
use crate::server::mysql::{LiveOptions, LiveServer};
use crate::server::{Server, ServerError};

/// Environment variable holding the password (never printed).
pub const PASSWORD_ENV: &str = "INNOPILOT_PASSWORD";

/// Builds the connection target.
///
/// Target: `--dsn`/INNOPILOT_DSN, else `server.dsn`, else the defaults file.
/// Password: in the DSN, else INNOPILOT_PASSWORD, else `server.password_file`, else
/// the defaults file's `password`.
pub fn resolve_target(
    cli_dsn: Option<&str>,
    cli_defaults_file: Option<&Path>,
    env_password: Option<String>,
    config: &Config,
) -> Result<ConnectTarget, DsnError> {
    let defaults_path = cli_defaults_file.or(config.server.defaults_file.as_deref());
    let defaults = defaults_path.map(read_defaults_file).transpose()?;
    let dsn = cli_dsn
        .filter(|d| !d.trim().is_empty())
        .or(config.server.dsn.as_deref());
    let mut target = match (dsn, &defaults) {
        (Some(d), _) => parse_dsn(d)?,
        (None, Some(df)) => df.to_target(),
        (None, None) => return Err(DsnError::Missing),
    };
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
}
