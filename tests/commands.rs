//! `diagnose` and `drain` through the library's public entry points, against the
//! simulator: the same code paths a live server takes, with virtual time.

use std::time::Duration;

use innopilot::commands::diagnose;
use innopilot::commands::drain::{self, DrainOptions, Ended, Progress};
use innopilot::config::Config;
use innopilot::sim::model::SimServer;
use innopilot::sim::scenario::{ReadView, SimFlavor};
use innopilot::sim::Scenario;

#[tokio::test(start_paused = true)]
async fn diagnose_json_on_the_simulator_names_the_blocking_read_view() {
    let scenario = Scenario::named("long_read_view").unwrap();
    let mut server = SimServer::for_scenario(&scenario, SimFlavor::MariaDb1011, 3);
    // 30 s into the scenario's read view (60 s to 160 s).
    server.advance(90);
    let config = Config::default();
    let facts = diagnose::gather(
        &mut server,
        4,
        Duration::from_secs(1),
        config.sampler.window,
        false,
        config.policy.replica.max_lag,
        config.policy.purge_rate.min_view_age,
    )
    .await
    .unwrap();
    let findings = diagnose::analyze(&facts);
    let json = diagnose::to_json(&facts, &findings, "simulator");
    assert_eq!(json["server"]["flavor"], "mariadb", "{json:#}");
    let blocked = json["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == "purge_blocked")
        .unwrap_or_else(|| panic!("no purge_blocked finding: {json:#}"));
    assert_eq!(blocked["details"]["thread_id"], 1000, "{blocked:#}");
    assert_eq!(blocked["sql"][0], "KILL 1000;");
    let statement = blocked["details"]["statement"].as_str().unwrap();
    assert!(statement.contains("nightly report"), "{statement}");
    assert!(json["worst"] == "warning" || json["worst"] == "critical");
}

#[tokio::test(start_paused = true)]
async fn drain_on_the_simulator_waits_out_a_read_view_then_finishes() {
    // Purge debt, and a report that holds its read view for the first 40 s.
    let mut scenario = Scenario::named("cold_undo_restart").unwrap();
    scenario.restarts.clear();
    scenario.load = vec![(0.0, 0.3)];
    scenario.initial_history = 500_000.0;
    scenario.views = vec![ReadView {
        start_s: 0.0,
        end_s: 40.0,
    }];
    let mut server = SimServer::for_scenario(&scenario, SimFlavor::MariaDb1011, 3);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("progress.txt");
    let mut progress = Progress::to_writer(Box::new(std::fs::File::create(&log).unwrap()));
    let opts = DrainOptions {
        target: 20_000,
        timeout: Duration::from_secs(300),
        boost: None,
        progress_every: Duration::from_secs(1),
        poll_only: false,
    };
    let report = drain::drain(
        &mut server,
        &Config::default().knobs,
        &opts,
        std::future::pending::<String>(),
        &mut progress,
    )
    .await
    .unwrap();
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(report.ended, Ended::Done, "{text}");
    assert!(report.elapsed >= Duration::from_secs(40), "{report:?}");
    assert!(
        report.end_history.unwrap() < report.start_history,
        "{report:?}"
    );
    assert!(
        text.contains("purge appears blocked, presumably by transaction 421000"),
        "{text}"
    );
}
