//! [`SimServer`]: the model behind the [`Server`] trait, the one seam the controller
//! talks through, so the real controller drives virtual time one sample at a time.

use super::*;

/// The [`Server`] handle of a model. Cloning shares the model, so the runner keeps a
/// handle to read the model's own record while the controller owns another.
#[derive(Debug, Clone)]
pub struct SimServer(Arc<Mutex<Model>>);

impl SimServer {
    pub fn new(model: Model) -> Self {
        SimServer(Arc::new(Mutex::new(model)))
    }

    /// A server of `flavor` running `scenario` (realized for `seed`) from the knob
    /// values that flavor starts with: what the one-shot commands are tested against.
    pub fn for_scenario(scenario: &Scenario, flavor: SimFlavor, seed: u64) -> Self {
        let sc = scenario.realize(seed);
        let startup = sc.startup_knobs(flavor);
        SimServer::new(Model::new(&sc, flavor, startup, seed))
    }

    /// Advances `secs` seconds of virtual time without sampling (a scenario's start
    /// the commands are not meant to see).
    pub fn advance(&self, secs: u64) {
        let mut m = self.model();
        for _ in 0..secs {
            m.advance_second();
        }
    }

    /// The model, for the runner (never held across an await).
    pub fn model(&self) -> MutexGuard<'_, Model> {
        // A panic while holding the lock leaves a model mid-step: still readable.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Server for SimServer {
    async fn probe(&mut self) -> Result<Capabilities, ServerError> {
        Ok(self.model().caps.clone())
    }

    /// Advances one sample interval of virtual time, then samples.
    async fn sample(&mut self) -> Result<Sample, ServerError> {
        let mut m = self.model();
        m.advance_second();
        Ok(m.sample())
    }

    async fn read_knobs(&mut self) -> Result<KnobValues, ServerError> {
        Ok(self.model().knobs.clone())
    }

    async fn set_knob(&mut self, knob: Knob, value: u64) -> Result<u64, ServerError> {
        self.model().set_knob(knob, value)
    }

    /// A MariaDB redo resize runs as on the server ([`Model::start_resize`]): it ends
    /// once a checkpoint passes its LSN, which the loop's samples bring; everything
    /// else (MySQL's capacity, which resizes in the background, included) answers at
    /// once.
    async fn start_set(&mut self, knob: Knob, value: u64) -> Result<PendingSet, ServerError> {
        let session = {
            let mut m = self.model();
            if knob != Knob::LogFileSize || m.flavor != SimFlavor::MariaDb1011 {
                return Ok(PendingSet::done(m.set_knob(knob, value)));
            }
            match m.start_resize(value)? {
                ResizeStart::Done(v) => return Ok(PendingSet::done(Ok(v))),
                ResizeStart::Started(session) => session,
            }
        };
        let server = self.clone();
        Ok(PendingSet {
            session_id: Some(session),
            set: Box::pin(std::future::poll_fn(move |cx| {
                match server.model().resize_outcome(session, cx.waker()) {
                    None => Poll::Pending,
                    Some(Ok(v)) => Poll::Ready(Ok(v)),
                    Some(Err(message)) => Poll::Ready(Err(ServerError::Query {
                        what: "resizing the redo log",
                        message,
                    })),
                }
            })),
        })
    }

    async fn resizes_under_way(&mut self) -> Result<Vec<(u64, Option<u64>)>, ServerError> {
        let m = self.model();
        Ok(m.resize
            .iter()
            .map(|r| (r.session, Some(m.t_ms.saturating_sub(r.started_ms) / 1000)))
            .collect())
    }

    async fn read_globals(
        &mut self,
        which: Globals,
        names: &[&'static str],
    ) -> Result<BTreeMap<String, String>, ServerError> {
        let m = self.model();
        let all = match which {
            Globals::Variables => m.variables(),
            Globals::Status => m.status(),
        };
        Ok(names
            .iter()
            .filter_map(|n| {
                let key = n.to_ascii_lowercase();
                all.get(&key).map(|v| (key, v.clone()))
            })
            .collect())
    }

    async fn session(
        &mut self,
        thread_id: u64,
        max_chars: u32,
    ) -> Result<Option<SessionInfo>, ServerError> {
        Ok(self.model().session(thread_id, max_chars))
    }

    async fn engine_innodb_status(&mut self) -> Result<String, ServerError> {
        Ok(self.model().engine_innodb_status())
    }

    /// MariaDB only, as on the servers. The model's time moves only when it is sampled,
    /// so the wait sees history change as the caller's progress samples advance it;
    /// it looks every 100 ms of (tokio) time and gives up after `limit`.
    async fn wait_for_history_at_most(
        &mut self,
        target: u32,
        limit: Duration,
    ) -> Result<HistoryWait, ServerError> {
        let session_id = {
            let mut m = self.model();
            if m.flavor != SimFlavor::MariaDb1011 {
                return Err(ServerError::Unsupported {
                    what: "waiting for purge (innodb_max_purge_lag_wait)",
                    server: "the simulated MySQL",
                });
            }
            let id = m.next_session;
            m.next_session += 1;
            m.wait_sessions.insert(id);
            id
        };
        let server = self.clone();
        let done = Box::pin(async move {
            let what = "waiting for purge (SET GLOBAL innodb_max_purge_lag_wait)";
            let deadline = tokio::time::Instant::now() + limit;
            loop {
                {
                    let mut m = server.model();
                    if !m.wait_sessions.contains(&session_id) {
                        return Err(ServerError::Query {
                            what,
                            message: "Query execution was interrupted".into(),
                        });
                    }
                    if m.history_len().max(0.0) as u64 <= u64::from(target) {
                        m.wait_sessions.remove(&session_id);
                        return Ok(());
                    }
                }
                if tokio::time::Instant::now() >= deadline {
                    server.model().wait_sessions.remove(&session_id);
                    return Err(ServerError::Timeout { what, after: limit });
                }
                tokio::time::sleep(WAIT_CHECK).await;
            }
        });
        Ok(HistoryWait { session_id, done })
    }

    /// Stops a purge wait; any other id is unknown here, as a finished session is on a
    /// server.
    async fn kill_query(&mut self, session_id: u64) -> Result<(), ServerError> {
        let mut m = self.model();
        if m.wait_sessions.remove(&session_id) || m.abort_resize(session_id) {
            Ok(())
        } else {
            Err(ServerError::Query {
                what: "stopping the purge wait (KILL QUERY)",
                message: format!("Unknown thread id: {session_id}"),
            })
        }
    }
}
