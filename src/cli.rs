//! The command line. Kept in the library so completions and the man page can be
//! generated from the same definition.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Debug, Parser)]
#[command(
    name = "innopilot",
    version,
    about = "Keeps InnoDB purge and flushing from hurting your users",
    long_about = "innopilot sits beside a MariaDB or MySQL server, reads InnoDB's live metrics \
every second (redo fill, purge history and its rate, dirty pages, the oldest read view, \
replica lag) and keeps background work — purge and flushing — from stalling the foreground \
by adjusting a few server variables with SET GLOBAL, within bounds you set, restoring them \
on exit.\n\n\
Start by looking:   innopilot status --dsn mysql://innopilot@127.0.0.1:3306/\n\
Then watch:         innopilot watch --dsn ...\n\n\
Connection: --dsn, INNOPILOT_DSN, server.dsn in the config, or a --defaults-file [client] \
section. Password: in the DSN, INNOPILOT_PASSWORD, server.password_file, or the defaults \
file. Passwords are never printed.\n\n\
Exit codes: 0 ok, 1 runtime error (server unreachable, query failed), 2 bad configuration \
or arguments, 3 missing privileges.",
    after_help = "Observing needs: GRANT PROCESS, REPLICATION CLIENT ON *.* TO 'innopilot'@'localhost';"
)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Args)]
pub struct GlobalArgs {
    /// Configuration file (TOML). Without it, the built-in defaults apply (the same as
    /// config/innopilot.toml).
    #[arg(
        short,
        long,
        global = true,
        env = "INNOPILOT_CONFIG",
        value_name = "FILE"
    )]
    pub config: Option<PathBuf>,

    /// Server to connect to: mysql://USER[:PASSWORD]@HOST[:PORT]/[?socket=PATH&ssl-mode=MODE].
    /// Prefer INNOPILOT_PASSWORD to a password here.
    #[arg(
        long,
        global = true,
        env = "INNOPILOT_DSN",
        hide_env_values = true,
        value_name = "DSN"
    )]
    pub dsn: Option<String>,

    /// A my.cnf-style file; its [client] section gives user, password, host, port, socket.
    #[arg(long, global = true, value_name = "FILE")]
    pub defaults_file: Option<PathBuf>,

    /// Log format on standard error (levels via RUST_LOG, e.g. RUST_LOG=innopilot=debug).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// One snapshot: every signal with its unit, every knob with its value and whether
    /// it can be changed on this server. Takes two samples one interval apart so rates
    /// are real.
    Status {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// A line per sample, every interval, until interrupted (Ctrl-C).
    Watch {
        /// JSON Lines instead of text.
        #[arg(long)]
        json: bool,
        /// Sampling interval (overrides sampler.interval), e.g. "500ms", "5s".
        #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
        interval: Option<Duration>,
        /// Stop after this many samples.
        #[arg(long, value_name = "N")]
        count: Option<u64>,
    },
    /// Run the controller: sample every interval, decide, and (unless --dry-run) SET
    /// GLOBAL within the configured bounds. On SIGTERM/SIGINT the values found at start
    /// (the baseline) are restored before exit. A previous live run that crashed is
    /// cleaned up first. Needs SUPER (MariaDB) or SYSTEM_VARIABLES_ADMIN (MySQL); exits 3
    /// without it.
    Run {
        /// Decide and write the audit log, but never change the server (needs only
        /// PROCESS and REPLICATION CLIENT).
        #[arg(long)]
        dry_run: bool,
        /// Audit log path, "-" for standard output (overrides audit.path).
        #[arg(long, value_name = "FILE")]
        audit: Option<PathBuf>,
        /// State file (overrides control.state_file).
        #[arg(long, value_name = "FILE")]
        state_file: Option<PathBuf>,
        /// Sampling interval (overrides sampler.interval), e.g. "1s".
        #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
        interval: Option<Duration>,
    },
    /// Hand an operator-owned knob back to a running `innopilot run` (the value it has
    /// now becomes its baseline). Takes effect at the next tick.
    Release {
        /// The variable name, e.g. innodb_purge_threads.
        #[arg(value_parser = parse_knob)]
        knob: crate::server::Knob,
        /// State file of the running instance (overrides control.state_file).
        #[arg(long, value_name = "FILE")]
        state_file: Option<PathBuf>,
    },
    /// Restore the baseline saved by a live run that did not finish (crash, kill -9,
    /// reboot), then exit. Knobs someone changed since are left alone and reported.
    Restore {
        /// State file (overrides control.state_file).
        #[arg(long, value_name = "FILE")]
        state_file: Option<PathBuf>,
    },
    /// Validate the configuration file and print the effective configuration.
    CheckConfig,
}

fn parse_knob(s: &str) -> Result<crate::server::Knob, String> {
    s.parse()
}

/// Parses a human duration for clap ("1s", "250ms").
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s).map_err(|e| format!("{e} (examples: 500ms, 1s, 2m)"))?;
    if d < Duration::from_millis(100) || d > Duration::from_secs(60) {
        return Err("must be from 100ms to 60s".into());
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }
}
