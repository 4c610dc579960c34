//! The command line. Kept in the library so completions and the man page can be
//! generated from the same definition.

// The doc comments here are `--help` text (clap reads them), where `[client]` and
// `USER[:PASSWORD]` are option-file sections and DSN syntax, not rustdoc links.
#![allow(rustdoc::broken_intra_doc_links)]

use std::path::PathBuf;
use std::time::Duration;

use clap::builder::PossibleValuesParser;
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
or arguments, 3 missing privileges, 4 gave up on a lost server, 5 drain timed out, 6 \
diagnose --fail-on matched, 130 drain interrupted.",
    after_help = "Observing needs: GRANT PROCESS, SLAVE MONITOR ON *.* TO 'innopilot'@'localhost'; \
(MariaDB >= 10.5.9) or GRANT PROCESS, REPLICATION CLIENT ON *.* TO 'innopilot'@'localhost'; \
(MySQL, older MariaDB).",
    disable_help_flag = true
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

    /// Server to connect to:
    /// mysql://USER[:PASSWORD]@HOST[:PORT]/[?socket=PATH&ssl-mode=MODE&ssl-ca=FILE&ssl-cert=FILE&ssl-key=FILE]
    /// (ssl-mode: disabled, preferred, required, verify-ca, verify-identity). Prefer
    /// INNOPILOT_PASSWORD to a password here.
    #[arg(
        long,
        global = true,
        env = "INNOPILOT_DSN",
        hide_env_values = true,
        value_name = "DSN"
    )]
    pub dsn: Option<String>,

    /// A my.cnf-style option file, read as the mariadb client reads it ([client],
    /// [client-server], [client-mariadb], then [innopilot]; !include, !includedir).
    /// Without it and without a DSN: /etc/my.cnf, /etc/mysql/my.cnf, ~/.my.cnf.
    #[arg(long, global = true, value_name = "FILE")]
    pub defaults_file: Option<PathBuf>,

    /// Server host (wins over the DSN and option files), as in Percona Toolkit.
    #[arg(short = 'h', long, global = true, value_name = "HOST")]
    pub host: Option<String>,

    /// User name (wins over the DSN and option files).
    #[arg(short = 'u', long, global = true, value_name = "USER")]
    pub user: Option<String>,

    /// TCP port (wins over the DSN and option files).
    #[arg(short = 'P', long, global = true, value_name = "PORT", value_parser = clap::value_parser!(u16).range(1..))]
    pub port: Option<u16>,

    /// Unix socket (wins over the DSN and option files).
    #[arg(short = 'S', long, global = true, value_name = "PATH")]
    pub socket: Option<PathBuf>,

    /// Ask for the password on the terminal (not echoed); wins over every other source.
    #[arg(long, global = true)]
    pub ask_pass: bool,

    /// Print help (-h is the host, as in the mariadb client and Percona Toolkit).
    #[arg(long, global = true, action = clap::ArgAction::Help)]
    pub help: Option<bool>,

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
        /// Also say where each connection setting came from (DSN, option file and
        /// line, flag, built-in default).
        #[arg(long, short)]
        verbose: bool,
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
        /// PROCESS and SLAVE MONITOR on MariaDB >= 10.5.9, PROCESS and REPLICATION
        /// CLIENT elsewhere).
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
        /// Address for /metrics, /healthz and /readyz (overrides http.listen and
        /// enables the endpoints), e.g. "0.0.0.0:29104"; port 0 picks a free one.
        #[arg(long, value_name = "IP:PORT")]
        listen: Option<String>,
        /// Keep trying to reach the server for this long at start instead of failing
        /// at once (a sidecar that starts before its database), e.g. "5m".
        #[arg(long, value_parser = parse_timeout, value_name = "DURATION")]
        wait_for_server: Option<Duration>,
        /// Also record every sample to FILE (as `innopilot record` does), so the run can
        /// be replayed with `innopilot replay FILE`.
        #[arg(long, value_name = "FILE")]
        record: Option<PathBuf>,
    },
    /// Wait until purge has caught up (history at most --target), e.g. before a
    /// shutdown, with progress (history, rate, ETA) on standard error. MariaDB waits
    /// server-side with innodb_max_purge_lag_wait; MySQL is polled. --boost raises purge
    /// threads and io_capacity meanwhile and always puts them back. Exit codes: 0 done,
    /// 1 error, 3 missing privilege, 5 timed out, 130 interrupted.
    Drain {
        /// History length (undo logs, one per committed transaction that changed rows) to wait for.
        #[arg(long, default_value_t = 0, value_name = "RECORDS")]
        target: u64,
        /// Give up after this long (exit code 5), e.g. "10m".
        #[arg(long, value_parser = parse_timeout, default_value = "10m", value_name = "DURATION")]
        timeout: Duration,
        /// Raise innodb_purge_threads and innodb_io_capacity while draining (within
        /// [knobs.*] max); restored at the end in every case. Needs SET GLOBAL.
        #[arg(long)]
        boost: bool,
        /// Purge threads during --boost (MariaDB >= 10.7.1; never lowered).
        #[arg(long, default_value_t = 8, value_name = "N")]
        boost_purge_threads: u64,
        /// innodb_io_capacity during --boost (never lowered).
        #[arg(long, default_value_t = 2000, value_name = "IOPS")]
        boost_io_capacity: u64,
        /// How often to report progress.
        #[arg(long, value_parser = parse_duration, default_value = "1s", value_name = "DURATION")]
        progress_interval: Duration,
        /// Poll the history even where innodb_max_purge_lag_wait exists (needs only
        /// PROCESS).
        #[arg(long)]
        poll: bool,
        /// No progress lines, only the result.
        #[arg(long, short)]
        quiet: bool,
    },
    /// One-shot report for an incident: flushing (checkpoint age vs the async and sync
    /// flush points, minutes of redo headroom), purge (history, rate, the transaction
    /// blocking it and its statement), undo, buffer pool dump/load, replica lag. Every
    /// finding has an explanation, a recommendation and the SQL to apply.
    Diagnose {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Also show the purge and log lines of SHOW ENGINE INNODB STATUS. It is read
        /// once (under server.query_timeout; it can hang on a struggling server)
        /// whenever a transaction is open anyway, to confirm which holds the read view.
        #[arg(long)]
        engine_status: bool,
        /// Samples to take, one interval apart (at least 2, so rates are real).
        #[arg(long, default_value_t = 3, value_name = "N")]
        samples: u32,
        /// Time between samples (default sampler.interval).
        #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
        interval: Option<Duration>,
        /// Exit 6 when a finding is at least this severe (for cron and CI); without
        /// it, findings never change the exit code.
        #[arg(long, value_enum, value_name = "SEVERITY")]
        fail_on: Option<FailOn>,
    },
    /// Print a shell completion script, e.g. `innopilot completions bash >
    /// /usr/share/bash-completion/completions/innopilot`.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff), e.g. `innopilot man > /usr/share/man/man1/innopilot.1`;
    /// with --out-dir, write innopilot.1 and one page per subcommand
    /// (innopilot-drain.1, ...) there.
    Man {
        /// Directory to write every page to, instead of printing the main page.
        #[arg(long, value_name = "DIR")]
        out_dir: Option<PathBuf>,
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
    /// Run policies against the built-in InnoDB model: no database needed. With
    /// --compare, every policy on every scenario, as a table; else one scenario and one
    /// policy, with a CSV time series, a summary and SVG plots under --out. With
    /// --config, the `innopilot` policy runs that configuration (judge your own
    /// settings before deploying them).
    #[command(after_help = SIM_HELP)]
    Simulate {
        /// Every policy on every scenario; prints the comparison table.
        #[arg(long, conflicts_with_all = ["scenario", "policy", "out"])]
        compare: bool,
        /// Scenario to run.
        #[arg(
            long,
            required_unless_present = "compare",
            value_name = "NAME",
            value_parser = PossibleValuesParser::new(crate::sim::scenario::NAMES)
        )]
        scenario: Option<String>,
        /// Policy (peer) to run it with.
        #[arg(
            long,
            required_unless_present = "compare",
            value_name = "NAME",
            value_parser = PossibleValuesParser::new(crate::sim::peers::NAMES)
        )]
        policy: Option<String>,
        /// Seed of the scenario's randomness: the same seed gives the same result.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Cap the scenario's reads at N a second instead of its own cap (purge_behind:
        /// 6000), as a benchmark run with `bench.py --read-iops N` did: the scenario on a
        /// slower or faster device. Only for scenarios whose device caps reads.
        #[arg(long, value_name = "N", conflicts_with = "compare")]
        read_iops: Option<u32>,
        /// Directory for timeseries.csv, summary.json, decisions.jsonl and the SVG plots.
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Record live samples to a file (read-only: never changes the server), for
    /// `innopilot replay`.
    Record {
        /// Recording file (JSON Lines).
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
        /// Sampling interval (overrides sampler.interval).
        #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
        interval: Option<Duration>,
        /// Stop after this many samples (else at Ctrl-C/SIGTERM).
        #[arg(long, value_name = "N")]
        count: Option<u64>,
    },
    /// Replay a recording through a policy and print what it would have done at each
    /// step and why: a counterfactual advisor for your own incident.
    Replay {
        /// A file written by `innopilot record`.
        file: PathBuf,
        /// `innopilot` (the configuration from --config, or the defaults) or
        /// `mariadb1065_adaptive` (the watermark policy alone, as published).
        #[arg(
            long,
            default_value = "innopilot",
            value_name = "NAME",
            value_parser = PossibleValuesParser::new(REPLAY_POLICIES)
        )]
        policy: String,
        /// JSON Lines instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Validate the configuration file and print the effective configuration.
    CheckConfig,
}

