//! The `innopilot` binary: parse the command line, set up logging, dispatch. All logic
//! lives in the library; `anyhow` is used here only.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;

use innopilot::cli::{Cli, Command, FailOn, LogFormat};
use innopilot::commands::diagnose;
use innopilot::commands::drain::{self, Boost, DrainError, DrainOptions, Ended, Progress};
use innopilot::commands::status;
use innopilot::commands::watch::WatchOptions;
use innopilot::config::{Config, ConfigError, Overrides};
use innopilot::control::audit::AuditLog;
use innopilot::control::state::StateStore;
use innopilot::control::{ControlError, Controller, Reload, RunOptions};
use innopilot::metrics::Snapshot;
use innopilot::server::connect::{
    live_server, resolve, standard_option_files, wait_for_server, ConnectArgs, PASSWORD_ENV,
};
use innopilot::server::dsn::DsnError;
use innopilot::server::mysql::LiveServer;
use innopilot::server::ServerError;

// Standard output through these, never `println!`, which panics when the reader has
// gone away (`innopilot watch | head -2`): the write error travels up like any other
// and `main` ends quietly on a broken pipe.
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($arg)*)
    }};
}
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        write!(std::io::stdout().lock(), $($arg)*)
    }};
}

/// The reader of standard output went away (`| head`): not an error for a CLI.
fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// How a command's result ends the process.
fn finish(result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("innopilot: {e:#}");
            ExitCode::from(exit_code(&e))
        }
    }
}

fn init_logging(format: LogFormat, offline: bool) {
    // Simulations and replays run the controller thousands of times: its operational
    // messages would drown the table. RUST_LOG still wins.
    let default = if offline {
        "error"
    } else {
        "innopilot=info,warn"
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colours only on a terminal: journald and log files get plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

/// An outcome that is not an error in itself but has its own exit code (drain timed
/// out: 5, interrupted: 130).
#[derive(Debug)]
struct Exit(u8, String);

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.1)
    }
}

impl std::error::Error for Exit {}

/// Exit codes: 1 runtime, 2 configuration/arguments, 3 privileges, 4 gave up on a lost
/// server, 5 drain timed out, 6 `diagnose --fail-on` matched, 130 drain interrupted.
fn exit_code(err: &anyhow::Error) -> u8 {
    for cause in err.chain() {
        if let Some(Exit(code, _)) = cause.downcast_ref::<Exit>() {
            return *code;
        }
        if let Some(d) = cause.downcast_ref::<DrainError>() {
            return d.exit_code();
        }
        if cause.is::<ConfigError>() || cause.is::<DsnError>() {
            return 2;
        }
        if let Some(ServerError::Denied { .. }) = cause.downcast_ref::<ServerError>() {
            return 3;
        }
        if let Some(c) = cause.downcast_ref::<ControlError>() {
            return c.exit_code();
        }
        if let Some(r) = cause.downcast_ref::<innopilot::commands::restore::RestoreError>() {
            return match r {
                innopilot::commands::restore::RestoreError::Server(ServerError::Denied {
                    ..
                }) => 3,
                r => r.exit_code(),
            };
        }
        if let Some(
            innopilot::sim::SimError::UnknownScenario(_) | innopilot::sim::SimError::UnknownPeer(_),
        ) = cause.downcast_ref::<innopilot::sim::SimError>()
        {
            return 2;
        }
    }
    1
}

fn load_config(cli: &Cli) -> anyhow::Result<Config> {
    Ok(match &cli.global.config {
        Some(path) => Config::load(path)?,
        None => Config::default(),
    })
}

