//! What the model's server says: the rows of `SHOW GLOBAL STATUS`, the variables and
//! (MySQL) INNODB_METRICS, parsed by the live sampler's own [`build_sample`]; the
//! oldest transaction and its session; `SHOW ENGINE INNODB STATUS`. Reads the model,
//! never steps it.

use super::*;

impl Model {
    /// What `SHOW GLOBAL STATUS`, the variables and (MySQL) INNODB_METRICS would say
    /// now, parsed by the same [`build_sample`] as a live server's rows.
    pub fn sample(&self) -> Sample {
        let mut rows = MetricRows::default();
        let mut st = |name: &str, v: f64| {
            rows.push(
                RowKind::Status,
                name,
                Some(format!("{}", v.max(0.0) as u64)),
            )
        };
        let t = self.t_ms as f64 / 1000.0;
        let uptime = (self.t_ms - self.up_since_ms) / 1000 + self.uptime_offset_s;
        st("Uptime", uptime as f64);
        st("Innodb_buffer_pool_pages_dirty", self.dirty);
        st(
            "Innodb_buffer_pool_pages_total",
            self.sc.hardware.buffer_pool_pages,
        );
        st("Innodb_buffer_pool_pages_flushed", self.pages_flushed);
        // Of those, the pages written to free buffer-pool pages for reads: all of them
        // while users read a working set larger than the pool ([`Workload::evicts`]).
        // MariaDB ≥ 10.5 only.
        if self.flavor == SimFlavor::MariaDb1011 {
            let w = &self.sc.workload;
            let lru = if w.evicts(&self.sc.hardware) {
                self.pages_flushed
            } else {
                0.0
            };
            st("Innodb_buffer_pool_pages_LRU_flushed", lru);
            st("Innodb_buffer_pool_pages_free", self.free_list_pages());
        }
        st("Innodb_buffer_pool_reads", self.pages_read);
        // The twin has no free-page waits: a read never finds the free list empty.
        st("Innodb_buffer_pool_wait_free", 0.0);
        st("Com_commit", self.commits);
        st("Threads_running", self.threads_running.ceil());
        let history = self.history_len();
        match self.flavor {
            SimFlavor::MariaDb1011 => {
                let (_, sync) = flush_points(self.flavor, self.capacity());
                st("Innodb_history_list_length", history);
                st("Innodb_checkpoint_age", self.ckpt_age);
                st("Innodb_checkpoint_max_age", sync as f64);
                st("Innodb_lsn_current", self.lsn);
                st("Handler_update", self.rows_updated);
                st("Handler_write", 0.0);
                st("Handler_delete", 0.0);
                st("Innodb_undo_truncations", self.truncations as f64);
                // Two ids per read-write transaction: its id and its commit number.
                st("Innodb_max_trx_id", 2.0 * self.commits);
            }
            SimFlavor::MySql80 => {
                st("Innodb_redo_log_current_lsn", self.lsn);
                st("Innodb_redo_log_checkpoint_lsn", self.lsn - self.ckpt_age);
                st("Innodb_rows_updated", self.rows_updated);
                st("Innodb_rows_inserted", 0.0);
                st("Innodb_rows_deleted", 0.0);
                rows.push(
                    RowKind::Metric,
                    "trx_rseg_history_len",
                    Some(format!("{}", history as u64)),
                );
                for (i, s) in self.spaces.iter().enumerate() {
                    rows.push(
                        RowKind::UndoSpace,
                        &format!("innodb_undo_{:03}", i + 1),
                        Some(format!("{}", s.size as u64)),
                    );
                }
            }
        }
        if self.sc.purge_counters {
            // Every record the twin purges is an update's (`oltp_update_*`).
            rows.push(
                RowKind::Metric,
                "purge_upd_exist_or_extern_records",
                Some(format!("{}", self.purged_total.max(0.0) as u64)),
            );
            rows.push(RowKind::Metric, "purge_del_mark_records", Some("0".into()));
        }
        for (k, v) in &self.knobs {
            rows.push(RowKind::Variable, k.var_name(), Some(v.to_string()));
        }
        let mut s = build_sample(&rows, &self.caps.signals);
        s.t_ms = self.t_ms;
        s.unix_ms = EPOCH_UNIX_MS + self.t_ms;
        if self.flavor == SimFlavor::MariaDb1011 || self.spaces.is_empty() {
            s.undo_bytes = Some(self.undo_bytes() as u64);
        }
        s.oldest_trx = self.oldest_trx(t);
        if self.sc.replica {
            s.is_replica = true;
            let lambda = self.sc.workload.peak_tps * self.sc.load_at(t);
            s.replica_lag_s = Some((self.backlog / lambda.max(1.0)) as u64);
        }
        s.round_trips = if self.sc.replica { 3 } else { 2 };
        s
    }

