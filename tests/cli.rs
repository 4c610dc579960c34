//! Black-box tests of command-line hygiene: output into a closed pipe (also `watch`
//! against a private MariaDB, as `innopilot watch | head -2`), `check-config`'s TOML,
//! value lists and exit codes.

mod common;

use std::io::BufRead;
use std::os::fd::{FromRawFd, OwnedFd};
use std::process::{Command, Stdio};

use common::{innopilot_bin, MariaDb};

mod sys {
    use std::os::raw::c_int;
    extern "C" {
        pub fn pipe(fds: *mut c_int) -> c_int;
    }
}

/// A pipe whose reading end is already closed: every write to the other end fails
/// with EPIPE, deterministically (no race with a reader such as `head`).
fn closed_pipe() -> OwnedFd {
    let mut fds = [0; 2];
    // SAFETY: plain syscall wrapper writing two descriptors into `fds`.
    assert_eq!(unsafe { sys::pipe(fds.as_mut_ptr()) }, 0, "pipe(2)");
    // SAFETY: both descriptors were just created and are owned here.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(read);
    write
}

#[test]
fn output_into_a_closed_pipe_ends_quietly() {
    for args in [
        vec!["check-config"],
        vec!["man"],
        vec!["completions", "bash"],
        vec![
            "simulate",
            "--scenario",
            "long_read_view",
            "--policy",
            "mysql8_defaults",
        ],
    ] {
        let out = Command::new(innopilot_bin())
            .args(&args)
            .stdout(Stdio::from(closed_pipe()))
            .stderr(Stdio::piped())
            .output()
            .expect("running innopilot");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{args:?}: {:?}\n{stderr}", out.status);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert!(!stderr.contains("Broken pipe"), "{args:?}: {stderr}");
    }
}

/// `innopilot watch --count 5 | head -2`: the reader leaves after two lines while
/// watch still has samples to print.
#[test]
fn watch_into_head_ends_quietly() {
    let db = MariaDb::new();
    let mut child = Command::new(innopilot_bin())
        .args([
            "watch",
            "--count",
            "5",
            "--interval",
            "200ms",
            "--dsn",
            &db.dsn(),
        ])
        .env_remove("INNOPILOT_CONFIG")
        .env_remove("INNOPILOT_PASSWORD")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running innopilot watch");
    let mut reader = std::io::BufReader::new(child.stdout.take().unwrap());
    for _ in 0..2 {
        let mut line = String::new();
        assert!(
            reader.read_line(&mut line).unwrap() > 0,
            "watch ended early"
        );
    }
    // `head` exits: the reading end closes with samples still to come.
    drop(reader);
    let out = child.wait_with_output().expect("waiting for watch");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?}\n{stderr}", out.status);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(!stderr.contains("Broken pipe"), "{stderr}");
}

/// An option file holding only `!include` (the case that once fell back to
/// root@localhost:3306): the included [client] section is used, and `status --verbose`
/// names the file and line each setting came from. `-h -P -u` reach the same server.
#[test]
fn option_file_with_include_and_percona_style_flags() {
    let db = MariaDb::new();
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().join("real.cnf");
    std::fs::write(
        &real,
        format!(
            "[mysqld]\nport=1\n[client]\nuser=root\nhost=127.0.0.1\n[client-mariadb]\nport={}\n",
            db.port()
        ),
    )
    .unwrap();
    let top = dir.path().join("client.cnf");
    std::fs::write(&top, "!include real.cnf\n").unwrap();
    let run = |args: &[&str]| {
        let out = Command::new(innopilot_bin())
            .args(args)
            .env_remove("INNOPILOT_DSN")
            .env_remove("INNOPILOT_CONFIG")
            .env_remove("INNOPILOT_PASSWORD")
            .env("RUST_LOG", "warn")
            .output()
            .expect("running innopilot");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{args:?}: {stderr}");
        stdout
    };
    let out = run(&[
        "status",
        "--verbose",
        "--defaults-file",
        top.to_str().unwrap(),
    ]);
    let port = db.port().to_string();
    assert!(
        out.lines()
            .next()
            .is_some_and(|l| l.contains(&format!("root@127.0.0.1:{port}"))),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "port       from {}:7 [client-mariadb]",
            real.display()
        )),
        "{out}"
    );
    let out = run(&[
        "status",
        "-h",
        "127.0.0.1",
        "-P",
        &port,
        "-u",
        "root",
        "--verbose",
    ]);
    assert!(out.contains(&format!("root@127.0.0.1:{port}")), "{out}");
    assert!(out.contains("host       from -h/--host"), "{out}");
}

