//! Advice within bounds, and the findings about static settings, for `diagnose`:
//! pure functions from what `diagnose` gathered to numbers and findings, so every
//! bound and rule is unit-tested on fixtures. SQL is built from constant variable
//! names and typed integers only.

use super::finding::{Finding, Severity};
use crate::policy::server_model;
use crate::server::{Flavor, Knob, KnobValues};
use crate::signals::Signals;

const MIB: u64 = 1 << 20;

/// Shortest span of samples a redo size is advised from: a rate over a couple of
/// seconds is one burst (the same server gave 16 GiB and, two seconds later, 12 GiB).
pub const MIN_SUSTAINED_S: f64 = 10.0;

/// Redo is capped at this multiple of the buffer pool. The checkpoint can only move
/// past pages once they are flushed, and dirty pages live in the buffer pool: redo
/// covering more change than the pool can keep dirty does not spare flushing (the LRU
/// flushes those pages anyway when it needs free pages), it only lengthens recovery.
pub const BUFFER_POOL_MULTIPLE: u64 = 2;

/// Crash recovery is assumed to read and apply redo at this rate (bytes/s): a
/// conservative figure for one modest SSD; recovery of the checkpoint age must fit in
/// [`RECOVERY_LIMIT_S`].
pub const RECOVERY_BYTES_PER_S: u64 = 50 * MIB;

/// Longest crash recovery the advice accepts, seconds.
pub const RECOVERY_LIMIT_S: u64 = 300;

/// The aim: redo for about an hour of writes at the sustained rate.
pub const AIM_S: f64 = 3600.0;

/// What the samples of one `diagnose` run showed over their whole span.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Observed {
    /// Seconds between the first and the last sample.
    pub seconds: f64,
    pub samples: u32,
    /// Redo bytes per second from the first to the last sample.
    pub lsn_rate: Option<f64>,
    /// The highest pages-flushed-per-second of any sampling interval: what the device
    /// has been seen to do.
    pub peak_pages_flushed_rate: Option<f64>,
}

impl Observed {
    /// The run from its first and last signals (redo written between them over the
    /// time between them) and the peak interval flush rate seen on the way.
    pub fn from_run(first: &Signals, last: &Signals, peak_flushed: Option<f64>, n: u32) -> Self {
        let seconds = last.t_ms.saturating_sub(first.t_ms) as f64 / 1000.0;
        let lsn_rate = match (first.sample.redo.lsn, last.sample.redo.lsn) {
            (Some(a), Some(b)) if b >= a && seconds > 0.0 => Some((b - a) as f64 / seconds),
            _ => None,
        };
        Observed {
            seconds,
            samples: n,
            lsn_rate,
            peak_pages_flushed_rate: peak_flushed,
        }
    }
}

/// Free bytes on the redo volume, when it could be checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FreeDisk {
    Bytes(u64),
    /// Why it could not be checked.
    Unknown(String),
}

/// Where the redo files are: `innodb_log_group_home_dir`, relative to the datadir
/// when it is relative (the server default is `./`).
pub fn redo_dir(home: Option<&str>, datadir: Option<&str>) -> Option<String> {
    match (home.filter(|h| !h.is_empty()), datadir) {
        (Some(h), _) if h.starts_with('/') => Some(h.to_string()),
        (Some(h), Some(d)) => Some(std::path::Path::new(d).join(h).display().to_string()),
        (None, Some(d)) => Some(d.to_string()),
        (Some(_), None) | (None, None) => None,
    }
}

/// The free space of the file system holding `dir`, only when `dir/ib_logfile0`
/// exists here with the server's `innodb_log_file_size`: evidence that this is the
/// server's own redo volume, not a same-named path on another host.
pub fn redo_free_disk(dir: Option<&str>, log_file_size: Option<u64>) -> FreeDisk {
    let (Some(dir), Some(size)) = (dir, log_file_size) else {
        return FreeDisk::Unknown("the redo directory or size is not known".into());
    };
    let dir = std::path::Path::new(dir);
    let same = std::fs::metadata(dir.join("ib_logfile0")).is_ok_and(|m| m.len() == size);
    if !same {
        return FreeDisk::Unknown(format!(
            "{}/ib_logfile0 of {size} bytes is not visible from here (innopilot runs on another host or without access)",
            dir.display()
        ));
    }
    match rustix::fs::statvfs(dir) {
        Ok(s) => FreeDisk::Bytes(s.f_bavail.saturating_mul(s.f_frsize)),
        Err(e) => FreeDisk::Unknown(format!("statvfs({}): {e}", dir.display())),
    }
}

