//! Which server this is (MariaDB or MySQL, which version) and what it lets innopilot
//! read and change: the capability table. Everything here is a pure function of rows
//! the server returned, so MySQL versions that cannot be run here are covered by unit
//! tests on fixture rows.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use super::{Knob, ServerError};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Flavor {
    MariaDb,
    MySql,
}

impl fmt::Display for Flavor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Flavor::MariaDb => "MariaDB",
            Flavor::MySql => "MySQL",
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Version {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl Version {
    pub const fn new(major: u32, minor: u32, patch: u32) -> Self {
        Version {
            major,
            minor,
            patch,
        }
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// The server's own word on what it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerIdentity {
    pub flavor: Flavor,
    pub version: Version,
    /// `@@version` as the server reported it (e.g. `10.11.19-MariaDB-0+deb12u1`).
    pub version_string: String,
}

impl ServerIdentity {
    /// Parses `@@version` and `@@version_comment`. MariaDB says so in the version
    /// string; everything else speaking this protocol with InnoDB (Oracle MySQL,
    /// Percona Server) is treated as MySQL.
    pub fn parse(version: &str, version_comment: &str) -> Result<Self, ServerError> {
        // MariaDB < 11 may present "5.5.5-10.x.y-MariaDB" to old clients.
        let v = version.strip_prefix("5.5.5-").unwrap_or(version);
        let lowered = format!("{v} {version_comment}").to_ascii_lowercase();
        let flavor = if lowered.contains("mariadb") {
            Flavor::MariaDb
        } else {
            Flavor::MySql
        };
        let numeric: String = v
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .collect();
        let mut parts = numeric.split('.').filter(|p| !p.is_empty());
        let mut next = || parts.next().and_then(|p| p.parse::<u32>().ok());
        let (major, minor) = match (next(), next()) {
            (Some(a), Some(b)) => (a, b),
            _ => {
                return Err(ServerError::Unexpected {
                    what: "SELECT @@version",
                    detail: format!("version string {version:?} has no major.minor number"),
                })
            }
        };
        let patch = next().unwrap_or(0);
        Ok(ServerIdentity {
            flavor,
            version: Version::new(major, minor, patch),
            version_string: version.to_string(),
        })
    }

    /// Whether this version is one whose behaviour innopilot knows. On others it still
    /// observes, but treats knobs as dynamic only when the server itself says so.
    pub fn is_known_version(&self) -> bool {
        let v = self.version;
        match self.flavor {
            Flavor::MariaDb => v >= Version::new(10, 3, 0) && v < Version::new(12, 0, 0),
            Flavor::MySql => v >= Version::new(5, 7, 0) && v < Version::new(10, 0, 0),
        }
    }
}

/// Whether `SET GLOBAL` can change a knob on this server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dynamic {
    Yes,
    No,
    /// Neither the server nor innopilot's table can vouch for it (unknown version):
    /// live mode will not touch it.
    Unverified,
}

/// One row of what the server says about a variable: from MariaDB's
/// information_schema.SYSTEM_VARIABLES (read-only flag and numeric range) or MySQL's
/// SHOW GLOBAL VARIABLES + performance_schema.variables_info (range only).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VariableMeta {
    pub name: String,
    pub value: Option<String>,
    /// `Some` only where the server reports it (MariaDB).
    pub read_only: Option<bool>,
    pub min: Option<u64>,
    pub max: Option<u64>,
}

/// What innopilot may do with one knob on this server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KnobCap {
    pub exists: bool,
    pub dynamic: Dynamic,
    /// The server's own lower limit, when known.
    pub server_min: Option<u64>,
    /// The server's own upper limit, when known.
    pub server_max: Option<u64>,
    /// Why the knob is or is not dynamic here, for `status` and the audit log.
    pub note: String,
}

impl KnobCap {
    pub fn settable(&self) -> bool {
        self.exists && self.dynamic == Dynamic::Yes
    }
}

/// Where the redo fill comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RedoSource {
    /// MariaDB: status Innodb_checkpoint_age / Innodb_checkpoint_max_age.
    CheckpointAgeStatus,
    /// MySQL 8.0.30+: status Innodb_redo_log_current_lsn − Innodb_redo_log_checkpoint_lsn
    /// over innodb_redo_log_capacity.
    RedoLsnStatus,
    /// MySQL before 8.0.30: INNODB_METRICS log_lsn_current − log_lsn_last_checkpoint
    /// over innodb_log_file_size × innodb_log_files_in_group.
    InnodbMetrics,
}