const SIM_HELP: &str = "The model, its scenarios and its constants: docs/simulator.md.";

/// The policies `replay` can run: those with a controller.
pub const REPLAY_POLICIES: &[&str] = &["innopilot", "mariadb1065_adaptive"];

/// The severity at which `diagnose --fail-on` exits non-zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FailOn {
    /// Exit 6 on a warning or a critical finding.
    Warning,
    /// Exit 6 on a critical finding only.
    Critical,
}

fn parse_knob(s: &str) -> Result<crate::server::Knob, String> {
    s.parse()
}

/// Parses a longer human duration for clap ("90s", "10m", "1h"): 1s to 24h.
pub fn parse_timeout(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s).map_err(|e| format!("{e} (examples: 30s, 10m, 1h)"))?;
    if d < Duration::from_secs(1) || d > Duration::from_secs(86_400) {
        return Err("must be from 1s to 24h".into());
    }
    Ok(d)
}

/// The man page, generated from the command-line definition.
pub fn man_page() -> std::io::Result<Vec<u8>> {
    use clap::CommandFactory;
    let mut out = Vec::new();
    clap_mangen::Man::new(Cli::command()).render(&mut out)?;
    Ok(out)
}

/// Writes `innopilot.1` and one page per subcommand (`innopilot-drain.1`, ...: the
/// main page's SEE ALSO names them) into `dir`; returns the files written.
pub fn write_man_pages(dir: &std::path::Path) -> std::io::Result<Vec<PathBuf>> {
    use clap::CommandFactory;
    let mut cmd = Cli::command();
    cmd.build();
    let mut written = Vec::new();
    let mut write = |name: String, cmd: clap::Command| -> std::io::Result<()> {
        let path = dir.join(format!("{name}.1"));
        let mut out = Vec::new();
        clap_mangen::Man::new(cmd).render(&mut out)?;
        std::fs::write(&path, out)?;
        written.push(path);
        Ok(())
    };
    for sub in cmd.get_subcommands() {
        if sub.get_name() == "help" {
            continue;
        }
        // After `build`, a subcommand's display name is `innopilot-NAME`, which
        // clap_mangen uses for the page's title.
        write(
            format!("innopilot-{}", sub.get_name()),
            sub.clone().version(env!("CARGO_PKG_VERSION")),
        )?;
    }
    write("innopilot".into(), cmd)?;
    Ok(written)
}

