//! Safety against misuse and hostile surroundings, against a private MariaDB: a
//! re-spelled DSN after a crash, a tampered state file, two live instances, planted
//! symlinks. Each test asserts the server's variables, not only innopilot's exit code.
//! docs/reliability.md lists them.

mod common;

use std::path::Path;
use std::time::Duration;

use common::run::{events, knob, knob_values, signal, unix_ms, wait_exit, wait_for_applied, Run};
use common::{eventually, MariaDb};

/// Narrow watermarks and a short interval so that purge threads move within seconds
/// under a small update load (as in tests/faults.rs).
const CONFIG: &str = r#"
[server]
connect_timeout = "1s"
query_timeout = "1s"

[sampler]
interval = "500ms"
window = "5s"

[control]
restore_timeout = "10s"
max_sets_per_minute = 600

[knobs.innodb_purge_threads]
min = 1
max = 4
max_step = 1
min_dwell = "500ms"

[policy.watermark]
low_pct = 1.0
high_pct = 12.0
max_purge_threads = 4
hysteresis_pct = 0.5
engage_fill_pct = 0.0

# Managed by default; not here, so a state file asking to resize it is refused.
[knobs.innodb_log_file_size]
manage = false
"#;

async fn loaded(db: &MariaDb) -> common::LoadHandle {
    db.prepare_table(20_000).await;
    db.spawn_update_load(4)
}

fn text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Starts a live run and waits for its start record (its state file is written).
async fn started(run: &Run, dsn: &str) -> std::process::Child {
    let before = events(&run.records(), "start").len();
    let child = run.spawn(dsn, &[]);
    eventually(
        "the run's start record",
        Duration::from_secs(30),
        Duration::from_millis(100),
        || async { (events(&run.records(), "start").len() > before).then_some(()) },
    )
    .await;
    child
}

/// A live run changes purge threads under load, then dies by SIGKILL: the server keeps
/// innopilot's value and the state file is unclean. Returns the value left.
async fn killed_mid_change(db: &MariaDb, run: &Run, baseline: u64) -> u64 {
    let child = run.spawn(&db.dsn(), &[]);
    wait_for_applied(run, "innodb_purge_threads", Duration::from_secs(40)).await;
    signal(&child, "KILL");
    let _ = wait_exit(child, Duration::from_secs(10));
    let left = knob(db, "innodb_purge_threads").await;
    assert_ne!(left, baseline, "the kill must leave a change to recover");
    let state = std::fs::read_to_string(run.state()).unwrap();
    assert!(state.contains("\"clean\": false"), "{state}");
    left
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn respelled_dsn_after_kill_is_restored_and_foreign_state_is_kept() {
    let db = MariaDb::new();
    let load = loaded(&db).await;
    let startup = knob_values(&db).await;
    let baseline = knob(&db, "innodb_purge_threads").await;
    let run = Run::with_config(CONFIG);
    killed_mid_change(&db, &run, baseline).await;
    drop(load);

    // Another server, same state file: refused, the file kept byte for byte, that
    // server untouched.
    let other = MariaDb::new();
    let other_before = knob_values(&other).await;
    let saved = std::fs::read(run.state()).unwrap();
    let child = run.spawn(&other.dsn(), &[]);
    let (code, err) = wait_exit(child, Duration::from_secs(30));
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("another server") && err.contains("innopilot restore"),
        "{err}"
    );
    assert!(
        err.contains(&format!("port {}", db.port())),
        "names the server: {err}"
    );
    assert_eq!(
        std::fs::read(run.state()).unwrap(),
        saved,
        "state overwritten"
    );
    assert_eq!(knob_values(&other).await, other_before);
    drop(other);

    // The same server spelled differently (localhost, over the socket): it is the
    // same server, so the crash is recovered and the real baseline kept, and what
    // the dead run measured of the device is taken up.
    tamper(&run.state(), |v| {
        v["learned"] = serde_json::json!({"device_limit_pages_s": 777.5, "unix_ms": 1});
    });
    let child = started(&run, &db.socket_dsn()).await;
    let recs = run.records();
    let start = events(&recs, "start").last().cloned().unwrap().clone();
    assert_eq!(
        start["baseline"]["innodb_purge_threads"], baseline,
        "{start}"
    );
    assert_eq!(
        start["recalled"]["device_limit_pages_s"], 777.5,
        "the same server's measurement: {start}"
    );
    assert!(
        events(&recs, "restore")
            .iter()
            .any(|r| r["trigger"] == "crash_recovery" && r["knob"] == "innodb_purge_threads"),
        "no crash recovery with the re-spelled DSN"
    );
    signal(&child, "TERM");
    let (code, err) = wait_exit(child, Duration::from_secs(20));
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(knob_values(&db).await, startup);
    // A clean exit keeps it for the next start.
    let state = std::fs::read_to_string(run.state()).unwrap();
    assert!(
        state.contains("\"clean\": true") && state.contains("\"device_limit_pages_s\": 777.5"),
        "{state}"
    );
}