/// Where history length comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HistorySource {
    /// MariaDB: status Innodb_history_list_length.
    StatusVar,
    /// MySQL: INNODB_METRICS trx_rseg_history_len (enabled by default).
    InnodbMetrics,
}

/// Where undo tablespace sizes come from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UndoSource {
    /// MySQL 8.0+: information_schema.INNODB_TABLESPACES (SPACE_TYPE='Undo').
    InfoSchema,
    /// MariaDB: the undo files' sizes on a local disk (undo001…, or ibdata1).
    LocalFiles { paths: Vec<std::path::PathBuf> },
    /// Not visible from here (remote server, datadir not mounted).
    Unknown,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReplicaSource {
    /// Not a replica (SHOW REPLICA STATUS returned no row at probe time).
    NotReplica,
    /// `SHOW REPLICA STATUS` (MariaDB ≥ 10.5.1, MySQL ≥ 8.0.22).
    ShowReplicaStatus,
    /// `SHOW SLAVE STATUS` (older servers).
    ShowSlaveStatus,
    /// Replica status could not be read (a missing privilege, see [`observe_grants`]):
    /// whether this is a replica is unknown, which is not the same as "not a replica".
    Unreadable,
}

/// For each signal, where to read it on this server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignalSources {
    pub redo: RedoSource,
    pub history: HistorySource,
    pub undo: UndoSource,
    pub replica: ReplicaSource,
}

/// Everything innopilot learned about a server at probe time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capabilities {
    pub identity: ServerIdentity,
    pub knobs: BTreeMap<Knob, KnobCap>,
    pub signals: SignalSources,
    /// Whether the connected account may `SET GLOBAL` (SUPER or SYSTEM_VARIABLES_ADMIN).
    pub can_set_global: bool,
    /// The account as the server sees it (`CURRENT_USER()`), for messages.
    pub account: String,
}

impl Capabilities {
    pub fn knob(&self, knob: Knob) -> Option<&KnobCap> {
        self.knobs.get(&knob)
    }

    pub fn settable(&self, knob: Knob) -> bool {
        self.knobs.get(&knob).is_some_and(KnobCap::settable)
    }

    /// The knob that sizes the redo log on this flavor.
    pub fn redo_size_knob(&self) -> Knob {
        match self.identity.flavor {
            Flavor::MariaDb => Knob::LogFileSize,
            Flavor::MySql => Knob::RedoLogCapacity,
        }
    }
}

/// innopilot's own table of which knobs are dynamic, by flavor and version, from the
/// manuals and sources (shared REFERENCE.md). Used where the server does not report a
/// read-only flag (MySQL) and as a cross-check elsewhere.
pub fn table_dynamic(id: &ServerIdentity, knob: Knob) -> (Dynamic, &'static str) {
    if !id.is_known_version() {
        return (
            Dynamic::Unverified,
            "server version outside the range innopilot knows",
        );
    }
    let v = id.version;
    match (id.flavor, knob) {
        (Flavor::MariaDb, Knob::PurgeThreads) if v >= Version::new(10, 7, 1) => {
            (Dynamic::Yes, "dynamic on MariaDB since 10.7.1")
        }
        (Flavor::MariaDb, Knob::PurgeThreads) => (Dynamic::No, "read-only before MariaDB 10.7.1"),
        (Flavor::MariaDb, Knob::LogFileSize) if v >= Version::new(10, 9, 0) => {
            (Dynamic::Yes, "resizable online on MariaDB since 10.9")
        }
        (Flavor::MariaDb, Knob::LogFileSize) => (Dynamic::No, "read-only before MariaDB 10.9"),
        (Flavor::MariaDb, Knob::RedoLogCapacity) => (Dynamic::No, "MySQL-only variable"),
        (Flavor::MySql, Knob::PurgeThreads) => (Dynamic::No, "read-only on MySQL"),
        (Flavor::MySql, Knob::LogFileSize) => (
            Dynamic::No,
            "read-only on MySQL (8.0.30+ resizes with innodb_redo_log_capacity)",
        ),
        (Flavor::MySql, Knob::RedoLogCapacity) if v >= Version::new(8, 0, 30) => {
            (Dynamic::Yes, "resizable online on MySQL since 8.0.30")
        }
        (Flavor::MySql, Knob::RedoLogCapacity) => (Dynamic::No, "exists from MySQL 8.0.30"),
        (_, _) => (Dynamic::Yes, "dynamic"),
    }
}

