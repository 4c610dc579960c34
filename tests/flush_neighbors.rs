//! The flush policy's premise for `innodb_flush_neighbors`, against the real server.
//!
//! While it manages flushing, the flush policy sets `innodb_flush_neighbors = 0`
//! (`Flush::neighbors`): flushing is managed to move the checkpoint, and only pages
//! taken from the old end of the flush list move it. MariaDB's
//! `buf_do_flush_list_batch()` (buf0flu.cc) writes each such page with
//! `buf_flush_try_neighbors()`, every dirty page of its 64-page area, when the variable
//! is on and the server takes the device for rotational (`space->is_rotational()`: any
//! device the kernel does not list as non-rotational, which includes the virtual disks
//! and the overlay and tmpfs datadirs tests run on). The policy's prediction:
//!
//! - with 0, the checkpoint age falls in proportion to the dirty pages written (the
//!   oldest go first): retired share of the age ≥ 0.4 × written share of the pages;
//! - with 1 on such a device, a batch is almost all neighbours and the checkpoint
//!   stands still: retired ≤ 0.2 × written, and at most half of what 0 retired.
//!
//! The pages are made dirty one row each, in random order, so that a page's place on
//! the flush list is unrelated to its place in the file (uniform updates, as in the
//! benchmark's g_checkpoint_stall); the page cleaner then writes them at a fixed pace
//! (innodb_io_capacity = 100, innodb_max_dirty_pages_pct = 0) with no new redo, and the
//! test compares the checkpoint age retired with the pages written. Measured on
//! MariaDB 10.11.19: 45 % of the pages written retired 1 % of the age with neighbours,
//! 32 % without.
//!
//! Where the server takes the device for non-rotational it writes no neighbours
//! (INNODB_METRICS `buffer_flush_neighbor_total_pages` stays 0), and the test checks
//! that both values then retire the age alike. Fails (never skips) when the server
//! cannot start.

mod common;

use std::time::{Duration, Instant};

use common::MariaDb;

/// Rows in the table: about 1 500 pages of 16 KiB at 230 bytes a row.
const ROWS: u64 = 100_000;

/// Share of the dirty pages written before the age is compared.
const WRITTEN_SHARE: f64 = 0.3;

async fn metric(db: &MariaDb, name: &str) -> u64 {
    db.query_scalar_string(&format!(
        "SELECT COUNT FROM information_schema.INNODB_METRICS WHERE NAME = '{name}'"
    ))
    .await
    .and_then(|v| v.parse().ok())
    .unwrap_or_else(|| panic!("INNODB_METRICS {name} missing"))
}

/// Writes every dirty page at full speed, then sets the pace for the next phase.
async fn clean(db: &MariaDb) {
    db.exec("SET GLOBAL innodb_io_capacity_max = 100000").await;
    db.exec("SET GLOBAL innodb_io_capacity = 100000").await;
    db.exec("SET GLOBAL innodb_max_dirty_pages_pct = 0").await;
    let t0 = Instant::now();
    while db.status_u64("Innodb_buffer_pool_pages_dirty").await > 20 {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the page cleaner did not write the dirty pages within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    db.exec("SET GLOBAL innodb_max_dirty_pages_pct = 90").await;
    db.exec("SET GLOBAL innodb_io_capacity = 100").await;
    db.exec("SET GLOBAL innodb_io_capacity_max = 100").await;
}

/// One phase: (share of the dirty pages written, share of the checkpoint age retired,
/// neighbour pages the server wrote).
async fn phase(db: &MariaDb, neighbors: u64) -> (f64, f64, u64) {
    clean(db).await;
    db.exec(&format!("SET GLOBAL innodb_flush_neighbors = {neighbors}"))
        .await;
    // One row in fifty, about one per page, each page's first change at a random
    // point of the statement's redo.
    db.exec(
        "UPDATE test.n SET c = c + 1, pad = REPEAT(CHAR(65 + FLOOR(RAND() * 26)), 200) \
         WHERE id % 50 = 7 ORDER BY RAND()",
    )
    .await;
    let age0 = db.status_u64("Innodb_checkpoint_age").await as f64;
    let dirty0 = db.status_u64("Innodb_buffer_pool_pages_dirty").await as f64;
    let flushed0 = db.status_u64("Innodb_buffer_pool_pages_flushed").await;
    let nb0 = metric(db, "buffer_flush_neighbor_total_pages").await;
    assert!(dirty0 > 1000.0, "only {dirty0} pages dirty");
    db.exec("SET GLOBAL innodb_max_dirty_pages_pct = 0").await;
    let t0 = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let written = (db.status_u64("Innodb_buffer_pool_pages_flushed").await - flushed0) as f64;
        if written >= WRITTEN_SHARE * dirty0 {
            let age = db.status_u64("Innodb_checkpoint_age").await as f64;
            let nb = metric(db, "buffer_flush_neighbor_total_pages").await - nb0;
            db.exec("SET GLOBAL innodb_max_dirty_pages_pct = 90").await;
            return (written / dirty0, (age0 - age).max(0.0) / age0, nb);
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the page cleaner wrote {written} of {dirty0} pages in 60 s at io_capacity 100"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_neighbours_the_checkpoint_moves_with_the_pages_written() {
    let db = MariaDb::builder().buffer_pool_size("256M").start();
    db.exec("SET GLOBAL innodb_monitor_enable = 'buffer_flush_neighbor%'")
        .await;
    db.exec("SET GLOBAL innodb_max_dirty_pages_pct_lwm = 0")
        .await;
    db.exec(
        "CREATE DATABASE IF NOT EXISTS test; \
         CREATE TABLE test.n (id INT PRIMARY KEY, c INT, pad CHAR(200)) ENGINE=InnoDB",
    )
    .await;
    db.exec(&format!(
        "INSERT INTO test.n SELECT seq, 0, REPEAT('x', 200) FROM test.seq_1_to_{ROWS}"
    ))
    .await;

    let (w1, r1, nb1) = phase(&db, 1).await;
    let (w0, r0, nb0) = phase(&db, 0).await;
    eprintln!(
        "innodb_flush_neighbors = 1: {:.0} % of the dirty pages written retired {:.1} % of \
         the checkpoint age ({nb1} neighbour pages); = 0: {:.0} % retired {:.1} % \
         ({nb0} neighbour pages)",
        w1 * 100.0,
        r1 * 100.0,
        w0 * 100.0,
        r0 * 100.0
    );
    assert_eq!(nb0, 0, "neighbours written with innodb_flush_neighbors = 0");
    assert!(
        r0 >= 0.4 * w0,
        "without neighbours the checkpoint should move with the oldest pages written: \
         {:.1} % of the age for {:.0} % of the pages",
        r0 * 100.0,
        w0 * 100.0
    );
    if nb1 > 0 {
        // The server takes the device for rotational: the policy's case.
        assert!(
            r1 <= 0.2 * w1 && r1 <= 0.5 * r0,
            "with neighbours the checkpoint should stand still: {:.1} % of the age for \
             {:.0} % of the pages (without: {:.1} %)",
            r1 * 100.0,
            w1 * 100.0,
            r0 * 100.0
        );
    } else {
        // A device the server takes for non-rotational: the variable changes nothing.
        assert!(
            r1 >= 0.4 * w1,
            "no neighbours written, yet the checkpoint stood still: {:.1} % of the age \
             for {:.0} % of the pages",
            r1 * 100.0,
            w1 * 100.0
        );
    }
}
