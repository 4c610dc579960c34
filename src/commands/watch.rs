//! `innopilot watch`, and the one passive sampling loop behind it and `record`
//! ([`sample_every`]): a sample every interval, signals derived over a window, and the
//! reconnect rule (after a lost connection, probe again before the next sample, and
//! forget the window: samples from before say nothing about after).

use std::future::Future;
use std::ops::ControlFlow;
use std::time::Duration;

use tokio::time::MissedTickBehavior;

use crate::commands::status;
use crate::server::{Capabilities, Server, ServerError};
use crate::signals::{SignalWindow, Signals};

/// What one tick of [`sample_every`] brought.
#[derive(Debug)]
pub enum Tick<'a> {
    /// A sample, with what the window derives from it.
    Sampled(&'a Signals),
    /// A sample, or the probe after a lost connection, failed. After a lost connection
    /// the next tick probes again.
    Failed(&'a ServerError),
    /// The server answers again after a lost connection (capabilities re-read).
    Regained(&'a Capabilities),
}

/// Samples `server` every `interval` (a slow tick is skipped, not caught up) until
/// `shutdown` resolves or `on_tick` breaks, handing each tick to `on_tick`. The caller
/// probes first: a wrong DSN should fail at once, not be retried forever. Never sets
/// anything. An error of `on_tick` ends the loop with it.
pub async fn sample_every<S, F, E>(
    server: &mut S,
    window: &mut SignalWindow,
    interval: Duration,
    shutdown: F,
    mut on_tick: impl FnMut(Tick<'_>) -> Result<ControlFlow<()>, E>,
) -> Result<(), E>
where
    S: Server,
    F: Future,
{
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Skip);
    let mut need_probe = false;
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => return Ok(()),
            _ = ticker.tick() => {}
        }
        if need_probe {
            match server.probe().await {
                Ok(caps) => {
                    need_probe = false;
                    if on_tick(Tick::Regained(&caps))?.is_break() {
                        return Ok(());
                    }
                }
                Err(e) => {
                    if on_tick(Tick::Failed(&e))?.is_break() {
                        return Ok(());
                    }
                    continue;
                }
            }
        }
        let flow = match server.sample().await {
            Ok(sample) => on_tick(Tick::Sampled(&window.push(sample)))?,
            Err(e) => {
                if e.is_connection_lost() {
                    need_probe = true;
                    window.reset();
                }
                on_tick(Tick::Failed(&e))?
            }
        };
        if flow.is_break() {
            return Ok(());
        }
    }
}

/// What `watch` shows and how often.
#[derive(Debug, Clone)]
pub struct WatchOptions {
    pub interval: Duration,
    /// The span rates and trends are computed over (`sampler.window`).
    pub window: Duration,
    /// Stop after this many samples.
    pub count: Option<u64>,
    /// One JSON object per sample instead of a table row.
    pub json: bool,
    /// `policy.purge_rate.min_view_age`, for the purge estimate in `--json`.
    pub min_view_age: Duration,
}

/// `innopilot watch`: a header (text only), then one line per sample to `emit`, until
/// `shutdown`, `count` samples, or `emit` returns false (the reader went away: a
/// closed pipe ends `watch` quietly). Only the first probe's failure is an error; later
/// failures are logged and retried on the next tick.
pub async fn watch<S, F>(
    server: &mut S,
    opts: &WatchOptions,
    shutdown: F,
    mut emit: impl FnMut(&str) -> bool,
) -> Result<(), ServerError>
where
    S: Server,
    F: Future,
{
    server.probe().await?;
    let mut window = SignalWindow::new(opts.window);
    if !opts.json && !emit(&status::watch_header()) {
        return Ok(());
    }
    let mut taken = 0u64;
    sample_every(server, &mut window, opts.interval, shutdown, |tick| {
        match tick {
            Tick::Sampled(signals) => {
                let line = if opts.json {
                    status::watch_json(signals, opts.min_view_age).to_string()
                } else {
                    status::watch_line(signals)
                };
                if !emit(&line) {
                    return Ok(ControlFlow::Break(()));
                }
                taken += 1;
                if opts.count.is_some_and(|c| taken >= c) {
                    return Ok(ControlFlow::Break(()));
                }
            }
            Tick::Failed(e) => tracing::warn!("{e}"),
            Tick::Regained(caps) => {
                tracing::info!(server = %caps.identity.version_string, "connection regained")
            }
        }
        Ok::<_, ServerError>(ControlFlow::Continue(()))
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::testkit::Scripted;
    use crate::sim::model::SimServer;
    use crate::sim::scenario::SimFlavor;
    use crate::sim::Scenario;

    fn opts(json: bool, count: u64) -> WatchOptions {
        WatchOptions {
            interval: Duration::from_secs(1),
            window: Duration::from_secs(30),
            count: Some(count),
            json,
            min_view_age: Duration::from_secs(10),
        }
    }

    fn server() -> SimServer {
        let sc = Scenario::named("long_read_view").unwrap();
        SimServer::for_scenario(&sc, SimFlavor::MariaDb1011, 1)
    }

    #[tokio::test(start_paused = true)]
    async fn watch_prints_a_header_then_count_lines() {
        let mut lines = Vec::new();
        watch(
            &mut server(),
            &opts(false, 3),
            std::future::pending::<()>(),
            |l| {
                lines.push(l.to_string());
                true
            },
        )
        .await
        .unwrap();
        assert_eq!(lines.len(), 4, "{lines:?}");
        assert_eq!(lines[0], status::watch_header());
        let mut json = Vec::new();
        watch(
            &mut server(),
            &opts(true, 2),
            std::future::pending::<()>(),
            |l| {
                json.push(serde_json::from_str::<serde_json::Value>(l).unwrap());
                true
            },
        )
        .await
        .unwrap();
        assert_eq!(json.len(), 2);
        assert!(json[1]["signals"].is_object(), "{}", json[1]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_lost_connection_is_probed_again_and_resets_the_window() {
        let mut s = Scripted::new(server());
        s.samples = [None, None, Some(false), Some(true), None, None].into();
        let mut window = SignalWindow::new(Duration::from_secs(30));
        let mut seen = Vec::new();
        sample_every(
            &mut s,
            &mut window,
            Duration::from_secs(1),
            std::future::pending::<()>(),
            |tick| {
                seen.push(match tick {
                    Tick::Sampled(sig) => format!("sample reset={}", sig.window_reset),
                    Tick::Failed(e) => format!("failed lost={}", e.is_connection_lost()),
                    Tick::Regained(_) => "regained".into(),
                });
                let done = seen.iter().filter(|l| l.starts_with("sample")).count() == 4;
                Ok::<_, ServerError>(if done {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                })
            },
        )
        .await
        .unwrap();
        assert_eq!(
            seen,
            [
                "sample reset=true",
                "sample reset=false",
                "failed lost=false",
                "failed lost=true",
                "regained",
                "sample reset=true",
                "sample reset=false",
            ]
        );
        assert_eq!(s.probe_count, 1);
    }
}