fn server_from(cli: &Cli, config: &Config) -> anyhow::Result<LiveServer> {
    let g = &cli.global;
    let env_pw = std::env::var(PASSWORD_ENV).ok();
    let typed_password = if g.ask_pass {
        // Not echoed; read from the terminal, so it never reaches argv or the
        // environment.
        Some(rpassword::prompt_password("Enter password: ").context("--ask-pass")?)
    } else {
        None
    };
    // clap fills --dsn from INNOPILOT_DSN too: the same text means it came from there.
    let dsn_source = match (&g.dsn, std::env::var("INNOPILOT_DSN")) {
        (Some(d), Ok(env)) if *d == env => "INNOPILOT_DSN",
        _ => "--dsn",
    };
    let target = resolve(
        &ConnectArgs {
            dsn: g.dsn.as_deref(),
            dsn_source,
            defaults_file: g.defaults_file.as_deref(),
            host: g.host.as_deref(),
            user: g.user.as_deref(),
            port: g.port,
            socket: g.socket.as_deref(),
            typed_password,
            search_path: standard_option_files(),
        },
        env_pw,
        config,
    )?;
    Ok(live_server(target, config))
}

async fn status(cli: &Cli, config: &Config, json: bool, verbose: bool) -> anyhow::Result<()> {
    let mut server = server_from(cli, config)?;
    let (caps, signals) =
        status::snapshot(&mut server, config.sampler.interval, config.sampler.window).await?;
    let cipher = server.tls_cipher().await?;
    let mode = server.target().tls.effective_mode();
    let connection = match &cipher {
        Some(c) => format!("{} over TLS ({c}; ssl-mode {mode})", server.target()),
        None if server.target().socket.is_some() => format!(
            "{} over a local unix socket (not encrypted; ssl-mode {mode})",
            server.target()
        ),
        None => format!(
            "{} NOT encrypted (ssl-mode {mode}{})",
            server.target(),
            if mode == innopilot::server::dsn::SslMode::Disabled {
                ""
            } else {
                ": the server offers no TLS; ssl-mode=required refuses such a server"
            }
        ),
    };
    // A controller's state file, when one is readable here: what it changed and which
    // knobs are operator-owned. Unreadable or absent is normal for a plain observer.
    let store = StateStore::new(config.control.state_file.clone());
    let state = store.peek();
    // Only asked when there is a state file: running, stopped or crashed is the
    // lock's to tell, not the file's.
    let lock = if state.is_some() {
        store.lock_state()
    } else {
        innopilot::control::state::LockState::Free
    };
    if json {
        let mut v = status::status_json(&caps, &signals, config.policy.purge_rate.min_view_age);
        v["controller"] = status::controller_json(state.as_ref(), &lock);
        v["connection"] = serde_json::json!({
            "target": server.target().to_string(),
            "encrypted": cipher.is_some(),
            "tls_cipher": cipher,
            "ssl_mode": mode.name(),
            "sources": server.target().sources,
        });
        outln!("{}", serde_json::to_string_pretty(&v)?)?;
    } else {
        outln!("connection {connection}")?;
        if verbose {
            // Where each connection setting came from: nothing is guessed silently.
            for (setting, source) in &server.target().sources {
                outln!("  {setting:<10} from {source}")?;
            }
        }
        out!(
            "{}",
            status::status_text(&caps, &signals, config.policy.purge_rate.min_view_age)
        )?;
        out!("{}", status::controller_text(state.as_ref(), &lock))?;
    }
    Ok(())
}

async fn watch(
    cli: &Cli,
    config: &Config,
    json: bool,
    interval: Option<Duration>,
    count: Option<u64>,
) -> anyhow::Result<()> {
    let mut server = server_from(cli, config)?;
    let opts = WatchOptions {
        interval: interval.unwrap_or(config.sampler.interval),
        window: config.sampler.window,
        count,
        json,
        min_view_age: config.policy.purge_rate.min_view_age,
    };
    innopilot::commands::watch::watch(&mut server, &opts, tokio::signal::ctrl_c(), |line| {
        // A closed pipe (`watch | head`) ends watch quietly.
        outln!("{line}").is_ok()
    })
    .await?;
    Ok(())
}

/// Resolves on SIGTERM or SIGINT, with the signal's name.
async fn shutdown_signal() -> String {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!("cannot listen for SIGTERM: {e}");
            let _ = tokio::signal::ctrl_c().await;
            return "SIGINT".into();
        }
    };
    tokio::select! {
        _ = term.recv() => "SIGTERM".into(),
        _ = tokio::signal::ctrl_c() => "SIGINT".into(),
    }
}