    fn oldest_trx(&self, t: f64) -> Option<TrxInfo> {
        let view = self
            .open_views(t)
            .min_by(|a, b| a.1.start_s.total_cmp(&b.1.start_s));
        let active = self.threads_running.ceil() as u64;
        match view {
            Some((id, v)) => Some(TrxInfo {
                trx_id: format!("{}", 421_000 + (id - VIEW_SESSION_BASE)),
                thread_id: Some(id),
                age_s: (t - v.start_s).max(0.0) as u64,
                user: Some("report".into()),
                host: Some("batch.sim".into()),
                state: Some("RUNNING".into()),
                isolation: Some("REPEATABLE READ".into()),
                command: Some("Query".into()),
                holds_read_view: true,
                active_count: Some(active + 1),
            }),
            None if active > 0 => Some(TrxInfo {
                trx_id: format!("{}", self.commits as u64),
                thread_id: Some(APP_SESSION),
                age_s: 0,
                user: Some("app".into()),
                host: Some("app.sim".into()),
                state: Some("RUNNING".into()),
                isolation: Some("REPEATABLE READ".into()),
                command: Some("Query".into()),
                holds_read_view: true,
                active_count: Some(active),
            }),
            None => None,
        }
    }

    /// The read views open at `t`, with their session ids.
    fn open_views(&self, t: f64) -> impl Iterator<Item = (u64, &crate::sim::scenario::ReadView)> {
        self.sc
            .views
            .iter()
            .enumerate()
            .filter(move |(_, v)| t >= v.start_s && t < v.end_s)
            .map(|(i, v)| (VIEW_SESSION_BASE + i as u64, v))
    }

    /// The process-list row of a session: a scenario's read view runs a long report,
    /// the application's connection an update; a purge wait runs its SET.
    pub fn session(&self, id: u64, max_chars: u32) -> Option<SessionInfo> {
        let t = self.t_ms as f64 / 1000.0;
        let cut = |q: &str| Some(q.chars().take(max_chars as usize).collect::<String>());
        if let Some((_, v)) = self.open_views(t).find(|(sid, _)| *sid == id) {
            return Some(SessionInfo {
                command: Some("Query".into()),
                time_s: Some((t - v.start_s).max(0.0) as u64),
                state: Some("Sending data".into()),
                info: cut(VIEW_STATEMENT),
                user: Some("report".into()),
                host: Some("batch.sim".into()),
            });
        }
        if id == APP_SESSION && self.threads_running > 0.0 {
            return Some(SessionInfo {
                command: Some("Query".into()),
                time_s: Some(0),
                state: Some("Updating".into()),
                info: cut(APP_STATEMENT),
                user: Some("app".into()),
                host: Some("app.sim".into()),
            });
        }
        if let Some(r) = self.resize.as_ref().filter(|r| r.session == id) {
            return Some(SessionInfo {
                command: Some("Query".into()),
                time_s: Some(self.t_ms.saturating_sub(r.started_ms) / 1000),
                state: Some("Starting".into()),
                info: cut(&format!(
                    "SET GLOBAL {} = {}",
                    self.flavor.redo_knob().var_name(),
                    r.to
                )),
                user: Some("innopilot".into()),
                host: Some("localhost".into()),
            });
        }
        self.wait_sessions.contains(&id).then(|| SessionInfo {
            command: Some("Query".into()),
            time_s: None,
            state: Some("Waiting for purge".into()),
            info: cut("SET GLOBAL innodb_max_purge_lag_wait"),
            user: Some("innopilot".into()),
            host: Some("localhost".into()),
        })
    }

