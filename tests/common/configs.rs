//! The TOML configs the live tests run innopilot with, in one place: a builder for the
//! sections they share (a fast sampler, `[control]`, the narrow watermark on purge
//! threads) with the few values that vary as parameters.

/// A config for `innopilot run`: a 500 ms sampler over a 5 s window, a `[control]`
/// section (which [`super::run::Run::with_config`] needs) and whatever else a test adds.
#[derive(Clone, Debug)]
pub struct TestConfig {
    server: Vec<String>,
    control: Vec<String>,
    sections: Vec<String>,
}

impl TestConfig {
    /// A fast sampler, so a test sees several ticks within seconds.
    pub fn new() -> Self {
        Self {
            server: Vec::new(),
            control: Vec::new(),
            sections: Vec::new(),
        }
    }

    /// A line of `[server]`, e.g. `query_timeout = "1s"`.
    pub fn server(mut self, line: impl Into<String>) -> Self {
        self.server.push(line.into());
        self
    }

    /// Lines of `[control]`, e.g. `reconnect_budget = "2s"` (empty adds nothing).
    pub fn control(mut self, lines: impl Into<String>) -> Self {
        let lines = lines.into();
        if !lines.is_empty() {
            self.control.push(lines);
        }
        self
    }

    pub fn restore_timeout(self, timeout: &str) -> Self {
        self.control(format!("restore_timeout = \"{timeout}\""))
    }

    pub fn max_sets_per_minute(self, n: u32) -> Self {
        self.control(format!("max_sets_per_minute = {n}"))
    }

    /// Another section, header and body, e.g. `"[http]\nstale_after = \"2s\""`.
    pub fn section(mut self, toml: impl Into<String>) -> Self {
        self.sections.push(toml.into());
        self
    }

    /// Narrow watermarks on purge threads (1 to 4, one step at a time, `min_dwell`
    /// apart), so redo fill under a small update load crosses buckets within seconds on
    /// the harness's 32 MiB redo log.
    pub fn narrow_watermark(self, min_dwell: &str) -> Self {
        self.section(format!(
            "[knobs.innodb_purge_threads]
min = 1
max = 4
max_step = 1
min_dwell = \"{min_dwell}\""
        ))
        .section(
            "[policy.watermark]
low_pct = 1.0
high_pct = 12.0
max_purge_threads = 4
hysteresis_pct = 0.5
engage_fill_pct = 0.0",
        )
    }

    pub fn build(&self) -> String {
        let mut out = String::new();
        if !self.server.is_empty() {
            out += &format!("[server]\n{}\n\n", self.server.join("\n"));
        }
        out += "[sampler]\ninterval = \"500ms\"\nwindow = \"5s\"\n\n[control]\n";
        for line in &self.control {
            out += line;
            out += "\n";
        }
        for s in &self.sections {
            out += "\n";
            out += s;
            out += "\n";
        }
        out
    }
}

impl Default for TestConfig {
    fn default() -> Self {
        Self::new()
    }
}

/// The watermark config most live tests run: purge threads move within seconds under a
/// small update load, restored within 10 s on exit.
pub fn watermark() -> TestConfig {
    TestConfig::new()
        .restore_timeout("10s")
        .max_sets_per_minute(120)
        .narrow_watermark("1s")
}