/// Re-reads the configuration file on every SIGHUP and hands the result (or why it
/// was refused) to the loop, which applies it between ticks.
async fn reload_on_sighup(
    mut hup: tokio::signal::unix::Signal,
    path: Option<PathBuf>,
    overrides: Overrides,
    tx: tokio::sync::mpsc::UnboundedSender<Reload>,
) {
    while hup.recv().await.is_some() {
        let req = match &path {
            None => Reload::Rejected {
                source: "built-in defaults".into(),
                error: "innopilot was started without --config: there is no file to re-read".into(),
            },
            Some(p) => {
                let source = p.display().to_string();
                tracing::info!(file = %source, "SIGHUP: re-reading the configuration");
                match Config::load_with(Some(p), &overrides) {
                    Ok(c) => Reload::Apply {
                        config: Box::new(c),
                        source,
                    },
                    Err(e) => Reload::Rejected {
                        source,
                        error: e.to_string(),
                    },
                }
            }
        };
        if tx.send(req).is_err() {
            return;
        }
    }
}

/// `config` was validated with `overrides` (the command line's settings), which are
/// applied again to a configuration reloaded on SIGHUP.
async fn run_controller(
    cli: &Cli,
    config: Config,
    overrides: Overrides,
    wait_for: Option<Duration>,
    record: Option<&std::path::Path>,
) -> anyhow::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    // Installed first: SIGHUP's default action would end the process.
    let hup = signal(SignalKind::hangup()).context("cannot listen for SIGHUP")?;
    let dry_run = config.control.dry_run;
    match innopilot::server::connect::raise_fd_limit() {
        Ok(n) => tracing::debug!("open files limit: {n}"),
        Err(e) => tracing::warn!("cannot raise the open files limit: {e}"),
    }
    let (snapshot_tx, snapshot_rx) = tokio::sync::watch::channel(Arc::new(Snapshot {
        dry_run,
        interval: config.sampler.interval,
        ..Snapshot::default()
    }));
    // An address asked for on the command line must bind (exit 1 otherwise); the
    // configured one is best effort: the endpoints serve the controller, and a taken
    // port must not keep it from protecting the server.
    let http_task = if config.http.enabled {
        match innopilot::http::bind(&config.http.listen).await {
            Ok(listener) => {
                let addr = innopilot::http::local_addr(&listener)
                    .map(|a| a.to_string())
                    .unwrap_or_else(|| config.http.listen.clone());
                tracing::info!(%addr, "serving /metrics, /healthz, /readyz and /check on http://{addr}/");
                Some(innopilot::http::spawn(
                    listener,
                    snapshot_rx,
                    config.http.stale_after,
                    config.check.clone(),
                ))
            }
            Err(e) if overrides.listen.is_some() => return Err(e.into()),
            Err(e) => {
                tracing::error!("{e}; running without the HTTP endpoints");
                None
            }
        }
    } else {
        None
    };
    let mut server = server_from(cli, &config)?;
    if let Some(limit) = wait_for {
        tokio::select! {
            r = wait_for_server(&mut server, limit) => r?,
            reason = shutdown_signal() => {
                tracing::info!("stopped on {reason} while waiting for the server; nothing was changed");
                return Ok(());
            }
        }
    }
    let target = server.target().to_string();
    let audit = match AuditLog::open(&config.audit) {
        Ok(a) => a,
        Err(e) if dry_run => {
            tracing::warn!("dry-run continues without an audit log: {e}");
            AuditLog::discard()
        }
        Err(e) => {
            return Err(anyhow::Error::new(e).context(
                "live mode keeps an audit trail of every change: fix audit.path (or pass --audit FILE, or --audit - for standard output)",
            ))
        }
    };
    let opts = RunOptions {
        dry_run,
        config_path: cli.global.config.as_ref().map(|p| p.display().to_string()),
        target,
    };
    let config_path = cli.global.config.clone();
    let reload = (hup, config_path, overrides);
    let outcome = match record {
        Some(path) => {
            let recorder = innopilot::server::recording::Recorder::create(path)
                .with_context(|| format!("cannot create the recording {}", path.display()))?;
            let server = innopilot::server::recording::RecordingServer::new(server, recorder);
            supervise(server, config, opts, audit, snapshot_tx, reload).await
        }
        None => supervise(server, config, opts, audit, snapshot_tx, reload).await,
    };
    if let Some(t) = http_task {
        t.abort();
    }
    outcome
}