fn check_config(args: &[&str]) -> (String, String, Option<i32>) {
    let out = Command::new(innopilot_bin())
        .arg("check-config")
        .args(args)
        .env_remove("INNOPILOT_DSN")
        .env_remove("INNOPILOT_CONFIG")
        .env_remove("INNOPILOT_PASSWORD")
        .output()
        .expect("running innopilot");
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        out.status.code(),
    )
}

#[test]
fn check_config_prints_toml_that_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let given = dir.path().join("given.toml");
    std::fs::write(
        &given,
        "[sampler]\ninterval = \"2s\"\n\n[audit]\nmax_size = \"16MiB\"\n\n\
         [knobs]\ninnodb_io_capacity = { max = 5000 }\n\n[policy.flush]\nenabled = false\n",
    )
    .unwrap();
    let (stdout, stderr, code) = check_config(&[
        "--config",
        given.to_str().unwrap(),
        "--dsn",
        "mysql://innopilot:hunter2@db1:3306/",
    ]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(!stdout.contains("hunter2") && !stderr.contains("hunter2"));
    let table: toml::Table = toml::from_str(&stdout).expect("check-config prints TOML");
    // The file's own names, not the typed structure's.
    assert!(table["audit"].get("max_size").is_some(), "{stdout}");
    assert!(stdout.contains("interval = \"2s\"  # file"), "{stdout}");
    assert!(stdout.contains("window = \"10s\"  # default"), "{stdout}");
    assert!(
        stdout.contains("# flag --dsn, password redacted"),
        "{stdout}"
    );

    // Fed back, it gives the same configuration (and prints the same again).
    let printed = dir.path().join("printed.toml");
    std::fs::write(&printed, &stdout).unwrap();
    let mut original = innopilot::config::Config::load(&given).unwrap();
    original.server.dsn = Some("mysql://innopilot@db1:3306/".into());
    assert_eq!(innopilot::config::Config::load(&printed).unwrap(), original);
    let (again, stderr, code) = check_config(&["--config", printed.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{stderr}");
    let body = |s: &str| {
        s.lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| l.split("  # ").next().unwrap_or(l).to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(body(&again), body(&stdout));
}

#[test]
fn simulate_prints_a_table_unless_json_is_asked_for() {
    let run = |json: bool| {
        let mut cmd = Command::new(innopilot_bin());
        cmd.args([
            "simulate",
            "--scenario",
            "redo_pressure",
            "--policy",
            "mysql8_defaults",
        ]);
        if json {
            cmd.arg("--json");
        }
        let out = cmd.output().expect("running innopilot");
        assert!(out.status.success());
        String::from_utf8(out.stdout).unwrap()
    };
    let table = run(false);
    assert!(serde_json::from_str::<serde_json::Value>(&table).is_err());
    assert!(table.lines().any(|l| l.starts_with("flavor")), "{table}");
    let json: serde_json::Value = serde_json::from_str(&run(true)).unwrap();
    // Flavor names as a DBA writes them.
    assert_eq!(json["flavor"], "mysql80");
}

#[test]
fn unknown_scenario_lists_the_real_names() {
    let out = Command::new(innopilot_bin())
        .args(["simulate", "--scenario", "nope", "--policy", "innopilot"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("long_read_view"), "{stderr}");
}
