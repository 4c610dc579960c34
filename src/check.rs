//! `/check`: may background work proceed? A freno-compatible answer for gh-ost
//! (`--throttle-http`), batch jobs and backups, so they yield while InnoDB is behind
//! instead of fighting innopilot for the same headroom (seed 004's backup against a
//! lagging replica).
//!
//! 200 while purge debt, redo fill and replica lag are all under their `[check]`
//! limits; 429 (Too Many Requests, as freno answers "throttled") with every reason
//! otherwise; 503 while innopilot has no fresh sample, so a client never proceeds on
//! stale data. The body is freno's JSON (`StatusCode`, `Value`, `Threshold`,
//! `Message`) plus `reasons`. Like the other endpoints it reads only the last
//! published [`Snapshot`]: a scrape never touches the database.

use std::time::Duration;

use serde_json::json;
use tokio::time::Instant;

use crate::config::CheckConfig;
use crate::metrics::{healthz, Snapshot};

/// One limit exceeded: the measured value, its threshold and the reason in words.
#[derive(Debug, Clone, PartialEq)]
pub struct Over {
    pub value: f64,
    pub threshold: f64,
    pub message: String,
}

/// The verdict: HTTP status and freno's JSON body.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub status: u16,
    pub body: serde_json::Value,
}

/// Which limits the snapshot's signals exceed (empty: background work may proceed).
pub fn over_limits(s: &Snapshot, limits: &CheckConfig) -> Vec<Over> {
    let mut out = Vec::new();
    let Some(sig) = &s.signals else {
        return out;
    };
    if let Some(h) = sig.history_len {
        if h > limits.max_history_undo_logs {
            out.push(Over {
                value: h as f64,
                threshold: limits.max_history_undo_logs as f64,
                message: format!(
                    "purge debt: history list length {h} undo logs is over check.max_history_undo_logs = {}",
                    limits.max_history_undo_logs
                ),
            });
        }
    }
    if let Some(fill) = sig.redo_fill.filter(|f| f.is_finite()) {
        let limit = limits.max_redo_fill_pct / 100.0;
        if fill > limit {
            out.push(Over {
                value: fill,
                threshold: limit,
                message: format!(
                    "redo fill {:.1} % of the sync-flush point is over check.max_redo_fill_pct = {}",
                    fill * 100.0,
                    limits.max_redo_fill_pct
                ),
            });
        }
    }
    let x = &sig.sample;
    if x.is_replica {
        let limit = limits.max_replica_lag.as_secs();
        match x.replica_lag_s {
            Some(lag) if lag > limit => out.push(Over {
                value: lag as f64,
                threshold: limit as f64,
                message: format!(
                    "replica lag {lag} s is over check.max_replica_lag = {}",
                    humantime::format_duration(limits.max_replica_lag)
                ),
            }),
            Some(_) => {}
            None => out.push(Over {
                value: f64::NAN,
                threshold: limit as f64,
                message: "replica lag is unknown (replication is not running)".into(),
            }),
        }
    }
    out
}

/// The answer to `GET /check`.
pub fn check(s: &Snapshot, now: Instant, stale_after: Duration, limits: &CheckConfig) -> Verdict {
    let health = healthz(s, now, stale_after);
    if !health.ok {
        return Verdict {
            status: 503,
            body: json!({
                "StatusCode": 503,
                "Value": 0,
                "Threshold": 0,
                "Message": format!("no fresh sample, so no answer: {}", health.message),
                "reasons": [health.message],
            }),
        };
    }
    let over = over_limits(s, limits);
    match over.first() {
        None => Verdict {
            status: 200,
            body: json!({
                "StatusCode": 200,
                "Value": 0,
                "Threshold": 0,
                "Message": "ok: purge debt, redo fill and replica lag are under their limits",
                "reasons": [],
            }),
        },
        Some(first) => Verdict {
            status: 429,
            body: json!({
                "StatusCode": 429,
                // JSON has no NaN: an unknown value is null.
                "Value": first.value.is_finite().then_some(first.value),
                "Threshold": first.threshold,
                "Message": over.iter().map(|o| o.message.as_str()).collect::<Vec<_>>().join("; "),
                "reasons": over.iter().map(|o| o.message.clone()).collect::<Vec<_>>(),
            }),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Phase;
    use crate::signals::Signals;

    fn snapshot(history: u64, fill: f64, lag: Option<Option<u64>>) -> Snapshot {
        let mut sig = Signals {
            history_len: Some(history),
            redo_fill: Some(fill),
            ..Signals::default()
        };
        if let Some(l) = lag {
            sig.sample.is_replica = true;
            sig.sample.replica_lag_s = l;
        }
        Snapshot {
            phase: Phase::Running,
            connected: true,
            last_sample: Some(Instant::now()),
            signals: Some(sig),
            ..Snapshot::default()
        }
    }

    #[test]
    fn each_limit_throttles_with_its_reason() {
        let limits = CheckConfig {
            enabled: true,
            max_history_undo_logs: 1000,
            max_redo_fill_pct: 75.0,
            max_replica_lag: Duration::from_secs(30),
        };
        let d = Duration::from_secs(10);
        let now = Instant::now();
        let v = check(&snapshot(10, 0.1, None), now, d, &limits);
        assert_eq!(v.status, 200, "{}", v.body);
        assert_eq!(v.body["StatusCode"], 200);

        let v = check(&snapshot(5000, 0.1, None), now, d, &limits);
        assert_eq!(v.status, 429);
        assert_eq!(v.body["Value"], 5000.0);
        assert_eq!(v.body["Threshold"], 1000.0);
        assert!(v.body["Message"]
            .as_str()
            .unwrap()
            .contains("max_history_undo_logs"));

        let v = check(&snapshot(10, 0.9, Some(Some(120))), now, d, &limits);
        assert_eq!(v.status, 429);
        assert_eq!(v.body["reasons"].as_array().unwrap().len(), 2, "{}", v.body);

        let v = check(&snapshot(10, 0.1, Some(None)), now, d, &limits);
        assert_eq!(v.status, 429);
        assert!(v.body["Value"].is_null());

        // No fresh sample: no answer either way.
        let stale = now + Duration::from_secs(11);
        assert_eq!(
            check(&snapshot(10, 0.1, None), stale, d, &limits).status,
            503
        );
        assert_eq!(check(&Snapshot::default(), now, d, &limits).status, 503);
    }
}