/// Starts the controller on `server`, runs it until a signal (applying SIGHUP reloads
/// between ticks), then restores the baseline.
async fn supervise<S: innopilot::server::Server>(
    server: S,
    config: Config,
    opts: RunOptions,
    audit: AuditLog,
    snapshot_tx: tokio::sync::watch::Sender<Arc<Snapshot>>,
    reload: (
        tokio::signal::unix::Signal,
        Option<std::path::PathBuf>,
        Overrides,
    ),
) -> anyhow::Result<()> {
    let (hup, config_path, overrides) = reload;
    let dry_run = opts.dry_run;
    let mut ctl = Controller::start(server, config, opts, audit).await?;
    ctl.publish_to(snapshot_tx);
    let (reload_tx, mut reload_rx) = tokio::sync::mpsc::unbounded_channel();
    let reload_task = tokio::spawn(reload_on_sighup(hup, config_path, overrides, reload_tx));
    tracing::info!(dry_run, "innopilot running");
    let result = ctl.run_with_reload(shutdown_signal(), &mut reload_rx).await;
    reload_task.abort();
    // The endpoints stay up while the baseline is restored (/readyz says "stopping").
    match result {
        Ok(reason) => {
            let restored = ctl.shutdown(&reason).await;
            if !restored {
                anyhow::bail!("stopped on {reason}, but the baseline could not be fully restored (see the audit log); `innopilot restore` retries");
            }
            Ok(())
        }
        Err(e) => {
            ctl.shutdown(&e.to_string()).await;
            Err(e.into())
        }
    }
}

async fn drain_cmd(
    cli: &Cli,
    config: &Config,
    opts: DrainOptions,
    quiet: bool,
) -> anyhow::Result<()> {
    let mut server = server_from(cli, config)?;
    let mut progress = Progress::stderr(quiet);
    let report = drain::drain(
        &mut server,
        &config.knobs,
        &opts,
        shutdown_signal(),
        &mut progress,
    )
    .await?;
    let summary = report.summary(opts.target);
    match report.ended {
        Ended::Done => {
            outln!("drained: {summary}")?;
            Ok(())
        }
        Ended::TimedOut => Err(Exit(
            5,
            format!(
                "drain timed out after {}: {summary}",
                humantime::format_duration(opts.timeout)
            ),
        )
        .into()),
        Ended::Interrupted => Err(Exit(130, format!("drain interrupted: {summary}")).into()),
    }
}

async fn diagnose_cmd(
    cli: &Cli,
    config: &Config,
    json: bool,
    engine_status: bool,
    samples: u32,
    interval: Option<Duration>,
    fail_on: Option<FailOn>,
) -> anyhow::Result<()> {
    let mut server = server_from(cli, config)?;
    let target = server.target().to_string();
    let facts = diagnose::gather(
        &mut server,
        samples,
        interval.unwrap_or(config.sampler.interval),
        config.sampler.window,
        engine_status,
        config.policy.replica.max_lag,
        config.policy.purge_rate.min_view_age,
    )
    .await?;
    let findings = diagnose::analyze(&facts);
    if json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&diagnose::to_json(&facts, &findings, &target))?
        )?;
    } else {
        out!("{}", diagnose::to_text(&facts, &findings, &target))?;
    }
    let threshold = match fail_on {
        None => return Ok(()),
        Some(FailOn::Warning) => diagnose::Severity::Warning,
        Some(FailOn::Critical) => diagnose::Severity::Critical,
    };
    let failing = findings.iter().filter(|f| f.severity >= threshold).count();
    if failing > 0 {
        return Err(Exit(
            6,
            format!(
                "{failing} finding(s) at {} or above (--fail-on)",
                threshold.label()
            ),
        )
        .into());
    }
    Ok(())
}

