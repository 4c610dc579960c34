//! Malformed input never panics: config files, DSNs, my.cnf files, version strings and
//! the values a server returns (empty, NULL, huge, negative, non-numeric, unknown
//! names) become errors or "unknown", never a crash or a wrong number. And a server of
//! unknown version is observed, but nothing on it is changed that innopilot cannot
//! verify as dynamic.

use innopilot::config::Config;
use innopilot::control::guard::{Guard, RejectKind, Verdict};
use innopilot::policy::Intent;
use innopilot::server::dsn::{parse_defaults, parse_dsn};
use innopilot::server::flavor::{
    build_knob_caps, signal_sources, HistorySource, RedoSource, ReplicaSource, ServerIdentity,
    SignalSources, UndoSource, VariableMeta,
};
use innopilot::server::sample::{build_sample, parse_u64, MetricRows, RowKind};
use innopilot::server::Knob;
use proptest::prelude::*;

fn value() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        Just(None),
        Just(Some(String::new())),
        Just(Some("18446744073709551616".into())),
        Just(Some("-1".into())),
        Just(Some("ON".into())),
        Just(Some("1e9".into())),
        "[0-9]{1,25}".prop_map(Some),
        "\\PC{0,30}".prop_map(Some),
    ]
}

fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("Innodb_history_list_length".to_string()),
        Just("Innodb_checkpoint_age".to_string()),
        Just("Innodb_checkpoint_max_age".to_string()),
        Just("Uptime".to_string()),
        Just("innodb_purge_threads".to_string()),
        Just("innodb_redo_log_capacity".to_string()),
        Just("trx_rseg_history_len".to_string()),
        Just("Innodb_redo_log_current_lsn".to_string()),
        "\\PC{0,30}",
    ]
}

fn kind() -> impl Strategy<Value = RowKind> {
    prop_oneof![
        Just(RowKind::Status),
        Just(RowKind::Variable),
        Just(RowKind::Metric),
        Just(RowKind::UndoSpace),
    ]
}

fn sources() -> impl Strategy<Value = SignalSources> {
    (0..3u8).prop_map(|r| SignalSources {
        redo: [
            RedoSource::CheckpointAgeStatus,
            RedoSource::RedoLsnStatus,
            RedoSource::InnodbMetrics,
        ][r as usize],
        history: if r == 0 {
            HistorySource::StatusVar
        } else {
            HistorySource::InnodbMetrics
        },
        undo: UndoSource::Unknown,
        replica: ReplicaSource::NotReplica,
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn server_rows_never_panic(rows in proptest::collection::vec((kind(), name(), value()), 0..40), src in sources()) {
        let mut m = MetricRows::default();
        for (k, n, v) in &rows {
            m.push(*k, n, v.clone());
        }
        let s = build_sample(&m, &src);
        // Whatever came in, a fill is either unknown or a finite non-negative number.
        if let Some(f) = s.redo.fill() {
            prop_assert!(f.is_finite() && f >= 0.0);
        }
    }

    #[test]
    fn values_parse_or_fail(v in "\\PC{0,40}") {
        if let Ok(n) = parse_u64(&v) {
            let t = v.trim().to_ascii_uppercase();
            // Digits, optionally with a zero fraction (a double the server prints).
            let whole = match t.split_once('.') {
                Some((w, f)) if f.chars().all(|c| c == '0') => w,
                Some(_) => "",
                None => t.as_str(),
            };
            prop_assert!((!whole.is_empty() && whole.chars().all(|c| c.is_ascii_digit())) || n <= 1);
        }
    }

    #[test]
    fn version_strings_never_panic(v in "\\PC{0,40}", c in "\\PC{0,40}") {
        let _ = ServerIdentity::parse(&v, &c);
    }

    #[test]
    fn config_text_never_panics(s in "\\PC{0,300}") {
        let _ = Config::parse(&s, "fuzz.toml");
    }

    #[test]
    fn config_shaped_text_never_panics(
        section in prop_oneof![Just("server"), Just("sampler"), Just("control"), Just("audit"), Just("knobs.innodb_io_capacity"), Just("policy.watermark")],
        key in prop_oneof![Just("interval".to_string()), Just("min".to_string()), Just("max".to_string()), Just("low_pct".to_string()), Just("max_size".to_string()), Just("dsn".to_string()), Just("query_timeout".to_string()), "[a-z_]{1,12}"],
        val in prop_oneof![Just("\"1s\"".to_string()), Just("-1".to_string()), Just("1e308".to_string()), Just("\"\"".to_string()), "[0-9]{1,22}", "\"\\PC{0,20}\""],
    ) {
        let _ = Config::parse(&format!("[{section}]\n{key} = {val}\n"), "fuzz.toml");
    }

    #[test]
    fn dsns_and_defaults_never_panic(s in "\\PC{0,120}") {
        let _ = parse_dsn(&s);
        let _ = parse_defaults(&s);
        let _ = parse_dsn(&format!("mysql://{s}"));
        let _ = parse_defaults(&format!("[client]\n{s}"));
    }
}

#[test]
fn unknown_versions_are_observed_but_never_changed() {
    for (v, c) in [
        ("13.0.1", "MySQL Community Server - GPL"),
        ("4.1.22", "MySQL"),
        ("12.0.1-future", ""),
    ] {
        let id = ServerIdentity::parse(v, c).unwrap();
        assert!(!id.is_known_version(), "{v}");
        let rows: Vec<VariableMeta> = Knob::ALL
            .iter()
            .map(|k| VariableMeta {
                name: k.var_name().into(),
                value: Some("10".into()),
                read_only: None,
                min: None,
                max: None,
            })
            .collect();
        let caps = build_knob_caps(&id, &rows);
        // Observing still works: the signal sources are chosen as for the nearest flavor.
        let _ = signal_sources(&id, UndoSource::Unknown, ReplicaSource::NotReplica);
        let guard = Guard::new(Config::default().knobs, 600);
        for knob in Knob::ALL {
            match guard.review(0, knob, 20, 10, caps.get(&knob), Intent::Act) {
                Verdict::Reject { kind, .. } => {
                    assert!(
                        matches!(kind, RejectKind::NotSettable | RejectKind::NotManaged),
                        "{v} {knob}: {kind:?}"
                    )
                }
                other => panic!("{v}: {knob} would be changed: {other:?}"),
            }
        }
    }
}

#[test]
fn command_line_settings_are_validated_with_the_configuration() {
    // The default window (10 s) is not twice a 30 s interval: refused before anything
    // connects, with both settings named.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_innopilot"))
        .args(["run", "--dry-run", "--interval", "30s"])
        .env_remove("INNOPILOT_DSN")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("sampler.window")
            && err.contains("twice sampler.interval")
            && err.contains("--interval"),
        "{err}"
    );
}