/// A redo size advice and the bounds that shaped it.
#[derive(Debug, Clone, PartialEq)]
pub struct RedoAdvice {
    /// The size to set, bytes (whole MiB); `None` when no growth is advised.
    pub bytes: Option<u64>,
    /// The bounds, in words with their numbers.
    pub text: String,
}

/// Redo size from the sustained rate, within bounds: at most
/// [`BUFFER_POOL_MULTIPLE`] × the buffer pool, half the free disk on the redo volume
/// (MariaDB's online resize writes a second file of the new size before dropping the
/// old one), and a checkpoint age recoverable in [`RECOVERY_LIMIT_S`] at
/// [`RECOVERY_BYTES_PER_S`]. `usable` is the flushable fraction of the file (sync
/// point / size).
pub fn redo_size(
    current: u64,
    usable: f64,
    obs: &Observed,
    buffer_pool: Option<u64>,
    free: &FreeDisk,
) -> RedoAdvice {
    let usable = usable.clamp(0.1, 1.0);
    let Some(rate) = obs
        .lsn_rate
        .filter(|r| r.is_finite() && *r > 0.0 && obs.seconds >= MIN_SUSTAINED_S)
    else {
        return RedoAdvice {
            bytes: None,
            text: format!(
                "No size is advised: the samples span {:.0} s, and a redo size needs a rate sustained over at least {MIN_SUSTAINED_S:.0} s (run diagnose with more --samples).",
                obs.seconds
            ),
        };
    };
    let want = ((rate * AIM_S / usable) as u64).div_ceil(MIB) * MIB;
    let mut caps = Vec::new();
    let mut bound = u64::MAX;
    if let Some(bp) = buffer_pool.filter(|b| *b > 0) {
        let c = bp.saturating_mul(BUFFER_POOL_MULTIPLE);
        bound = bound.min(c);
        caps.push(format!(
            "{BUFFER_POOL_MULTIPLE} × the buffer pool ({} MiB): redo beyond what the pool can keep dirty only lengthens recovery",
            c / MIB
        ));
    } else {
        caps.push("the buffer pool size is unknown: not checked against it".into());
    }
    match free {
        FreeDisk::Bytes(b) => {
            let c = b / 2;
            bound = bound.min(c);
            caps.push(format!(
                "half the {} MiB free on the redo volume ({} MiB): the resize writes a new file beside the old one",
                b / MIB,
                c / MIB
            ));
        }
        FreeDisk::Unknown(why) => caps.push(format!("free disk could not be checked: {why}")),
    }
    let rec = (RECOVERY_BYTES_PER_S.saturating_mul(RECOVERY_LIMIT_S) as f64 / usable) as u64;
    bound = bound.min(rec);
    caps.push(format!(
        "{} MiB for a recovery under {} minutes, assuming recovery applies {} MiB/s of redo",
        rec / MIB,
        RECOVERY_LIMIT_S / 60,
        RECOVERY_BYTES_PER_S / MIB
    ));
    let bound = bound / MIB * MIB;
    let size = want.min(bound);
    let basis = format!(
        "The rate is {:.1} MiB/s averaged over {:.0} s ({} samples); an hour of it is {} MiB of redo. Bounds: {}.",
        rate / MIB as f64,
        obs.seconds,
        obs.samples,
        want / MIB,
        caps.join("; ")
    );
    RedoAdvice {
        bytes: (size > current).then_some(size),
        text: if size > current {
            basis
        } else {
            format!(
                "{basis} The bounds leave no room above the current {} MiB.",
                current / MIB
            )
        },
    }
}

/// Flushing counts as above io_capacity_max only past this multiple of it: a rate at
/// or a little over a setting (101 pages/s at 100, measured) is the setting's own
/// pace, not the device's reach.
pub const DEVICE_MARGIN: f64 = 1.2;