async fn release(
    config: &Config,
    knob: innopilot::server::Knob,
    state_file: Option<&std::path::Path>,
) -> anyhow::Result<()> {
    let state = state_file.unwrap_or(&config.control.state_file);
    // The run reads requests once per tick: a few ticks, and never less than 5 s.
    let wait = (config.sampler.interval * 4).max(Duration::from_secs(5));
    outln!(
        "{}",
        innopilot::commands::restore::release(state, knob, wait).await?
    )?;
    Ok(())
}

async fn restore(
    cli: &Cli,
    config: &Config,
    state_file: Option<&std::path::Path>,
) -> anyhow::Result<()> {
    let path = state_file.unwrap_or(&config.control.state_file);
    let mut server = server_from(cli, config)?;
    let target = server.target().to_string();
    let done = innopilot::commands::restore::restore(&mut server, &target, config, path).await?;
    outln!("{done}; {} marked clean", path.display())?;
    Ok(())
}

fn check_config(cli: &Cli) -> anyhow::Result<()> {
    use innopilot::config::effective::{Effective, Origin, Override};
    let config = load_config(cli)?;
    let (source, file) = match &cli.global.config {
        Some(p) => {
            // Already read and validated by `load_config`.
            let text = std::fs::read_to_string(p)
                .with_context(|| format!("cannot read config file {}", p.display()))?;
            (p.display().to_string(), Some(text))
        }
        None => ("built-in defaults".to_string(), None),
    };
    let mut overrides = Vec::new();
    if let Some(dsn) = cli.global.dsn.as_deref().filter(|d| !d.trim().is_empty()) {
        // clap fills --dsn from INNOPILOT_DSN too: the same text means it came from there.
        let origin = match std::env::var("INNOPILOT_DSN") {
            Ok(env) if env == dsn => Origin::Env("INNOPILOT_DSN"),
            _ => Origin::Flag("--dsn"),
        };
        overrides.push(Override {
            key: "server.dsn",
            value: dsn.to_string(),
            origin,
        });
    }
    if let Some(p) = &cli.global.defaults_file {
        overrides.push(Override {
            key: "server.defaults_file",
            value: p.display().to_string(),
            origin: Origin::Flag("--defaults-file"),
        });
    }
    let effective = Effective::build(
        file.as_deref().map(|text| (source.as_str(), text)),
        &overrides,
    )?;
    // The layering must mean what the loader means; a difference is a bug here.
    let layered = effective.config()?;
    let mut expected = config.clone();
    if let Some(dsn) = expected.server.dsn.as_mut() {
        // The effective configuration shows the DSN without its password.
        *dsn = innopilot::config::effective::redact_dsn(dsn);
    }
    if file.is_some() && overrides.is_empty() && layered != expected {
        anyhow::bail!("internal error: the effective configuration differs from {source}");
    }
    outln!("# {source}: OK")?;
    outln!("# The effective configuration; after each value, where it came from.")?;
    if std::env::var_os(PASSWORD_ENV).is_some() {
        outln!("# The password comes from {PASSWORD_ENV} (not shown).")?;
    }
    out!("{}", effective.to_toml())?;
    Ok(())
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match &cli.command {
        Command::CheckConfig => check_config(&cli),
        Command::Status { json, verbose } => {
            let config = load_config(&cli)?;
            status(&cli, &config, *json, *verbose).await
        }
        Command::Run {
            dry_run,
            audit,
            state_file,
            interval,
            listen,
            wait_for_server,
            record,
        } => {
            let overrides = Overrides {
                interval: *interval,
                dry_run: *dry_run,
                audit: audit.clone(),
                state_file: state_file.clone(),
                listen: listen.clone(),
            };
            let config = Config::load_with(cli.global.config.as_deref(), &overrides)?;
            run_controller(&cli, config, overrides, *wait_for_server, record.as_deref()).await
        }
        Command::Drain {
            target,
            timeout,
            boost,
            boost_purge_threads,
            boost_io_capacity,
            progress_interval,
            poll,
            quiet,
        } => {
            let config = load_config(&cli)?;
            let opts = DrainOptions {
                target: *target,
                timeout: *timeout,
                boost: boost.then_some(Boost {
                    purge_threads: *boost_purge_threads,
                    io_capacity: *boost_io_capacity,
                }),
                progress_every: *progress_interval,
                poll_only: *poll,
            };
            drain_cmd(&cli, &config, opts, *quiet).await
        }
        Command::Diagnose {
            json,
            engine_status,
            samples,
            interval,
            fail_on,
        } => {
            let config = load_config(&cli)?;
            diagnose_cmd(
                &cli,
                &config,
                *json,
                *engine_status,
                *samples,
                *interval,
                *fail_on,
            )
            .await
        }
        Command::Completions { shell } => {
            use std::io::Write;
            std::io::stdout().write_all(&innopilot::cli::completions(*shell))?;
            Ok(())
        }
        Command::Man { out_dir: None } => {
            use std::io::Write;
            std::io::stdout().write_all(&innopilot::cli::man_page()?)?;
            Ok(())
        }
        Command::Man { out_dir: Some(dir) } => {
            let written = innopilot::cli::write_man_pages(dir)
                .with_context(|| format!("cannot write the man pages to {}", dir.display()))?;
            for path in written {
                outln!("{}", path.display())?;
            }
            Ok(())
        }
        Command::Release { knob, state_file } => {
            let config = load_config(&cli)?;
            release(&config, *knob, state_file.as_deref()).await
        }
        Command::Restore { state_file } => {
            let config = load_config(&cli)?;
            restore(&cli, &config, state_file.as_deref()).await
        }
        Command::Record {
            out,
            interval,
            count,
        } => {
            let config = load_config(&cli)?;
            record_cmd(&cli, &config, out, *interval, *count).await
        }
        Command::Simulate { .. } | Command::Replay { .. } => {
            unreachable!("dispatched before the runtime starts")
        }
        Command::Watch {
            json,
            interval,
            count,
        } => {
            let config = load_config(&cli)?;
            watch(&cli, &config, *json, *interval, *count)
                .await
                .context("watch stopped")
        }
    }
}