    /// Global variables as `SHOW GLOBAL VARIABLES` would print them: the knobs in
    /// effect and the few settings the scenario implies.
    pub fn variables(&self) -> BTreeMap<String, String> {
        let mut v: BTreeMap<String, String> = self
            .knobs
            .iter()
            .map(|(k, x)| (k.var_name().to_string(), k.show_value(*x)))
            .collect();
        let fixed = [
            (
                "innodb_undo_tablespaces",
                self.sc.undo_tablespaces.to_string(),
            ),
            (
                "innodb_buffer_pool_size",
                ((self.sc.hardware.buffer_pool_pages as u64) * 16_384).to_string(),
            ),
            ("innodb_buffer_pool_dump_at_shutdown", "ON".into()),
            ("innodb_buffer_pool_load_at_startup", "ON".into()),
            ("innodb_buffer_pool_dump_pct", "25".into()),
            ("innodb_adaptive_flushing", "ON".into()),
            ("innodb_flush_log_at_trx_commit", "1".into()),
            ("innodb_fast_shutdown", "1".into()),
        ];
        for (name, value) in fixed {
            v.entry(name.to_string()).or_insert(value);
        }
        if self.sc.replica {
            // The scenarios' replicas apply with one thread.
            let name = match self.flavor {
                SimFlavor::MariaDb1011 => "slave_parallel_threads",
                SimFlavor::MySql80 => "replica_parallel_workers",
            };
            v.insert(name.into(), "0".into());
        }
        v
    }

    /// Global status beyond the sample: the buffer pool's dump and load state.
    pub fn status(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            (
                "innodb_buffer_pool_dump_status".to_string(),
                "Dumping of buffer pool not started".to_string(),
            ),
            (
                "innodb_buffer_pool_load_status".to_string(),
                "Buffer pool(s) load completed at 240101  0:00:00".to_string(),
            ),
        ])
    }

    /// The lines of `SHOW ENGINE INNODB STATUS` the model can vouch for.
    pub fn engine_innodb_status(&self) -> String {
        let t = self.t_ms as f64 / 1000.0;
        let views = self.open_views(t).count();
        // Each view's transaction block in the server's own format (MariaDB 10.11 /
        // MySQL), so diagnose confirms the holder here as on a live server. The
        // "sees <" limit grows with the view's start: the oldest view has the lowest.
        let thread = match self.flavor {
            SimFlavor::MariaDb1011 => "MariaDB",
            SimFlavor::MySql80 => "MySQL",
        };
        let mut list = String::from("LIST OF TRANSACTIONS FOR EACH SESSION:\n");
        for (id, v) in self.open_views(t) {
            let sees = (v.start_s * 1000.0).max(0.0) as u64 + 1;
            list.push_str(&format!(
                "---TRANSACTION {}, ACTIVE {} sec\n0 lock struct(s), heap size 1128, 0 row lock(s)\n{thread} thread id {id}, OS thread handle 0, query id 0 batch.sim report Sending data\n{VIEW_STATEMENT}\nTrx read view will not see trx with id >= {sees}, sees < {sees}\n",
                421_000 + (id - VIEW_SESSION_BASE),
                (t - v.start_s).max(0.0) as u64,
            ));
        }
        format!(
            "------------\nTRANSACTIONS\n------------\nTrx id counter {}\nPurge done for trx's n:o < {} undo n:o < 0 state: running\nHistory list length {}\n{views} read views open inside InnoDB\n{list}--------\nFILE I/O\n--------\n---\nLOG\n---\nLog sequence number {}\nLast checkpoint at {}\n",
            self.commits as u64,
            self.purged_total as u64,
            self.history_len().max(0.0) as u64,
            self.lsn as u64,
            (self.lsn - self.ckpt_age) as u64,
        )
    }
}