/// A completion script for `shell`, generated from the command-line definition.
pub fn completions(shell: clap_complete::Shell) -> Vec<u8> {
    use clap::CommandFactory;
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "innopilot", &mut out);
    out
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
    fn every_subcommand_the_man_page_names_has_its_own_page() {
        let dir = tempfile::tempdir().unwrap();
        let written = write_man_pages(dir.path()).unwrap();
        let main = std::fs::read_to_string(dir.path().join("innopilot.1")).unwrap();
        for sub in ["drain", "check-config", "simulate", "diagnose"] {
            let page = dir.path().join(format!("innopilot-{sub}.1"));
            assert!(written.contains(&page), "{sub}: {written:?}");
            let text = std::fs::read_to_string(&page).unwrap();
            assert!(text.contains(&format!(".TH innopilot-{sub} 1")), "{text}");
            // roff escapes every dash in the text.
            let roff = format!("innopilot\\-{}", sub.replace('-', "\\-"));
            assert!(main.contains(&format!("{roff}(1)")), "{main}");
        }
    }

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn man_page_and_completions_come_from_the_definition() {
        let man = String::from_utf8(man_page().unwrap()).unwrap();
        assert!(
            man.contains(".TH innopilot") && man.contains("drain"),
            "{man}"
        );
        for shell in [
            clap_complete::Shell::Bash,
            clap_complete::Shell::Zsh,
            clap_complete::Shell::Fish,
        ] {
            let script = String::from_utf8(completions(shell)).unwrap();
            assert!(
                script.contains("diagnose") && script.contains("--boost"),
                "{shell}"
            );
            // The real value lists, not free text.
            for name in ["long_read_view", "mariadb1065_adaptive", "warning"] {
                assert!(script.contains(name), "{shell} completion lacks {name}");
            }
        }
    }
}