/// `simulate` and `replay` run their own deterministic runtimes (virtual time), so
/// they are dispatched before the main runtime starts.
fn run_offline(cli: &Cli) -> Option<anyhow::Result<()>> {
    match &cli.command {
        Command::Simulate { .. } => Some(simulate(cli)),
        Command::Replay { file, policy, json } => Some(replay_cmd(cli, file, policy, *json)),
        _ => None,
    }
}

fn simulate(cli: &Cli) -> anyhow::Result<()> {
    use innopilot::sim;
    let &Command::Simulate {
        compare,
        ref scenario,
        ref policy,
        seed,
        read_iops,
        ref out,
        json,
    } = &cli.command
    else {
        anyhow::bail!("simulate: called for another command");
    };
    let (scenario, policy, out) = (scenario.as_deref(), policy.as_deref(), out.as_deref());
    // With --config, the innopilot peer runs that configuration instead of the defaults.
    let config = match &cli.global.config {
        Some(_) => Some(load_config(cli)?),
        None => None,
    };
    if compare {
        let started = std::time::Instant::now();
        let table = sim::compare::compare_with(&sim::compare::CompareOptions {
            innopilot_config: config,
            ..sim::compare::CompareOptions::all(seed)
        })?;
        if json {
            outln!("{}", table.to_json())?;
        } else {
            outln!("{table}")?;
            eprintln!("(seed {seed}; {:.1} s)", started.elapsed().as_secs_f64());
        }
        return Ok(());
    }
    let (Some(s), Some(p)) = (scenario, policy) else {
        anyhow::bail!("give --compare, or both --scenario and --policy");
    };
    let sc = sim::Scenario::named(s).ok_or_else(|| sim::SimError::UnknownScenario(s.into()))?;
    let sc = match read_iops {
        Some(n) => sc.with_read_iops(n)?,
        None => sc,
    };
    let peer = sim::Peer::named(p).ok_or_else(|| sim::SimError::UnknownPeer(p.into()))?;
    let run = sim::compare::run_with(&sc, &peer, seed, config.as_ref())?;
    let summary = sim::summary(&run);
    if let Some(dir) = out {
        // The plots compare with the flavor's defaults on the same axes, so a reader
        // sees whether the policy helped.
        let baseline_name = match run.flavor {
            sim::scenario::SimFlavor::MySql80 => "mysql8_defaults",
            sim::scenario::SimFlavor::MariaDb1011 => "mariadb1011_defaults",
        };
        let baseline = match sim::Peer::named(baseline_name) {
            Some(b) if b.name != run.peer => Some(sim::compare::run_with(&sc, &b, seed, None)?),
            _ => None,
        };
        sim::write_outputs_compared(&run, baseline.as_ref(), dir)?;
    }
    if json {
        outln!("{}", serde_json::to_string_pretty(&summary)?)?;
    } else {
        // The same fields as the JSON, one per line, for a reader.
        let v = serde_json::to_value(&summary)?;
        for (key, value) in v.as_object().into_iter().flatten() {
            match value {
                serde_json::Value::String(s) => outln!("{key:<18} {s}")?,
                serde_json::Value::Number(n) => match n.as_f64() {
                    Some(x) if n.is_f64() => outln!("{key:<18} {x:.2}")?,
                    _ => outln!("{key:<18} {n}")?,
                },
                other => outln!("{key:<18} {other}")?,
            }
        }
        if let Some(dir) = out {
            eprintln!(
                "wrote timeseries.csv, summary.json, decisions.jsonl and plots (against the flavor's defaults) to {}",
                dir.display()
            );
        }
    }
    Ok(())
}

