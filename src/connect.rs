//! Resolves where to connect and with which password, from the CLI, the environment,
//! the config file and a my.cnf-style defaults file, in that order of precedence.

use std::path::Path;

use crate::config::Config;
use crate::server::dsn::{
    parse_dsn, read_defaults_file, read_password_file, ConnectTarget, DsnError,
};
use crate::server::mysql::{LiveOptions, LiveServer};

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
    // TLS: the DSN's parameters, then the configuration's, then the defaults file's.
    target.tls.fill_from(&config.server.tls);
    if let Some(df) = &defaults {
        target.tls.fill_from(&df.tls);
    }
    target.tls.validate().map_err(DsnError::Tls)?;
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

#[cfg(test)]
mod tests {
    use super::*;
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