/// innodb_io_capacity_max from what the device has shown: the peak pages flushed per
/// second, rounded up to 100, when that is more than [`DEVICE_MARGIN`] × the setting;
/// `None` otherwise (no guess). io_capacity_max is what the page cleaner flushes from
/// in the adaptive range (its redo term is io_capacity_max · F^1.5 / 750: io_capacity
/// cancels out, buf0flu.cc `af_get_pct_for_lsn`), and past the async point it is the
/// batch size: one second of the device, never more.
pub fn io_capacity_max_from_device(io_capacity_max: Option<u64>, obs: &Observed) -> Option<u64> {
    let peak = obs
        .peak_pages_flushed_rate
        .filter(|r| r.is_finite() && *r > 0.0)?;
    let max = io_capacity_max?;
    if peak <= max as f64 * DEVICE_MARGIN {
        return None;
    }
    Some((peak.ceil() as u64).div_ceil(100) * 100)
}

/// The `SET GLOBAL` moving io_capacity_max up to `want`: none when innodb_io_capacity
/// is above `want` (the server keeps io_capacity ≤ io_capacity_max).
pub fn io_capacity_max_sql(io_capacity: Option<u64>, want: u64) -> Vec<String> {
    if io_capacity.is_some_and(|c| c > want) {
        return Vec::new();
    }
    vec![format!("SET GLOBAL innodb_io_capacity_max = {want};")]
}

/// The static settings the findings look at.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Settings {
    pub flavor: Option<Flavor>,
    pub max_purge_lag: Option<u64>,
    pub max_purge_lag_delay: Option<u64>,
    pub io_capacity: Option<u64>,
    pub io_capacity_max: Option<u64>,
    pub purge_threads: Option<u64>,
    pub purge_batch_size: Option<u64>,
    /// Whether innodb_purge_threads can be SET GLOBAL here.
    pub purge_threads_dynamic: bool,
    /// innodb_max_dirty_pages_pct_lwm, when a whole number.
    pub max_dirty_pages_pct_lwm: Option<u64>,
    /// innodb_flush_neighbors.
    pub flush_neighbors: Option<u64>,
}

/// A lag below this many undo logs is reached within seconds of any blocked purge
/// under load (the measured update load grew history ~30 k/s behind a view).
pub const SMALL_LAG: u64 = 100_000;

/// A delay cap is "far above" a row's time when the full delay cuts a thread's row
/// rate by more than this fraction.
pub const WALL_LOSS: f64 = 0.9;

/// A cap of a second or more per row is a wall whatever the row time.
pub const WALL_US: u64 = 1_000_000;