/// Builds the knob capability table from what the server said about each variable.
/// A knob is dynamic when the server says it is writable (MariaDB's READ_ONLY column)
/// or, where the server does not say, when innopilot's own table says so for this
/// version.
pub fn build_knob_caps(id: &ServerIdentity, rows: &[VariableMeta]) -> BTreeMap<Knob, KnobCap> {
    let mut caps = BTreeMap::new();
    for knob in Knob::ALL {
        let row = rows
            .iter()
            .find(|r| r.name.eq_ignore_ascii_case(knob.var_name()));
        let cap = match row {
            None => KnobCap {
                exists: false,
                dynamic: Dynamic::No,
                server_min: None,
                server_max: None,
                note: format!("{} does not exist on this server", knob.var_name()),
            },
            Some(row) => {
                let (table, why) = table_dynamic(id, knob);
                let (dynamic, note) = match row.read_only {
                    Some(true) => (Dynamic::No, "the server reports it read-only".to_string()),
                    Some(false) => (Dynamic::Yes, "the server reports it writable".to_string()),
                    None => (table, why.to_string()),
                };
                KnobCap {
                    exists: true,
                    dynamic,
                    server_min: row.min.or_else(|| default_server_range(knob).0),
                    server_max: row.max.or_else(|| default_server_range(knob).1),
                    note,
                }
            }
        };
        caps.insert(knob, cap);
    }
    caps
}

/// Documented ranges, used when the server does not report its own.
fn default_server_range(knob: Knob) -> (Option<u64>, Option<u64>) {
    match knob {
        Knob::PurgeThreads => (Some(1), Some(32)),
        Knob::PurgeBatchSize => (Some(1), Some(5000)),
        Knob::MaxPurgeLag => (Some(0), Some(u32::MAX as u64)),
        Knob::MaxPurgeLagDelay => (Some(0), Some(10_000_000)),
        Knob::IoCapacity | Knob::IoCapacityMax => (Some(100), Some(u32::MAX as u64)),
        Knob::LogFileSize => (Some(4 << 20), None),
        Knob::RedoLogCapacity => (Some(8 << 20), Some(128 << 30)),
        Knob::UndoLogTruncate => (Some(0), Some(1)),
        Knob::MaxUndoLogSize => (Some(10 << 20), None),
        Knob::MaxDirtyPagesPctLwm => (Some(0), Some(99)),
        Knob::FlushNeighbors => (Some(0), Some(2)),
        Knob::LruScanDepth => (Some(100), None),
    }
}

/// Chooses where each signal is read on this server.
pub fn signal_sources(
    id: &ServerIdentity,
    undo: UndoSource,
    replica: ReplicaSource,
) -> SignalSources {
    let (redo, history) = match id.flavor {
        Flavor::MariaDb => (RedoSource::CheckpointAgeStatus, HistorySource::StatusVar),
        Flavor::MySql if id.version >= Version::new(8, 0, 30) => {
            (RedoSource::RedoLsnStatus, HistorySource::InnodbMetrics)
        }
        Flavor::MySql => (RedoSource::InnodbMetrics, HistorySource::InnodbMetrics),
    };
    SignalSources {
        redo,
        history,
        undo,
        replica,
    }
}

/// Which statement shows replication status on this server.
/// The privilege `SHOW REPLICA STATUS` needs: `SLAVE MONITOR` on MariaDB ≥ 10.5.9
/// (where `REPLICATION CLIENT` no longer covers it), `REPLICATION CLIENT` elsewhere.
pub fn replica_status_privilege(id: &ServerIdentity) -> &'static str {
    match id.flavor {
        Flavor::MariaDb if id.version >= Version::new(10, 5, 9) => "SLAVE MONITOR",
        _ => "REPLICATION CLIENT",
    }
}

/// Everything observing needs on this flavor and version (status, watch, run
/// --dry-run): `PROCESS` for InnoDB's tables and the process list, and the replica
/// status privilege.
pub fn observe_grants(id: &ServerIdentity) -> String {
    format!("PROCESS, {}", replica_status_privilege(id))
}

pub fn replica_statement(id: &ServerIdentity) -> &'static str {
    let modern = match id.flavor {
        Flavor::MariaDb => id.version >= Version::new(10, 5, 1),
        Flavor::MySql => id.version >= Version::new(8, 0, 22),
    };
    if modern {
        "SHOW REPLICA STATUS"
    } else {
        "SHOW SLAVE STATUS"
    }
}

