//! A server whose calls fail as scripted, around any other: for the tests of the loops
//! that must survive a lost connection (sampling, waiting for a server).

use std::collections::VecDeque;

use super::{Capabilities, Knob, KnobValues, PendingSet, Sample, Server, ServerError};

/// Passes calls through to `inner`, except that the next `probe` or `sample` takes the
/// front of its script: `None` passes through, `Some(true)` fails as a lost connection,
/// `Some(false)` fails as a query error (the connection is fine).
pub(crate) struct Scripted<S> {
    pub inner: S,
    pub probes: VecDeque<Option<bool>>,
    pub samples: VecDeque<Option<bool>>,
    /// Probes made so far.
    pub probe_count: u32,
}

impl<S: Server> Scripted<S> {
    pub fn new(inner: S) -> Self {
        Scripted {
            inner,
            probes: VecDeque::new(),
            samples: VecDeque::new(),
            probe_count: 0,
        }
    }
}

fn failure(lost: bool) -> ServerError {
    if lost {
        ServerError::Lost {
            what: "a scripted call",
            message: "gone".into(),
        }
    } else {
        ServerError::Query {
            what: "a scripted call",
            message: "refused".into(),
        }
    }
}

impl<S: Server> Server for Scripted<S> {
    async fn probe(&mut self) -> Result<Capabilities, ServerError> {
        self.probe_count += 1;
        match self.probes.pop_front().flatten() {
            Some(lost) => Err(failure(lost)),
            None => self.inner.probe().await,
        }
    }

    async fn sample(&mut self) -> Result<Sample, ServerError> {
        match self.samples.pop_front().flatten() {
            Some(lost) => Err(failure(lost)),
            None => self.inner.sample().await,
        }
    }

    async fn read_knobs(&mut self) -> Result<KnobValues, ServerError> {
        self.inner.read_knobs().await
    }

    async fn set_knob(&mut self, knob: Knob, value: u64) -> Result<u64, ServerError> {
        self.inner.set_knob(knob, value).await
    }

    async fn start_set(&mut self, knob: Knob, value: u64) -> Result<PendingSet, ServerError> {
        self.inner.start_set(knob, value).await
    }
}