/// Breaks or repairs a file's ownership or mode.
type Fix<'a> = Box<dyn Fn() + 'a>;

/// Rewrites the state file's JSON with `edit`.
fn tamper(path: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    edit(&mut v);
    std::fs::write(path, serde_json::to_string_pretty(&v).unwrap()).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tampered_state_is_refused_and_the_server_left_as_it_is() {
    let db = MariaDb::new();
    let run = Run::with_config(CONFIG);
    // A genuine unclean state of this server: a live run killed after its start.
    let child = started(&run, &db.dsn()).await;
    signal(&child, "KILL");
    let _ = wait_exit(child, Duration::from_secs(10));
    let genuine = std::fs::read_to_string(run.state()).unwrap();
    let before = knob_values(&db).await;
    let live = |name: &str| -> u64 { before[name].as_deref().unwrap().parse().unwrap() };

    // Each form: the file claims innopilot left KNOB at its live value and asks for
    // BASELINE back.
    let forms: [(&str, u64, &str); 4] = [
        // Within the server's range, outside [knobs.innodb_purge_threads] max = 4.
        ("innodb_purge_threads", 32, "configured bounds"),
        // manage = false in this configuration: a 1 GiB redo resize.
        ("innodb_log_file_size", 1 << 30, "manage = false"),
        // A 10 s DML delay: outside the default bounds (100 ms).
        (
            "innodb_max_purge_lag_delay",
            10_000_000,
            "configured bounds",
        ),
        // u64::MAX: the server would clamp it (and raise io_capacity_max with it).
        ("innodb_io_capacity", u64::MAX, "range any server accepts"),
    ];
    for (name, value, why) in forms {
        std::fs::write(run.state(), &genuine).unwrap();
        tamper(&run.state(), |v| {
            v["baseline"][name] = value.into();
            v["last_set"][name] = live(name).into();
        });
        let tampered = std::fs::read(run.state()).unwrap();
        let out = run.restore(&db.dsn());
        assert!(
            !out.status.success(),
            "{name}: restore obeyed: {}",
            text(&out)
        );
        assert!(
            text(&out).contains(name) && text(&out).contains(why),
            "{name}: {}",
            text(&out)
        );
        assert_eq!(knob_values(&db).await, before, "restore set {name}");
        // A live start refuses too, and keeps the file for the operator.
        let child = run.spawn(&db.dsn(), &[]);
        let (code, err) = wait_exit(child, Duration::from_secs(30));
        assert_eq!(code, Some(1), "{name}: {err}");
        assert!(
            err.contains(name) && err.contains("refuse"),
            "{name}: {err}"
        );
        assert_eq!(knob_values(&db).await, before, "run set {name}");
        assert_eq!(std::fs::read(run.state()).unwrap(), tampered, "{name}");
    }

    // A state file (or its directory) others may write, or another user's: not
    // trusted at all, whatever it says.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::write(run.state(), &genuine).unwrap();
        let state = run.state();
        let dir = run.dir.path().to_path_buf();
        let cases: [(&str, Fix, Fix); 3] = [
            (
                "file mode 0666",
                Box::new(|| {
                    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o666))
                        .unwrap()
                }),
                Box::new(|| {
                    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o600))
                        .unwrap()
                }),
            ),
            (
                "directory mode 0777",
                Box::new(|| {
                    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap()
                }),
                Box::new(|| {
                    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap()
                }),
            ),
            (
                "owned by another user",
                Box::new(|| std::os::unix::fs::chown(&state, Some(65534), Some(65534)).unwrap()),
                Box::new(|| std::os::unix::fs::chown(&state, Some(0), Some(0)).unwrap()),
            ),
        ];
        let root = rustix::process::geteuid().is_root();
        for (what, break_it, fix_it) in &cases {
            if *what == "owned by another user" && !root {
                eprintln!("skipping `{what}`: chown needs root");
                continue;
            }
            break_it();
            let out = run.restore(&db.dsn());
            assert!(!out.status.success(), "{what}: {}", text(&out));
            assert!(
                text(&out).contains("refusing to trust"),
                "{what}: {}",
                text(&out)
            );
            let child = run.spawn(&db.dsn(), &[]);
            let (code, err) = wait_exit(child, Duration::from_secs(30));
            assert_eq!(code, Some(1), "{what}: {err}");
            assert!(err.contains("chmod go-w"), "{what}: {err}");
            assert_eq!(knob_values(&db).await, before, "{what}");
            fix_it();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_live_instances_never_both_act() {
    let db = MariaDb::new();
    let load = loaded(&db).await;
    let startup = knob_values(&db).await;
    let run = Run::with_config(CONFIG);
    let first = run.spawn(&db.dsn(), &[]);
    wait_for_applied(&run, "innodb_purge_threads", Duration::from_secs(40)).await;
    let pid = first.id().to_string();

    // A second live run on the same state file: refused, naming the holder.
    let second = run.spawn(&db.dsn(), &[]);
    let (code, err) = wait_exit(second, Duration::from_secs(20));
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains(&format!("pid {pid}")), "{err}");

    // With a state file of its own: the server is claimed by the first.
    let own = run.dir.path().join("second");
    std::fs::create_dir(&own).unwrap();
    let second = run.spawn_at(
        &db.dsn(),
        &[],
        &own.join("audit.jsonl"),
        &own.join("state.json"),
    );
    let (code, err) = wait_exit(second, Duration::from_secs(30));
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("another live innopilot"), "{err}");

    // `restore` under the live run refuses and leaves its change in place: had it
    // set anything, the live run would see a value it did not set (an operator's).
    let out = run.restore(&db.dsn());
    assert!(!out.status.success(), "{}", text(&out));
    assert!(text(&out).contains(&format!("pid {pid}")), "{}", text(&out));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        events(&run.records(), "operator_override").is_empty(),
        "something changed the live run's knobs under it"
    );
    assert_ne!(
        std::fs::read_to_string(run.state()).unwrap(),
        "",
        "the live run's state is kept"
    );

    // `release` of a knob the run does not hold as operator-owned: nothing done, exit 1.
    let out = run.release(&db.dsn(), "innodb_purge_threads");
    assert!(!out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("nothing to release"), "{}", text(&out));

    // A dry-run beside it does not advise `innopilot restore`.
    let dry = run.spawn_at(
        &db.dsn(),
        &["--dry-run"],
        &own.join("dry.jsonl"),
        &run.state(),
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    signal(&dry, "TERM");
    let (code, err) = wait_exit(dry, Duration::from_secs(20));
    assert_eq!(code, Some(0), "{err}");
    assert!(!err.contains("innopilot restore"), "{err}");
    assert!(err.contains(&format!("pid {pid}")), "{err}");

    signal(&first, "TERM");
    let (code, err) = wait_exit(first, Duration::from_secs(20));
    assert_eq!(code, Some(0), "{err}");
    drop(load);
    assert_eq!(knob_values(&db).await, startup);

    // Nothing runs now: release and restore say so and fail.
    let out = run.release(&db.dsn(), "innodb_purge_threads");
    assert!(!out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("no live innopilot"), "{}", text(&out));
    let out = run.restore(&db.dsn());
    assert!(!out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("nothing to restore"), "{}", text(&out));
    assert_eq!(knob_values(&db).await, startup);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn planted_symlinks_are_never_followed() {
    let db = MariaDb::new();
    let load = loaded(&db).await;
    let startup = knob_values(&db).await;
    let run = Run::with_config(CONFIG);
    let victim = run.dir.path().join("victim");
    std::fs::write(&victim, "precious\n").unwrap();
    let release = run.dir.path().join("state.json.release");
    let lock = run.dir.path().join("state.json.lock");

    // A link as the lock file: live mode refuses, the target untouched.
    std::os::unix::fs::symlink(&victim, &lock).unwrap();
    let child = run.spawn(&db.dsn(), &[]);
    let (code, err) = wait_exit(child, Duration::from_secs(30));
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("symbolic link"), "{err}");
    std::fs::remove_file(&lock).unwrap();

    // A link as the release mailbox: neither the run nor `innopilot release` reads
    // or writes through it.
    std::os::unix::fs::symlink(&victim, &release).unwrap();
    let child = run.spawn(&db.dsn(), &[]);
    wait_for_applied(&run, "innodb_purge_threads", Duration::from_secs(40)).await;
    // An operator's change, so that there is something to release.
    let io = startup["innodb_io_capacity"].clone().unwrap();
    db.exec("SET GLOBAL innodb_io_capacity = 777").await;
    eventually(
        "operator_override",
        Duration::from_secs(10),
        Duration::from_millis(100),
        || async { (!events(&run.records(), "operator_override").is_empty()).then_some(()) },
    )
    .await;
    let out = run.release(&db.dsn(), "innodb_io_capacity");
    assert!(!out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("symbolic link"), "{}", text(&out));
    signal(&child, "TERM");
    let (code, err) = wait_exit(child, Duration::from_secs(20));
    assert_eq!(code, Some(0), "{err}");
    drop(load);
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    assert!(std::fs::symlink_metadata(&release)
        .unwrap()
        .file_type()
        .is_symlink());
    // Temp and probe files are random and gone: only the files innopilot names.
    let mut names: Vec<String> = std::fs::read_dir(run.dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".state.json"))
        .collect();
    names.sort();
    assert!(names.is_empty(), "left behind: {names:?}");
    // The operator's value stays (innopilot never reverts it); everything else is back.
    assert_eq!(knob(&db, "innodb_io_capacity").await, 777);
    db.exec(&format!("SET GLOBAL innodb_io_capacity = {io}"))
        .await;
    assert_eq!(knob_values(&db).await, startup);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_events_carry_their_own_time() {
    let db = MariaDb::new();
    let startup = knob_values(&db).await;
    let proxy = common::proxy::Proxy::start(db.port()).await;
    let run = Run::with_config(CONFIG);
    let child = started(&run, &proxy.dsn()).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    // An outage of about 4 s: every query and reconnect times out meanwhile.
    proxy.stall(true);
    let lost = eventually(
        "connection_lost",
        Duration::from_secs(10),
        Duration::from_millis(100),
        || async {
            events(&run.records(), "connection_lost")
                .first()
                .map(|r| (*r).clone())
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let cleared_ms = unix_ms();
    proxy.stall(false);
    let regained = eventually(
        "connection_regained",
        Duration::from_secs(15),
        Duration::from_millis(100),
        || async {
            events(&run.records(), "connection_regained")
                .first()
                .map(|r| (*r).clone())
        },
    )
    .await;
    let (lost_ms, regained_ms) = (
        lost["unix_ms"].as_u64().unwrap(),
        regained["unix_ms"].as_u64().unwrap(),
    );
    // Stamped when it happened: after the path cleared, not at the loss's time.
    assert!(
        regained_ms + 50 >= cleared_ms,
        "connection_regained at {regained_ms}, the path cleared at {cleared_ms}"
    );
    assert!(
        regained_ms >= lost_ms + 3_000,
        "regained {regained_ms} vs lost {lost_ms}"
    );
    let down = regained["down_ms"].as_u64().unwrap();
    assert!(
        regained_ms.abs_diff(lost_ms + down) < 1_500,
        "down_ms {down} disagrees with the stamps {lost_ms} → {regained_ms}"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let term_ms = unix_ms();
    signal(&child, "TERM");
    let (code, err) = wait_exit(child, Duration::from_secs(20));
    assert_eq!(code, Some(0), "{err}");
    let recs = run.records();
    let stop = events(&recs, "stop")[0];
    let stop_ms = stop["unix_ms"].as_u64().unwrap();
    assert!(
        stop_ms + 50 >= term_ms,
        "stop stamped {stop_ms}, SIGTERM sent at {term_ms}"
    );
    assert_eq!(stop["restored"], true, "{stop}");
    // Records are in time order.
    let times: Vec<u64> = recs
        .iter()
        .map(|r| r["unix_ms"].as_u64().unwrap())
        .collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1] + 5), "{times:?}");
    assert_eq!(knob_values(&db).await, startup);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn privilege_through_a_default_role_is_recognised() {
    let db = MariaDb::new();
    let load = loaded(&db).await;
    let startup = knob_values(&db).await;
    // SUPER only through a default role; what observing needs, directly.
    db.exec("CREATE ROLE tuner").await;
    db.exec("GRANT SUPER ON *.* TO tuner").await;
    let dsn = db
        .create_user(
            "roleuser",
            "r0le-pw",
            &["PROCESS, REPLICATION CLIENT ON *.*"],
        )
        .await;
    db.exec("GRANT tuner TO 'roleuser'@'127.0.0.1'").await;
    db.exec("SET DEFAULT ROLE tuner FOR 'roleuser'@'127.0.0.1'")
        .await;
    // Without the role, the same grants are refused with exit 3.
    let plain = db
        .create_user(
            "plainuser",
            "pl4in-pw",
            &["PROCESS, REPLICATION CLIENT ON *.*"],
        )
        .await;

    let run = Run::with_config(CONFIG);
    let child = run.spawn(&plain, &[]);
    let (code, err) = wait_exit(child, Duration::from_secs(30));
    assert_eq!(code, Some(3), "{err}");
    assert_eq!(knob_values(&db).await, startup);

    let child = run.spawn(&dsn, &[]);
    let applied = wait_for_applied(&run, "innodb_purge_threads", Duration::from_secs(40)).await;
    // The server took the SET on the role's privilege (read back from the server).
    assert_eq!(applied["readback"], applied["to"], "{applied}");
    signal(&child, "TERM");
    let (code, err) = wait_exit(child, Duration::from_secs(20));
    assert_eq!(code, Some(0), "{err}");
    drop(load);
    assert_eq!(knob_values(&db).await, startup);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_flood_under_a_low_fd_limit_cannot_starve_the_restore() {
    use std::process::{Command, Stdio};
    use tokio::io::AsyncWriteExt;
    let db = MariaDb::new();
    let load = loaded(&db).await;
    let startup = knob_values(&db).await;
    let run = Run::with_config(CONFIG);
    let port = common::free_port();
    let listen = format!("127.0.0.1:{port}");
    // 64 descriptors, soft and hard: raising the soft limit cannot help here, only
    // the cap on HTTP connections can.
    let child = Command::new("prlimit")
        .arg("--nofile=64:64")
        .arg("--")
        .arg(common::innopilot_bin())
        .args(["run", "--listen", &listen, "--config"])
        .arg(run.config())
        .arg("--dsn")
        .arg(db.dsn())
        .arg("--audit")
        .arg(run.audit())
        .arg("--state-file")
        .arg(run.state())
        .env("RUST_LOG", "innopilot=info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("prlimit (util-linux) runs innopilot");
    wait_for_applied(&run, "innodb_purge_threads", Duration::from_secs(40)).await;

    // Held-open partial requests on /metrics, more than the limit, renewed as
    // innopilot drops them on its read deadline.
    let flood = tokio::spawn(async move {
        let mut held = Vec::new();
        loop {
            for _ in 0..50 {
                if let Ok(mut s) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
                    let _ = s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n").await;
                    held.push(s);
                }
            }
            if held.len() > 600 {
                held.drain(..50);
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    });
    tokio::time::sleep(Duration::from_secs(3)).await;

    // Kill innopilot's database connection (it holds the `innopilot` lock): it must
    // reconnect with the flood still on.
    let id = db
        .query_scalar_string("SELECT CAST(IS_USED_LOCK('innopilot') AS CHAR)")
        .await
        .expect("innopilot holds its claim");
    db.exec(&format!("KILL {}", id.parse::<u64>().unwrap()))
        .await;
    eventually(
        "connection_regained after the KILL",
        Duration::from_secs(20),
        Duration::from_millis(100),
        || async { (!events(&run.records(), "connection_regained").is_empty()).then_some(()) },
    )
    .await;
    signal(&child, "TERM");
    let (code, err) = wait_exit(child, Duration::from_secs(30));
    flood.abort();
    drop(load);
    assert_eq!(code, Some(0), "{err}");
    assert!(!err.contains("Too many open files"), "{err}");
    let recs = run.records();
    assert_eq!(events(&recs, "stop")[0]["restored"], true);
    assert_eq!(knob_values(&db).await, startup);
}

/// A small tmpfs, unmounted on drop; `None` (with the reason) where mounting is not
/// permitted.
struct Tmpfs(std::path::PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Result<Tmpfs, String> {
        std::fs::create_dir_all(dir).unwrap();
        let out = std::process::Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(dir)
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
        }
        Ok(Tmpfs(dir.to_path_buf()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

/// Fills the file system of `dir` with a file `name`, to the last byte it takes.
fn fill(dir: &Path, name: &str) {
    use std::io::Write;
    let mut f = std::fs::File::create(dir.join(name)).unwrap();
    let block = vec![b'x'; 512];
    while f.write_all(&block).is_ok() {}
    for _ in 0..512 {
        if f.write_all(b"x").is_err() {
            break;
        }
    }
}

/// Every line of an audit file is a whole JSON record.
fn assert_whole_records(path: &Path) -> usize {
    let text = std::fs::read_to_string(path).unwrap();
    for (i, line) in text.lines().enumerate() {
        assert!(
            serde_json::from_str::<serde_json::Value>(line).is_ok(),
            "line {} of {} is not a record: {line:?}",
            i + 1,
            path.display()
        );
    }
    assert!(text.is_empty() || text.ends_with('\n'), "torn last line");
    text.lines().count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_audit_volume_blocks_changes_and_tears_no_record() {
    let db = MariaDb::new();
    let load = loaded(&db).await;
    let startup = knob_values(&db).await;
    let run = Run::with_config(CONFIG);
    let vol = run.dir.path().join("auditvol");
    let _tmpfs = match Tmpfs::mount(&vol, "64k") {
        Ok(t) => t,
        Err(why) => {
            eprintln!("skipping the full-volume case: cannot mount a tmpfs here: {why}");
            return;
        }
    };
    let audit = vol.join("audit.jsonl");
    // Full from the start: the start record may or may not fit, no decision will.
    fill(&vol, "filler");
    let child = run.spawn_at(&db.dsn(), &[], &audit, &run.state());
    tokio::time::sleep(Duration::from_secs(6)).await;
    // Under this load the policy moves purge threads within a second or two when it
    // may (see the other tests): here it may not, so the server is untouched.
    assert_eq!(
        knob_values(&db).await,
        startup,
        "a change was made that could not be audited"
    );
    let state = std::fs::read_to_string(run.state()).unwrap();
    assert!(state.contains("\"last_set\": {}"), "{state}");
    // Space returns: innopilot acts again, and every record in the file is whole.
    std::fs::remove_file(vol.join("filler")).unwrap();
    eventually(
        "an applied decision once space returned",
        Duration::from_secs(30),
        Duration::from_millis(200),
        || async {
            common::run::read_jsonl(&audit)
                .into_iter()
                .find(|r| r["event"] == "decision" && r["applied"] == true)
        },
    )
    .await;
    // Full again mid-run: records are cut back whole, never torn.
    fill(&vol, "filler2");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_whole_records(&audit);
    std::fs::remove_file(vol.join("filler2")).unwrap();
    signal(&child, "TERM");
    let (code, err) = wait_exit(child, Duration::from_secs(20));
    assert_eq!(code, Some(0), "{err}");
    drop(load);
    assert_whole_records(&audit);
    assert_eq!(knob_values(&db).await, startup);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_audit_file_is_noticed_and_reopened() {
    let db = MariaDb::new();
    let load = loaded(&db).await;
    let startup = knob_values(&db).await;
    let run = Run::with_config(CONFIG);
    let child = run.spawn(&db.dsn(), &[]);
    wait_for_applied(&run, "innodb_purge_threads", Duration::from_secs(40)).await;
    std::fs::remove_file(run.audit()).unwrap();
    // The next change needs the audit trail: innopilot notices the file is gone and
    // writes to a new one at the same path.
    db.exec("SET GLOBAL innodb_io_capacity = 777").await;
    eventually(
        "records in a new audit file",
        Duration::from_secs(15),
        Duration::from_millis(100),
        || async { (!events(&run.records(), "operator_override").is_empty()).then_some(()) },
    )
    .await;
    signal(&child, "TERM");
    let (code, err) = wait_exit(child, Duration::from_secs(20));
    assert_eq!(code, Some(0), "{err}");
    drop(load);
    let recs = run.records();
    assert_eq!(events(&recs, "stop")[0]["restored"], true);
    assert_whole_records(&run.audit());
    assert_eq!(knob(&db, "innodb_io_capacity").await, 777);
    let io = startup["innodb_io_capacity"].clone().unwrap();
    db.exec(&format!("SET GLOBAL innodb_io_capacity = {io}"))
        .await;
    assert_eq!(knob_values(&db).await, startup);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_never_leave_the_process() {
    const PW: &str = "Zq9-hush-7Kx";
    let db = MariaDb::new();
    let load = loaded(&db).await;
    let startup = knob_values(&db).await;
    let dsn = db
        .create_user(
            "secretuser",
            PW,
            &["SUPER, PROCESS, REPLICATION CLIENT ON *.*"],
        )
        .await;
    assert!(dsn.contains(PW));
    let run = Run::with_config(CONFIG);
    let mut outputs: Vec<(String, String)> = Vec::new();

    // A live run with the password on the command line: warned about, and in none of
    // its outputs.
    let child = run.spawn(&dsn, &[]);
    wait_for_applied(&run, "innodb_purge_threads", Duration::from_secs(40)).await;
    signal(&child, "TERM");
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(err.contains("/proc/PID/cmdline"), "no warning: {err}");
    outputs.push((
        "run stdout".into(),
        String::from_utf8_lossy(&out.stdout).into(),
    ));
    outputs.push(("run stderr".into(), err));
    outputs.push((
        "audit log".into(),
        std::fs::read_to_string(run.audit()).unwrap(),
    ));
    outputs.push((
        "state file".into(),
        std::fs::read_to_string(run.state()).unwrap(),
    ));

    // check-config with the DSN in the file.
    let cfg = run.dir.path().join("with-dsn.toml");
    std::fs::write(
        &cfg,
        CONFIG.replace("[server]\n", &format!("[server]\ndsn = {dsn:?}\n")),
    )
    .unwrap();
    let out = std::process::Command::new(common::innopilot_bin())
        .args(["check-config", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    // The DSN is shown without its password (so the output still loads as a config).
    assert!(text(&out).contains("password redacted"), "{}", text(&out));
    outputs.push(("check-config".into(), text(&out)));

    // Malformed DSNs whose password holds raw `@` and `?`: the error shows none of it.
    let port = db.port();
    for bad in [
        format!("mysql://secretuser:{PW}@x?y@127.0.0.1:{port}/"),
        format!("mysql://secretuser:{PW}?y@x@127.0.0.1:{port}/"),
        format!("mysql://secretuser:{PW}@127.0.0.1:x{PW}?@h/"),
    ] {
        let out = run.command(&bad, &["status"]);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        outputs.push((format!("status --dsn {}", bad.len()), text(&out)));
    }
    // The advice innopilot gives never puts a password on a command line.
    let out = std::process::Command::new(common::innopilot_bin())
        .arg("--help")
        .output()
        .unwrap();
    outputs.push(("--help".into(), text(&out)));

    for (what, out) in &outputs {
        for fragment in [PW, "hush", "Zq9", "7Kx"] {
            assert!(!out.contains(fragment), "{what} shows `{fragment}`:\n{out}");
        }
    }
    drop(load);
    assert_eq!(knob_values(&db).await, startup);
}
