//! What `diagnose` reports: a [`Finding`] (area, id, severity, explanation, advice and
//! its SQL) and its [`Severity`]. Shared by the checks in [`super::diagnose`] and
//! [`super::advice`].

use serde::Serialize;
use serde_json::Value;

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    Ok,
    Info,
    Warning,
    Critical,
}

impl Severity {
    pub fn label(self) -> &'static str {
        match self {
            Severity::Ok => "OK",
            Severity::Info => "INFO",
            Severity::Warning => "WARNING",
            Severity::Critical => "CRITICAL",
        }
    }
}

/// One finding.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    /// flushing, purge, undo, buffer_pool, replica, engine_status.
    pub area: &'static str,
    /// A stable identifier, e.g. `purge_blocked`.
    pub id: &'static str,
    pub severity: Severity,
    pub title: String,
    /// What is going on, with the numbers.
    pub explanation: String,
    /// What to do about it ("" when nothing).
    pub recommendation: String,
    /// Statements that apply the recommendation, in order.
    pub sql: Vec<String>,
    /// Structured details (e.g. the culprit transaction), for `--json` consumers.
    #[serde(skip_serializing_if = "Value::is_null")]
    pub details: Value,
}

impl Finding {
    pub(crate) fn new(
        area: &'static str,
        id: &'static str,
        severity: Severity,
        title: String,
    ) -> Self {
        Finding {
            area,
            id,
            severity,
            title,
            explanation: String::new(),
            recommendation: String::new(),
            sql: Vec::new(),
            details: Value::Null,
        }
    }
    pub(crate) fn why(mut self, s: impl Into<String>) -> Self {
        self.explanation = s.into();
        self
    }
    pub(crate) fn todo(mut self, s: impl Into<String>) -> Self {
        self.recommendation = s.into();
        self
    }
    pub(crate) fn sql(mut self, s: impl Into<String>) -> Self {
        self.sql.push(s.into());
        self
    }
}