fn replay_cmd(cli: &Cli, file: &std::path::Path, policy: &str, json: bool) -> anyhow::Result<()> {
    use innopilot::commands::replay::replay;
    use innopilot::server::recording::Recording;
    let rec = Recording::load(file)?;
    let config = if policy == "innopilot" {
        load_config(cli)?
    } else {
        innopilot::sim::Peer::named(policy)
            .and_then(|p| p.config())
            .ok_or_else(|| anyhow::anyhow!("policy `{policy}` has no controller to replay; use innopilot or mariadb1065_adaptive"))?
    };
    for step in replay(&rec, config)? {
        if json {
            outln!("{}", serde_json::to_string(&step)?)?;
        } else {
            outln!("{step}")?;
        }
    }
    Ok(())
}

async fn record_cmd(
    cli: &Cli,
    config: &Config,
    out: &std::path::Path,
    interval: Option<Duration>,
    count: Option<u64>,
) -> anyhow::Result<()> {
    let mut server = server_from(cli, config)?;
    let mut recorder = innopilot::server::recording::Recorder::create(out)
        .with_context(|| format!("cannot create the recording {}", out.display()))?;
    let shutdown = async {
        shutdown_signal().await;
    };
    let n = innopilot::commands::replay::record(
        &mut server,
        &mut recorder,
        interval.unwrap_or(config.sampler.interval),
        count,
        shutdown,
    )
    .await?;
    eprintln!("recorded {n} samples to {}", out.display());
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let offline = matches!(
        cli.command,
        Command::Simulate { .. } | Command::Replay { .. }
    );
    init_logging(cli.global.log_format, offline);
    let args: Vec<String> = std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    if let Some(w) = innopilot::server::dsn::argv_password_warning(&args) {
        tracing::warn!("{w}");
    }
    if let Some(result) = run_offline(&cli) {
        return finish(result);
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("innopilot: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    finish(runtime.block_on(run(cli)))
}