/// Capabilities as a probe would build them, for tests: every knob present (but
/// innodb_redo_log_capacity on MariaDB), `read_only` per variable as MariaDB's
/// SYSTEM_VARIABLES would say it (`None`: MySQL, where innopilot's table decides).
#[cfg(test)]
pub(crate) fn fixture_caps(
    version: &str,
    read_only: impl Fn(&str) -> Option<bool>,
    replica: ReplicaSource,
) -> Capabilities {
    let id = ServerIdentity::parse(version, "").unwrap();
    let maria = id.flavor == Flavor::MariaDb;
    let rows: Vec<VariableMeta> = Knob::ALL
        .iter()
        .map(|k| k.var_name())
        .filter(|n| !(maria && *n == "innodb_redo_log_capacity"))
        .map(|n| VariableMeta {
            name: n.into(),
            value: Some("1".into()),
            read_only: read_only(n),
            min: None,
            max: None,
        })
        .collect();
    Capabilities {
        knobs: build_knob_caps(&id, &rows),
        signals: signal_sources(&id, UndoSource::Unknown, replica),
        identity: id,
        can_set_global: true,
        account: "innopilot@localhost".into(),
    }
}

/// [`fixture_caps`] with MariaDB reporting every knob writable.
#[cfg(test)]
pub(crate) fn fixture_caps_writable(version: &str, replica: ReplicaSource) -> Capabilities {
    let maria = version.to_ascii_lowercase().contains("mariadb");
    fixture_caps(version, |_| maria.then_some(false), replica)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replica_status_privilege_per_flavor_and_version() {
        let id = |v: &str| ServerIdentity::parse(v, "").unwrap();
        for (version, privilege) in [
            ("10.5.8-MariaDB", "REPLICATION CLIENT"),
            ("10.5.9-MariaDB", "SLAVE MONITOR"),
            ("10.11.19-MariaDB-0+deb12u1", "SLAVE MONITOR"),
            ("11.4.2-MariaDB", "SLAVE MONITOR"),
            ("8.0.36", "REPLICATION CLIENT"),
            ("5.7.44-log", "REPLICATION CLIENT"),
        ] {
            assert_eq!(
                replica_status_privilege(&id(version)),
                privilege,
                "{version}"
            );
            assert_eq!(
                observe_grants(&id(version)),
                format!("PROCESS, {privilege}"),
                "{version}"
            );
        }
    }

    fn id(v: &str, c: &str) -> ServerIdentity {
        ServerIdentity::parse(v, c).unwrap()
    }

    fn meta(name: &str, read_only: Option<bool>) -> VariableMeta {
        VariableMeta {
            name: name.into(),
            value: Some("1".into()),
            read_only,
            min: None,
            max: None,
        }
    }

    /// What SHOW GLOBAL VARIABLES returns for the knobs on MySQL 8.0.30+ / 8.4.
    fn mysql8_rows() -> Vec<VariableMeta> {
        [
            "innodb_purge_threads",
            "innodb_purge_batch_size",
            "innodb_max_purge_lag",
            "innodb_max_purge_lag_delay",
            "innodb_io_capacity",
            "innodb_io_capacity_max",
            "innodb_log_file_size",
            "innodb_redo_log_capacity",
            "innodb_undo_log_truncate",
            "innodb_max_undo_log_size",
            "innodb_max_dirty_pages_pct_lwm",
            "innodb_flush_neighbors",
            "innodb_lru_scan_depth",
        ]
        .iter()
        .map(|n| meta(n, None))
        .collect()
    }

    #[test]
    fn parses_flavors_and_versions() {
        let m = id("10.11.19-MariaDB-0+deb12u1", "Debian 12");
        assert_eq!(m.flavor, Flavor::MariaDb);
        assert_eq!(m.version, Version::new(10, 11, 19));
        let m = id("5.5.5-10.6.16-MariaDB-log", "");
        assert_eq!(
            (m.flavor, m.version),
            (Flavor::MariaDb, Version::new(10, 6, 16))
        );
        let o = id("8.4.3", "MySQL Community Server - GPL");
        assert_eq!(
            (o.flavor, o.version),
            (Flavor::MySql, Version::new(8, 4, 3))
        );
        let p = id("8.0.36-28", "Percona Server (GPL), Release 28");
        assert_eq!(
            (p.flavor, p.version),
            (Flavor::MySql, Version::new(8, 0, 36))
        );
        assert!(ServerIdentity::parse("garbage", "").is_err());
        assert!(ServerIdentity::parse("", "").is_err());
    }

    #[test]
    fn mariadb_trusts_the_servers_read_only_flag() {
        let m = id("10.11.19-MariaDB", "");
        let rows = vec![
            meta("INNODB_PURGE_THREADS", Some(false)),
            meta("INNODB_LOG_FILE_SIZE", Some(false)),
            meta("INNODB_IO_CAPACITY", Some(false)),
        ];
        let caps = build_knob_caps(&m, &rows);
        assert!(caps[&Knob::PurgeThreads].settable());
        assert!(caps[&Knob::LogFileSize].settable());
        assert!(!caps[&Knob::RedoLogCapacity].exists);
        let old = id("10.6.5-MariaDB", "");
        let caps = build_knob_caps(&old, &[meta("innodb_purge_threads", Some(true))]);
        assert_eq!(caps[&Knob::PurgeThreads].dynamic, Dynamic::No);
    }

    #[test]
    fn mysql_8030_and_84_from_fixture_rows() {
        for v in ["8.0.30", "8.0.40", "8.4.3"] {
            let o = id(v, "MySQL Community Server - GPL");
            let caps = build_knob_caps(&o, &mysql8_rows());
            assert_eq!(caps[&Knob::PurgeThreads].dynamic, Dynamic::No, "{v}");
            assert!(caps[&Knob::RedoLogCapacity].settable(), "{v}");
            assert!(!caps[&Knob::LogFileSize].settable(), "{v}");
            assert!(caps[&Knob::IoCapacityMax].settable(), "{v}");
            assert!(caps[&Knob::MaxPurgeLagDelay].settable(), "{v}");
            let s = signal_sources(&o, UndoSource::InfoSchema, ReplicaSource::NotReplica);
            assert_eq!(s.redo, RedoSource::RedoLsnStatus);
            assert_eq!(s.history, HistorySource::InnodbMetrics);
            assert_eq!(replica_statement(&o), "SHOW REPLICA STATUS");
        }
    }

    #[test]
    fn older_mysql_reads_redo_from_innodb_metrics() {
        let o = id("8.0.28", "MySQL Community Server - GPL");
        let rows: Vec<_> = mysql8_rows()
            .into_iter()
            .filter(|r| r.name != "innodb_redo_log_capacity")
            .collect();
        let caps = build_knob_caps(&o, &rows);
        assert!(!caps[&Knob::RedoLogCapacity].exists);
        let s = signal_sources(&o, UndoSource::InfoSchema, ReplicaSource::NotReplica);
        assert_eq!(s.redo, RedoSource::InnodbMetrics);
        let o57 = id("5.7.44-log", "MySQL Community Server (GPL)");
        assert_eq!(replica_statement(&o57), "SHOW SLAVE STATUS");
        assert_eq!(
            signal_sources(&o57, UndoSource::Unknown, ReplicaSource::NotReplica).redo,
            RedoSource::InnodbMetrics
        );
    }

    #[test]
    fn unknown_versions_are_unverified_unless_the_server_vouches() {
        let future = id("13.0.1", "MySQL Community Server - GPL");
        let caps = build_knob_caps(&future, &mysql8_rows());
        assert!(caps.values().all(|c| c.dynamic == Dynamic::Unverified));
        let future_maria = id("12.3.1-MariaDB", "");
        let caps = build_knob_caps(&future_maria, &[meta("innodb_io_capacity", Some(false))]);
        assert!(caps[&Knob::IoCapacity].settable());
    }

    #[test]
    fn mariadb_before_10_7_has_read_only_purge_threads_by_table() {
        let m = id("10.6.16-MariaDB", "");
        assert_eq!(table_dynamic(&m, Knob::PurgeThreads).0, Dynamic::No);
        let m = id("10.11.6-MariaDB", "");
        assert_eq!(table_dynamic(&m, Knob::PurgeThreads).0, Dynamic::Yes);
        assert_eq!(table_dynamic(&m, Knob::LogFileSize).0, Dynamic::Yes);
        assert_eq!(
            table_dynamic(&id("10.8.8-MariaDB", ""), Knob::LogFileSize).0,
            Dynamic::No
        );
    }
}
