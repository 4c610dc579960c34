//! The `innopilot` binary: parse the command line, set up logging, dispatch. All logic
//! lives in the library; `anyhow` is used here only.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use tokio::time::MissedTickBehavior;

use innopilot::cli::{Cli, Command, LogFormat};
use innopilot::config::{Config, ConfigError};
use innopilot::connect::{live_server, resolve_target, PASSWORD_ENV};
use innopilot::report;
use innopilot::sample::SignalWindow;
use innopilot::server::dsn::DsnError;
use innopilot::server::mysql::LiveServer;
use innopilot::server::{Capabilities, Server, ServerError};

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("innopilot=info,warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

/// Exit codes: 1 runtime, 2 configuration/arguments, 3 privileges.
fn exit_code(err: &anyhow::Error) -> u8 {
    for cause in err.chain() {
        if cause.is::<ConfigError>() || cause.is::<DsnError>() {
            return 2;
        }
        if let Some(ServerError::Denied { .. }) = cause.downcast_ref::<ServerError>() {
            return 3;
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
    let env_pw = std::env::var(PASSWORD_ENV).ok();
    let target = resolve_target(
        cli.global.dsn.as_deref(),
        cli.global.defaults_file.as_deref(),
        env_pw,
        config,
    )?;
    Ok(live_server(target, config))
}

async fn status(cli: &Cli, config: &Config, json: bool) -> anyhow::Result<()> {
    let mut server = server_from(cli, config)?;
    let caps = server.probe().await?;
    let mut window = SignalWindow::new(config.sampler.window);
    window.push(server.sample().await?);
    tokio::time::sleep(config.sampler.interval).await;
    let signals = window.push(server.sample().await?);
    if json {
        println!("{}", serde_json::to_string_pretty(&report::status_json(&caps, &signals))?);
    } else {
        print!("{}", report::status_text(&caps, &signals));
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
    let interval = interval.unwrap_or(config.sampler.interval);
    let mut server = server_from(cli, config)?;
    // The first probe must succeed: a wrong DSN should fail fast, not retry forever.
    let mut caps: Option<Capabilities> = Some(server.probe().await?);
    let mut window = SignalWindow::new(config.sampler.window);
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Skip);
    let mut taken = 0u64;
    if !json {
        println!("{}", report::watch_header());
    }
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    loop {
        tokio::select! {
            _ = &mut ctrl_c => return Ok(()),
            _ = ticker.tick() => {}
        }
        if caps.is_none() {
            match server.probe().await {
                Ok(c) => {
                    tracing::info!(server = %c.identity.version_string, "connection regained");
                    caps = Some(c);
                }
                Err(e) => {
                    tracing::warn!("{e}");
                    continue;
                }
            }
        }
        match server.sample().await {
            Ok(sample) => {
                let signals = window.push(sample);
                if json {
                    println!("{}", report::watch_json(&signals));
                } else {
                    println!("{}", report::watch_line(&signals));
                }
                taken += 1;
                if count.is_some_and(|c| taken >= c) {
                    return Ok(());
                }
            }
            Err(e) => {
                tracing::warn!("{e}");
                if e.is_connection_lost() {
                    // Samples from before a lost connection say nothing about after it.
                    caps = None;
                    window.reset();
                }
            }
        }
    }
}

fn check_config(cli: &Cli) -> anyhow::Result<()> {
    let config = load_config(cli)?;
    let source = cli
        .global
        .config
        .as_ref()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| "built-in defaults".into());
    println!("{source}: OK");
    println!("{config:#?}");
    Ok(())
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match &cli.command {
        Command::CheckConfig => check_config(&cli),
        Command::Status { json } => {
            let config = load_config(&cli)?;
            status(&cli, &config, *json).await
        }
        Command::Watch { json, interval, count } => {
            let config = load_config(&cli)?;
            watch(&cli, &config, *json, *interval, *count)
                .await
                .context("watch stopped")
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.global.log_format);
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("innopilot: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("innopilot: {e:#}");
            ExitCode::from(exit_code(&e))
        }
    }
}