/// Findings about static settings: the purge lag, the delay cap, io_capacity_max
/// against the device, a sleeping page cleaner (MariaDB's lwm 0) at the async point,
/// neighbour flushing at the async point, one purge thread under sustained debt.
pub fn static_findings(set: &Settings, s: &Signals, obs: &Observed, blocked: bool) -> Vec<Finding> {
    let mut out = Vec::new();
    let history = s.history_len.unwrap_or(0);
    let lag = set.max_purge_lag.unwrap_or(0);
    let cap = set.max_purge_lag_delay.unwrap_or(0);
    let row_us = server_model::row_time_us(s);
    // Both servers: lag 0 is off, and a cap of 0 is no delay at all
    // (trx0purge.cc: MySQL caps the delay with it, MariaDB `trx_purge()` takes the
    // min with it).
    if lag > 0 && cap > 0 {
        let knobs = KnobValues::from([
            (Knob::PurgeThreads, set.purge_threads.unwrap_or(4)),
            (Knob::PurgeBatchSize, set.purge_batch_size.unwrap_or(300)),
        ]);
        let flavor = set.flavor.unwrap_or(Flavor::MariaDb);
        let at = |h: u64| server_model::dml_delay_us(flavor, h, lag, cap, &knobs);
        let twice = at(lag.saturating_mul(2));
        let flavor_txt = match flavor {
            // trx0purge.cc `trx_purge_dml_delay()`: computed on every purge call from
            // the history length alone, whether purge can progress or not.
            Flavor::MySql => format!(
                "MySQL computes the delay on every purge call from the history length alone, so it delays users even while a read view blocks purge and the delay cannot help (now: {} µs per row at history {history}).",
                at(history)
            ),
            // trx0purge.cc `trx_purge()`: the delay is set only when the batch handled
            // pages, so while a view blocks purge nothing is delayed; once the view
            // ends and purge progresses, every row pays it.
            Flavor::MariaDb => "MariaDB delays only while purge handles pages, so nothing happens while a read view blocks purge; the moment the view ends and purge progresses on a history above the lag, every row changed pays the delay and TPS collapses just when purge surges.".into(),
        };
        let severity = warning_if(lag <= SMALL_LAG || history > lag);
        out.push(
            Finding::new(
                "purge",
                "purge_lag_throttles",
                severity,
                format!("innodb_max_purge_lag = {lag} throttles users on history, purgeable or not"),
            )
            .why(format!(
                "innodb_max_purge_lag = {lag} undo logs with innodb_max_purge_lag_delay = {cap} µs: above {lag} the server sleeps each row change, {twice} µs per row at twice the lag. The threshold counts all history, not what purge can remove. {flavor_txt} History is {history} now."
            ))
            .todo("Turn the threshold off and let purge-aware control (innopilot's purge-rate policy) decide the delay from purgeable history and its trend.")
            .sql("SET GLOBAL innodb_max_purge_lag = 0;"),
        );
    }
    if cap > 0 {
        // Both servers sleep once per row changed in the user's thread
        // (`row_mysql_delay_if_needed()`), so the cap compares with a row's time.
        let (wall, why_row, want) = match row_us {
            Some(t) => {
                let loss = cap as f64 / (t + cap as f64);
                (
                    loss > WALL_LOSS || cap >= WALL_US,
                    format!(
                        "A row takes about {t:.0} µs here (Threads_running over rows changed per second), so the full delay cuts each thread's row rate by {:.0} %.",
                        loss * 100.0
                    ),
                    server_model::delay_for_slowdown_us(t, 20.0),
                )
            }
            None => (
                cap >= WALL_US,
                "A row's time is unknown (no row changes during the samples); at a second or more per row the cap is a wall whatever the row time.".to_string(),
                1_000,
            ),
        };
        if wall && want < cap {
            let severity = warning_if(lag > 0);
            out.push(
                Finding::new(
                    "purge",
                    "purge_delay_cap_wall",
                    severity,
                    format!("innodb_max_purge_lag_delay = {cap} µs is far above a row's time"),
                )
                .why(format!(
                    "The delay is slept once per row inserted, updated or deleted, not per statement. {why_row} Reached, it stops writes rather than slowing them{}.",
                    if lag == 0 { " (inactive now: innodb_max_purge_lag is 0)" } else { "" }
                ))
                .todo(format!("Cap the delay at {want} µs per row (about a 20 % slowdown where the row time is known)."))
                .sql(format!("SET GLOBAL innodb_max_purge_lag_delay = {want};")),
            );
        }
    }
    if let (Some(max), Some(want)) = (
        set.io_capacity_max,
        io_capacity_max_from_device(set.io_capacity_max, obs),
    ) {
        let peak = obs.peak_pages_flushed_rate.unwrap_or(0.0);
        let mut x = Finding::new(
                "flushing",
                "io_capacity_max_low",
                Severity::Warning,
                format!("innodb_io_capacity_max = {max} is below what the device has shown ({peak:.0} pages/s)"),
            )
            .why(format!(
                "The device flushed {peak:.0} pages per second during the samples, above innodb_io_capacity_max = {max}. The page cleaner's redo-driven flushing asks io_capacity_max · F^1.5 / 750 pages a second (F the checkpoint age as % of the async point; innodb_io_capacity cancels out) and never more than io_capacity_max, so it is held below what the device does and checkpoint age builds up toward the async point."
            ))
            .todo(format!("Raise innodb_io_capacity_max to the observed {want} pages/s (rounded up to 100), no further: past the async point it is the size of each flush batch, and a batch the device cannot write in about a second holds the checkpoint still."));
        x.sql = io_capacity_max_sql(set.io_capacity, want);
        out.push(x);
    }
    if let (Some(Flavor::MariaDb), Some(0), Some(true), Some(fill)) = (
        set.flavor,
        set.max_dirty_pages_pct_lwm,
        s.sample.redo.past_async(),
        s.redo_fill.filter(|f| f.is_finite()),
    ) {
        // Past the async point the page cleaner already runs in batches; below it,
        // with lwm 0, it did nothing on the way there.
        out.push(
            Finding::new(
                "flushing",
                "page_cleaner_asleep",
                Severity::Warning,
                "innodb_max_dirty_pages_pct_lwm = 0 kept the page cleaner asleep until the async point".into(),
            )
            .why(format!(
                "Redo fill is {:.0} % of the maximum checkpoint age. With MariaDB's default innodb_max_dirty_pages_pct_lwm = 0 the page cleaner sleeps below the async point (7/8 of the maximum) unless dirty pages pass innodb_max_dirty_pages_pct: no redo-driven flushing while the age crossed the whole adaptive range (measured on MariaDB 10.11.19, tests/page_cleaner.rs), and then batches of innodb_io_capacity_max at once.",
                fill * 100.0
            ))
            .todo("Set innodb_max_dirty_pages_pct_lwm to 1 so the page cleaner flushes from innodb_adaptive_flushing_lwm on, in proportion to the age, instead of in batches at the async point. It costs page writes that a later change to the same page would have saved; innopilot's flush policy does this only while it manages flushing.")
            .sql("SET GLOBAL innodb_max_dirty_pages_pct_lwm = 1;"),
        );
    }
    if let (Some(n @ 1..), Some(true), Some(fill)) = (
        set.flush_neighbors,
        s.sample.redo.past_async(),
        s.redo_fill.filter(|f| f.is_finite()),
    ) {
        out.push(
            Finding::new(
                "flushing",
                "flush_neighbors_at_the_async_point",
                Severity::Info,
                format!("innodb_flush_neighbors = {n} while the checkpoint age is past the async point"),
            )
            .why(format!(
                "Redo fill is {:.0} % of the maximum checkpoint age, and only the pages at the old end of the flush list move the checkpoint. With innodb_flush_neighbors on, each of them is written with the dirty pages of its 64-page area (buf_flush_try_neighbors(), buf0flu.cc) on a device the server takes for rotational; under scattered updates a batch is then almost all neighbours and the checkpoint stands still (measured on MariaDB 10.11.19, tests/flush_neighbors.rs: 32 % of the dirty pages written retired 0.4 % of the age with neighbours, 21 % without). MariaDB skips neighbours on devices the kernel reports as non-rotational, but many virtual disks report rotational.",
                fill * 100.0
            ))
            .todo("On an SSD or a virtual disk, set innodb_flush_neighbors to 0 (and in the option file). On a real spinning disk neighbours make writes sequential and may be worth keeping. innopilot's flush policy sets 0 only while it manages flushing (policy.flush.neighbors_off).")
            .sql("SET GLOBAL innodb_flush_neighbors = 0;"),
        );
    }
    if s.sample.purge_records.is_none() && s.history_len.is_some() {
        out.push(
            Finding::new(
                "purge",
                "purge_counters_off",
                Severity::Info,
                "The purge counters of INNODB_METRICS are off: history cannot be told from debt".into(),
            )
            .why(format!(
                "History is {history} undo logs. The server counts an undo log in it until it frees the log, not until purge has handled it, and MariaDB frees handled logs only from rollback segments no transaction is using (MDEV-33213): under many busy writers history can rise by hundreds of thousands while purge keeps up, and fall to about 0 once they stop. innodb_max_purge_lag reads the same count. With the counters purge_upd_exist_or_extern_records and purge_del_mark_records (module_purge) innopilot measures how much of the rows users change purge has handled, and neither delays users nor adds purge threads for history that is only waiting to be freed; without them it counts all history as debt. They cost one unlocked increment per purged record."
            ))
            .todo("Enable them now and in the option file ([mysqld] innodb_monitor_enable = module_purge), so that they survive a restart.")
            .sql("SET GLOBAL innodb_monitor_enable = 'module_purge';"),
        );
    }
    let growing = s
        .history_rate
        .filter(|r| r.is_finite() && *r > 0.0 && obs.seconds >= MIN_SUSTAINED_S);
    if let (Some(1), Some(r), false) = (set.purge_threads, growing, blocked) {
        let mut x = Finding::new(
            "purge",
            "single_purge_thread",
            Severity::Warning,
            "One purge thread while history keeps growing".into(),
        )
        .why(format!(
            "innodb_purge_threads = 1 and history grew {r:+.0} undo logs/s over {:.0} s ({history} now) while no read view blocked purge: one thread does not keep up with the writes.",
            obs.seconds
        ));
        x = if set.purge_threads_dynamic {
            x.todo("Give purge 4 threads (the default); innopilot's watermark policy takes them back when redo fills.")
                .sql("SET GLOBAL innodb_purge_threads = 4;")
        } else {
            x.todo("innodb_purge_threads is not dynamic on this server: set it to 4 in the configuration and restart.")
        };
        out.push(x);
    }
    out
}

