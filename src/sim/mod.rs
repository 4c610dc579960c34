//! The simulator: a deterministic, seeded, discrete-time model of one InnoDB server
//! that implements the same [`Server`](crate::server::Server) trait as the live
//! connection, so the real control loop ([`crate::control::Controller`]) runs against
//! it unchanged and any policy can be judged on any scenario in seconds.
//!
//! - [`model`]: the InnoDB model (foreground, CPU, purge, redo and flushing, undo and
//!   truncation, DML delay per flavor; its step in `mod.rs`), what its server says
//!   (`surface`), what a `SET GLOBAL` does (`knobs`) and [`model::SimServer`], its
//!   `Server` handle (`server`).
//! - [`scenario`]: named, seeded scenarios (load curve, read views, device events,
//!   restarts), each tied to the seed article whose finding it reproduces.
//! - [`peers`]: what to compare: the servers' built-in behaviours as static settings,
//!   and controller-driven peers (innopilot itself, MariaDB 10.6.5 adaptive purge).
//! - [`compare`](mod@compare): runs one scenario with one peer ([`compare::run`]),
//!   summarises it, writes CSV/JSON/SVG, and runs the whole matrix
//!   ([`compare::compare`](fn@compare::compare)).
//! - [`plot`]: SVG plots of a run (plotters, SVG backend only; never used by the daemon).
//!
//! Everything here is a pure function of (scenario, peer, seed): no wall clock, no hash
//! map iteration, no threads whose timing matters. `docs/simulator.md` states every
//! equation and where each constant comes from.

pub mod compare;
pub mod model;
pub mod peers;
pub mod plot;
pub mod run;
pub mod scenario;

pub use compare::{
    compare, run, summary, write_outputs, write_outputs_compared, CompareTable, Summary,
};
pub use peers::Peer;
pub use run::SimRun;
pub use scenario::Scenario;

/// A problem running a simulation. Messages name the scenario or peer involved.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("unknown scenario `{0}`; one of: {names}", names = scenario::NAMES.join(", "))]
    UnknownScenario(String),
    #[error("unknown policy `{0}`; one of: {names}", names = peers::NAMES.join(", "))]
    UnknownPeer(String),
    #[error(
        "--read-iops {reads_per_s}: scenario `{scenario}` has no read cap to change (give a \
         positive number of reads a second, to a scenario that caps reads: {capped})"
    )]
    NoReadCap {
        scenario: String,
        reads_per_s: u32,
        capped: String,
    },
    #[error("the control loop stopped in scenario {scenario} with peer {peer}: {message}")]
    Control {
        scenario: String,
        peer: String,
        message: String,
    },
    #[error("{what} {}: {message}", path.display())]
    Io {
        what: &'static str,
        path: std::path::PathBuf,
        message: String,
    },
}

/// A tiny deterministic PRNG (splitmix64): the same seed gives the same stream on
/// every platform, and no crate is needed for it.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    /// An independent stream for one purpose (noise, view draws, …), so adding a draw in
    /// one place does not shift every other random number.
    pub fn derive(seed: u64, stream: &str) -> Self {
        let mut h = seed ^ 0x9E37_79B9_7F4A_7C15;
        for b in stream.bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01B3);
        }
        let mut r = Rng(h);
        r.next_u64();
        r
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in [lo, hi).
    pub fn range(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.uniform()
    }

    /// Standard normal (Box–Muller; one value per call, the twin is dropped for
    /// simplicity).
    pub fn normal(&mut self) -> f64 {
        let u1 = self.uniform().max(1e-12);
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rng_is_deterministic_and_streams_differ() {
        let a: Vec<u64> = (0..5).map(|_| Rng::new(7).next_u64()).collect();
        assert!(a.windows(2).all(|w| w[0] == w[1]));
        let mut x = Rng::derive(7, "noise");
        let mut y = Rng::derive(7, "views");
        assert_ne!(x.next_u64(), y.next_u64());
        let mut r = Rng::new(1);
        let n = 20_000;
        let mean = (0..n).map(|_| r.normal()).sum::<f64>() / n as f64;
        assert!(mean.abs() < 0.05, "{mean}");
        assert!((0..1000).all(|_| (0.0..1.0).contains(&r.uniform())));
    }
}
