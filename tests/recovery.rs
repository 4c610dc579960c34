//! The recovery-time model of the flush policy against the real server: a private
//! MariaDB is loaded until its checkpoint age is large, killed with SIGKILL, and
//! restarted; the time crash recovery adds to a start is compared with what
//! `policy::flush::recovery_time_s` predicts from the checkpoint age, the dirty pages
//! and the device's measured page rate. The redo-size bound of `redo_resize` rests on
//! that prediction: if it says less than the server takes, the bound is unsafe.
//!
//! Fails (never skips) when the server cannot start.

mod common;

use std::time::{Duration, Instant};

use common::MariaDb;
use innopilot::policy::flush::recovery_time_s;

/// Best one-second flush rate while the page cleaner is asked for far more than any
/// device does: the device's page rate, as the policy would learn it.
async fn device_pages_per_s(db: &MariaDb) -> f64 {
    db.exec("SET GLOBAL innodb_io_capacity_max = 100000").await;
    db.exec("SET GLOBAL innodb_io_capacity = 100000").await;
    db.exec("SET GLOBAL innodb_max_dirty_pages_pct = 0").await;
    let mut best = 0.0f64;
    let mut prev = db.status_u64("Innodb_buffer_pool_pages_flushed").await;
    let mut t_prev = Instant::now();
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = db.status_u64("Innodb_buffer_pool_pages_flushed").await;
        let dt = t_prev.elapsed().as_secs_f64();
        t_prev = Instant::now();
        best = best.max((now - prev) as f64 / dt);
        prev = now;
    }
    db.exec("SET GLOBAL innodb_max_dirty_pages_pct = 90").await;
    db.exec("SET GLOBAL innodb_io_capacity = 100").await;
    db.exec("SET GLOBAL innodb_io_capacity_max = 100").await;
    best
}

fn timed_start(db: &mut MariaDb) -> Duration {
    let t0 = Instant::now();
    db.start();
    t0.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_recovery_stays_within_the_models_prediction() {
    // A redo log large enough that the age can grow well past what the default test
    // server holds, and slow background flushing so it does.
    let mut db = MariaDb::builder()
        .buffer_pool_size("256M")
        .log_file_size("256M")
        .args([
            "--innodb-io-capacity=100",
            "--innodb-io-capacity-max=100",
            "--innodb-max-dirty-pages-pct=90",
        ])
        .start();
    // About 7 500 pages of rows (under the pool): enough dirty pages for the page
    // term of the model to matter.
    db.prepare_table(1_500_000).await;

    // A clean restart: what a start costs without recovery.
    db.stop();
    let clean = timed_start(&mut db);

    // Dirty the pool with the load, measure the device, then let the age grow.
    let load = db.spawn_update_load(4);
    tokio::time::sleep(Duration::from_secs(8)).await;
    let device = device_pages_per_s(&db).await;
    assert!(device > 0.0, "no flushing seen");
    let max_age = db.status_u64("Innodb_checkpoint_max_age").await;
    let t0 = Instant::now();
    let mut age = 0;
    while t0.elapsed() < Duration::from_secs(90) {
        tokio::time::sleep(Duration::from_millis(500)).await;
        age = db.status_u64("Innodb_checkpoint_age").await;
        if age >= max_age / 10 * 6 {
            break;
        }
    }
    let dirty = db.status_u64("Innodb_buffer_pool_pages_dirty").await;
    let age = age.max(db.status_u64("Innodb_checkpoint_age").await);
    db.kill();
    drop(load);

    let crashed = timed_start(&mut db);
    let measured = crashed.saturating_sub(clean).as_secs_f64();
    let predicted = recovery_time_s(age as f64, dirty as f64, device);
    let log = db.error_log();
    assert!(
        log.contains("Starting crash recovery") || log.contains("crash recovery"),
        "the restart did not recover: {}",
        db.error_log_tail(30)
    );
    eprintln!(
        "recovery model check: checkpoint age {} MiB of max {} MiB, {dirty} dirty pages, \
         device {device:.0} pages/s; start clean {clean:?}, after SIGKILL {crashed:?}; \
         recovery measured {measured:.2} s, predicted {predicted:.2} s ({:.2} of the prediction)",
        age >> 20,
        max_age >> 20,
        measured / predicted.max(1e-9)
    );
    // Stated tolerance: the model bounds recovery (measured at most the prediction plus
    // 2 s of start-up noise), and is not uselessly pessimistic (the prediction at most
    // 20× the measurement plus 5 s): a bound 20× too large would let the redo grow too
    // little to matter.
    assert!(
        measured <= predicted + 2.0,
        "recovery took {measured:.2} s, the model predicted {predicted:.2} s: the bound is unsafe"
    );
    assert!(
        predicted <= 20.0 * measured + 5.0,
        "the model predicted {predicted:.2} s for a recovery of {measured:.2} s"
    );
}