/// A warning when `bad`, else for information only.
fn warning_if(bad: bool) -> Severity {
    if bad {
        Severity::Warning
    } else {
        Severity::Info
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obs(seconds: f64, lsn_rate: f64, peak: Option<f64>) -> Observed {
        Observed {
            seconds,
            samples: (seconds as u32) + 1,
            lsn_rate: Some(lsn_rate),
            peak_pages_flushed_rate: peak,
        }
    }

    /// Advice for a redo of `cur` bytes, 80 % of it usable, written at `rate` bytes/s
    /// sustained over 30 s.
    fn advise(cur: u64, rate: f64, pool: Option<u64>, free: &FreeDisk) -> RedoAdvice {
        redo_size(cur, 0.8, &obs(30.0, rate, None), pool, free)
    }

    #[test]
    fn redo_advice_needs_a_sustained_rate() {
        let a = redo_size(
            64 * MIB,
            0.8,
            &obs(2.0, 4e6, None),
            Some(64 * MIB),
            &FreeDisk::Bytes(1 << 40),
        );
        assert_eq!(a.bytes, None);
        assert!(a.text.contains("at least 10 s"), "{}", a.text);
    }

    #[test]
    fn redo_advice_is_capped_by_the_buffer_pool() {
        // The case: ~4 MiB/s would want 16 GiB; a 64 MiB pool caps it at 128 MiB.
        let a = advise(64 * MIB, 3.9e6, Some(64 * MIB), &FreeDisk::Bytes(1 << 40));
        assert_eq!(a.bytes, Some(128 * MIB));
        assert!(
            a.text.contains("2 × the buffer pool (128 MiB)"),
            "{}",
            a.text
        );
        assert!(a.text.contains("over 30 s"), "{}", a.text);
    }

    #[test]
    fn redo_advice_is_capped_by_free_disk_and_recovery() {
        let a = advise(64 * MIB, 3.9e6, Some(64 << 30), &FreeDisk::Bytes(1 << 30));
        assert_eq!(a.bytes, Some(512 * MIB));
        let a = advise(
            64 * MIB,
            3.9e6,
            Some(64 << 30),
            &FreeDisk::Unknown("remote".into()),
        );
        // Recovery: 50 MiB/s × 300 s / 0.8 = 18 750 MiB; an hour of 3.9 MB/s / 0.8 is less.
        let want = ((3.9e6 * 3600.0 / 0.8) as u64).div_ceil(MIB) * MIB;
        assert_eq!(a.bytes, Some(want.min(18_750 * MIB)));
        assert!(a.text.contains("free disk could not be checked: remote"));
        let a = advise(64 * MIB, 50e6, Some(1 << 40), &FreeDisk::Bytes(1 << 50));
        assert_eq!(a.bytes, Some(18_750 * MIB));
        // Already at the bound: nothing to grow.
        let a = advise(128 * MIB, 3.9e6, Some(64 * MIB), &FreeDisk::Bytes(1 << 40));
        assert_eq!(a.bytes, None);
        assert!(a.text.contains("no room"));
    }

    #[test]
    fn redo_volume_is_checked_only_when_it_is_visible() {
        assert_eq!(
            redo_dir(Some("./"), Some("/var/lib/mysql/")).as_deref(),
            Some("/var/lib/mysql/./")
        );
        assert_eq!(redo_dir(Some("/redo"), None).as_deref(), Some("/redo"));
        assert_eq!(redo_dir(None, Some("/d")).as_deref(), Some("/d"));
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().to_str().unwrap();
        // No redo file here: another host's path, not checked.
        assert!(matches!(
            redo_free_disk(Some(d), Some(4096)),
            FreeDisk::Unknown(_)
        ));
        std::fs::write(dir.path().join("ib_logfile0"), vec![0u8; 4096]).unwrap();
        assert!(matches!(redo_free_disk(Some(d), Some(4096)), FreeDisk::Bytes(b) if b > 0));
        // A file of another size is another server's.
        assert!(matches!(
            redo_free_disk(Some(d), Some(8192)),
            FreeDisk::Unknown(_)
        ));
    }

    #[test]
    fn io_capacity_max_follows_the_device() {
        assert_eq!(
            io_capacity_max_from_device(Some(200), &obs(10.0, 0.0, Some(1234.5))),
            Some(1300)
        );
        assert_eq!(
            io_capacity_max_from_device(Some(2000), &obs(10.0, 0.0, Some(1234.5))),
            None
        );
        assert_eq!(
            io_capacity_max_from_device(Some(200), &obs(10.0, 0.0, None)),
            None
        );
        assert_eq!(
            io_capacity_max_sql(Some(200), 1300),
            vec!["SET GLOBAL innodb_io_capacity_max = 1300;"]
        );
        // io_capacity above the advice: the server would refuse the order.
        assert!(io_capacity_max_sql(Some(2000), 1300).is_empty());
    }

    #[test]
    fn a_sleeping_page_cleaner_at_the_async_point_has_a_finding() {
        let set = Settings {
            max_dirty_pages_pct_lwm: Some(0),
            ..defaults()
        };
        let mut s = loaded();
        s.history_rate = None;
        let at = |s: &mut Signals, fill: f64| {
            let sync = 100_000_000u64;
            s.sample.redo.sync_point = Some(sync);
            s.sample.redo.async_point = None;
            s.sample.redo.checkpoint_age = Some((fill * sync as f64) as u64);
            s.redo_fill = Some(fill);
        };
        at(&mut s, 0.9);
        let o = obs(12.0, 1e6, None);
        let fs = static_findings(&set, &s, &o, false);
        assert_eq!(ids(&fs), ["page_cleaner_asleep"]);
        assert_eq!(
            fs[0].sql,
            ["SET GLOBAL innodb_max_dirty_pages_pct_lwm = 1;"]
        );
        // Below the async point, with lwm on, or on MySQL: nothing.
        at(&mut s, 0.5);
        assert!(static_findings(&set, &s, &o, false).is_empty());
        // The server's own async point counts when it publishes one.
        at(&mut s, 0.8);
        s.sample.redo.async_point = Some(75_000_000);
        assert_eq!(
            ids(&static_findings(&set, &s, &o, false)),
            ["page_cleaner_asleep"]
        );
        at(&mut s, 0.9);
        let on = Settings {
            max_dirty_pages_pct_lwm: Some(10),
            ..set
        };
        assert!(static_findings(&on, &s, &o, false).is_empty());
        let mysql = Settings {
            flavor: Some(Flavor::MySql),
            ..set
        };
        assert!(static_findings(&mysql, &s, &o, false).is_empty());
    }

    #[test]
    fn neighbour_flushing_at_the_async_point_has_a_finding() {
        let mut s = loaded();
        s.history_rate = None;
        let sync = 100_000_000u64;
        s.sample.redo.sync_point = Some(sync);
        s.sample.redo.checkpoint_age = Some(90_000_000);
        s.redo_fill = Some(0.9);
        let o = obs(12.0, 1e6, None);
        for (n, want) in [
            (Some(1), true),
            (Some(2), true),
            (Some(0), false),
            (None, false),
        ] {
            let set = Settings {
                flush_neighbors: n,
                ..defaults()
            };
            let fs = static_findings(&set, &s, &o, false);
            assert_eq!(
                ids(&fs) == ["flush_neighbors_at_the_async_point"],
                want,
                "{n:?}: {:?}",
                ids(&fs)
            );
            if want {
                assert_eq!(fs[0].sql, ["SET GLOBAL innodb_flush_neighbors = 0;"]);
            }
        }
        // Below the async point: nothing.
        s.sample.redo.checkpoint_age = Some(50_000_000);
        s.redo_fill = Some(0.5);
        let set = Settings {
            flush_neighbors: Some(1),
            ..defaults()
        };
        assert!(static_findings(&set, &s, &o, false).is_empty());
    }

    fn bad() -> Settings {
        Settings {
            flavor: Some(Flavor::MariaDb),
            max_purge_lag: Some(1000),
            max_purge_lag_delay: Some(10_000_000),
            io_capacity: Some(100),
            io_capacity_max: Some(300),
            purge_threads: Some(1),
            purge_batch_size: Some(127),
            purge_threads_dynamic: true,
            max_dirty_pages_pct_lwm: None,
            flush_neighbors: None,
        }
    }

    fn defaults() -> Settings {
        Settings {
            max_purge_lag: Some(0),
            max_purge_lag_delay: Some(0),
            io_capacity: Some(200),
            io_capacity_max: Some(2000),
            purge_threads: Some(4),
            ..bad()
        }
    }

    fn loaded() -> Signals {
        let mut s = Signals {
            history_len: Some(50_000),
            history_rate: Some(800.0),
            dml_rate: Some(40_000.0),
            ..Signals::default()
        };
        s.sample.threads_running = Some(5);
        // The purge counters on: their finding has its own test.
        s.sample.purge_records = Some(0);
        s
    }

    #[test]
    fn purge_counters_off_have_a_finding() {
        let o = obs(12.0, 1e6, None);
        let mut s = loaded();
        assert!(static_findings(&defaults(), &s, &o, false).is_empty());
        s.sample.purge_records = None;
        let fs = static_findings(&defaults(), &s, &o, false);
        assert_eq!(ids(&fs), ["purge_counters_off"]);
        assert_eq!(
            fs[0].sql,
            ["SET GLOBAL innodb_monitor_enable = 'module_purge';"]
        );
        assert!(fs[0]
            .recommendation
            .contains("innodb_monitor_enable = module_purge"));
        // No history known (no InnoDB): nothing to say.
        s.history_len = None;
        assert!(static_findings(&defaults(), &s, &o, false).is_empty());
    }

    fn ids(fs: &[Finding]) -> Vec<&str> {
        fs.iter().map(|f| f.id).collect()
    }

    #[test]
    fn each_bad_setting_has_its_finding_and_sql() {
        let o = obs(12.0, 1e6, Some(450.0));
        let fs = static_findings(&bad(), &loaded(), &o, false);
        assert_eq!(
            ids(&fs),
            [
                "purge_lag_throttles",
                "purge_delay_cap_wall",
                "io_capacity_max_low",
                "single_purge_thread"
            ]
        );
        assert_eq!(fs[0].sql, ["SET GLOBAL innodb_max_purge_lag = 0;"]);
        assert!(
            fs[0].explanation.contains("1000 undo logs"),
            "{}",
            fs[0].explanation
        );
        // 4 threads / 40 000 rows/s = 100 µs a row; 20 % → 25 µs.
        assert_eq!(fs[1].sql, ["SET GLOBAL innodb_max_purge_lag_delay = 25;"]);
        assert!(
            fs[1].explanation.contains("100 µs"),
            "{}",
            fs[1].explanation
        );
        assert_eq!(fs[2].sql, ["SET GLOBAL innodb_io_capacity_max = 500;"]);
        assert_eq!(fs[3].sql, ["SET GLOBAL innodb_purge_threads = 4;"]);
        assert!(fs
            .iter()
            .all(|f| !f.explanation.is_empty() && !f.recommendation.is_empty()));
        // 380 pages/s: above 1.2 × 300, under the default 2 000.
        let o = obs(12.0, 1e6, Some(380.0));
        let fs = static_findings(&bad(), &loaded(), &o, false);
        let io = fs.iter().find(|f| f.id == "io_capacity_max_low").unwrap();
        assert_eq!(io.sql, ["SET GLOBAL innodb_io_capacity_max = 400;"]);
        let fs = static_findings(&defaults(), &loaded(), &o, false);
        assert!(fs.is_empty(), "{:?}", ids(&fs));
    }

    #[test]
    fn mysql_lag_explains_the_delay_while_blocked() {
        let set = Settings {
            flavor: Some(Flavor::MySql),
            ..bad()
        };
        let fs = static_findings(&set, &loaded(), &obs(12.0, 0.0, None), true);
        let x = fs.iter().find(|f| f.id == "purge_lag_throttles").unwrap();
        // (50 − 0.9995) × 10 000 µs at history 50 000 over a lag of 1000.
        assert!(
            x.explanation.contains("490005 µs per row"),
            "{}",
            x.explanation
        );
        // Blocked purge: not a purge-thread problem.
        assert!(fs.iter().all(|f| f.id != "single_purge_thread"));
    }

    #[test]
    fn delay_cap_with_unknown_row_time() {
        let idle = Signals::default();
        let o = obs(12.0, 0.0, None);
        let fs = static_findings(&bad(), &idle, &o, false);
        let x = fs.iter().find(|f| f.id == "purge_delay_cap_wall").unwrap();
        assert_eq!(x.sql, ["SET GLOBAL innodb_max_purge_lag_delay = 1000;"]);
        // A modest cap with no known row time is left alone.
        let set = Settings {
            max_purge_lag_delay: Some(5_000),
            ..bad()
        };
        assert!(static_findings(&set, &idle, &o, false)
            .iter()
            .all(|f| f.id != "purge_delay_cap_wall"));
        // One purge thread with a short or flat history: nothing.
        assert!(static_findings(&bad(), &idle, &obs(2.0, 0.0, None), false)
            .iter()
            .all(|f| f.id != "single_purge_thread"));
    }
}
