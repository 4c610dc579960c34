//! The datadir template and the MariaDB binaries: finding `mariadbd` and
//! `mariadb-install-db` (or panicking with [`SETUP_HINT`]), installing a pristine datadir
//! once per server version, redo log size and [`TEMPLATE_REVISION`] under
//! `$CARGO_TARGET_TMPDIR`, copying it for each server, and removing what killed test
//! processes left behind.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::server::sys;

/// What a failing test says when the MariaDB binaries are not installed.
pub const SETUP_HINT: &str = "run scripts/setup.sh (installs Debian's mariadb-server and sysbench)";

/// Bump when the template's contents change (install flags, cleanup SQL).
pub const TEMPLATE_REVISION: u32 = 2;

/// Runs after the system tables are filled in, in bootstrap mode.
const TEMPLATE_CLEANUP_SQL: &str = "\
DELETE FROM mysql.global_priv WHERE User = '';
DELETE FROM mysql.global_priv WHERE User = 'root' AND Host NOT IN ('localhost', '127.0.0.1', '::1');
DELETE FROM mysql.proxies_priv WHERE Host NOT IN ('localhost', '127.0.0.1', '::1');
DELETE FROM mysql.db WHERE User = 'PUBLIC';
";

fn find_binary(name: &str) -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    // Non-root users often lack the sbin directories in PATH; mariadbd lives in /usr/sbin.
    for d in [
        "/usr/local/sbin",
        "/usr/local/bin",
        "/usr/sbin",
        "/usr/bin",
        "/sbin",
        "/bin",
    ] {
        dirs.push(PathBuf::from(d));
    }
    dirs.into_iter().map(|d| d.join(name)).find(|p| {
        use std::os::unix::fs::PermissionsExt;
        p.metadata()
            .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false)
    })
}

/// Finds an executable on PATH (plus the sbin directories) or panics with [`SETUP_HINT`].
pub fn required_binary(name: &str) -> PathBuf {
    find_binary(name).unwrap_or_else(|| {
        panic!("`{name}` was not found on PATH nor in /usr/sbin, /usr/bin: {SETUP_HINT}")
    })
}

fn mariadbd_version(mariadbd: &Path) -> String {
    let out = Command::new(mariadbd)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "running `{} --version`: {e}; {SETUP_HINT}",
                mariadbd.display()
            )
        });
    assert!(
        out.status.success(),
        "`{} --version` failed: {}; {SETUP_HINT}",
        mariadbd.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

pub(super) fn stable_hash(parts: &[&str]) -> u64 {
    // FNV-1a: stable across runs and toolchains, unlike DefaultHasher's promise.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for b in p.bytes().chain(std::iter::once(0u8)) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

pub(super) fn unique_suffix() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{}-{nanos}", std::process::id())
}

/// A pristine datadir for `log_file_size`, installed once and shared (read-only) by all
/// servers of all test processes of this target directory.
pub(super) fn template_datadir(mariadbd: &Path, log_file_size: &str) -> PathBuf {
    static TEMPLATES: OnceLock<Mutex<HashMap<String, PathBuf>>> = OnceLock::new();
    let mut cache = TEMPLATES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some(p) = cache.get(log_file_size) {
        return p.clone();
    }

    if cache.is_empty() {
        remove_abandoned_server_dirs();
    }
    let install_db = required_binary("mariadb-install-db");
    let version = mariadbd_version(mariadbd);
    let key = stable_hash(&[
        &version,
        &mariadbd.to_string_lossy(),
        &install_db.to_string_lossy(),
        log_file_size,
        &TEMPLATE_REVISION.to_string(),
        if sys::is_root() { "root" } else { "user" },
    ]);
    let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("innopilot-mariadb-templates");
    std::fs::create_dir_all(&root).unwrap_or_else(|e| panic!("creating {}: {e}", root.display()));
    let final_dir = root.join(format!("{key:016x}"));
    if !final_dir.join("data").is_dir() {
        install_template(&install_db, &root, &final_dir, log_file_size, &version);
    }
    cache.insert(log_file_size.to_string(), final_dir.join("data"));
    final_dir.join("data")
}

fn install_template(
    install_db: &Path,
    root: &Path,
    final_dir: &Path,
    log_file_size: &str,
    version: &str,
) {
    // Install next to the final place, then rename: the final directory only ever
    // appears complete, even with several test processes racing.
    remove_stale_work_dirs(root);
    let work = root.join(format!("tmp-{}", unique_suffix()));
    std::fs::create_dir_all(&work).unwrap_or_else(|e| panic!("creating {}: {e}", work.display()));
    let sql = work.join("cleanup.sql");
    std::fs::write(&sql, TEMPLATE_CLEANUP_SQL).expect("writing template cleanup SQL");
    std::fs::write(
        work.join("VERSION"),
        format!("{version}\nlog_file_size={log_file_size}\n"),
    )
    .expect("writing template VERSION");
    let data = work.join("data");
    // A private tmpdir: at startup every mariadbd deletes all `#sql*` files in its
    // tmpdir, so a bootstrap using /tmp loses its temporary tables whenever another
    // server (another test, another developer's scratch server) starts meanwhile.
    let tmpdir = work.join("tmp");
    std::fs::create_dir_all(&tmpdir).expect("creating the bootstrap tmpdir");

    let mut cmd = Command::new(install_db);
    cmd.arg("--no-defaults")
        // --force: skip `resolveip $(hostname)`, which fails or hangs on hosts without DNS.
        .arg("--force")
        .arg("--auth-root-authentication-method=normal")
        .arg(format!("--datadir={}", data.display()))
        .arg(format!("--innodb-log-file-size={log_file_size}"))
        .arg(format!("--extra-file={}", sql.display()))
        .arg(format!("--tmpdir={}", tmpdir.display()));
    if sys::is_root() {
        cmd.arg("--user=root");
    }
    let started = Instant::now();
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}; {SETUP_HINT}", install_db.display()));
    if !out.status.success() {
        let _ = std::fs::remove_dir_all(&work);
        panic!(
            "mariadb-install-db failed ({}) after {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            out.status,
            started.elapsed(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let _ = std::fs::remove_dir_all(&tmpdir);
    match std::fs::rename(&work, final_dir) {
        Ok(()) => {}
        // Another process won the race: use its template.
        Err(_) if final_dir.join("data").is_dir() => {
            let _ = std::fs::remove_dir_all(&work);
        }
        Err(e) => panic!(
            "renaming {} to {}: {e}",
            work.display(),
            final_dir.display()
        ),
    }
}

/// Leftovers of installs whose process died (an install takes seconds).
fn remove_stale_work_dirs(root: &Path) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for e in entries.flatten() {
        let old = older_than(&e, Duration::from_secs(600));
        if old && e.file_name().to_string_lossy().starts_with("tmp-") {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// Whether `e` was last modified more than `age` ago (unknown ages are young: keep).
fn older_than(e: &std::fs::DirEntry, age: Duration) -> bool {
    e.metadata()
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .is_some_and(|a| a > age)
}

pub(super) const SERVER_DIR_PREFIX: &str = "innopilot-mdb-";

/// Directories of servers whose test process was killed (SIGKILL skips `Drop`; the
/// server itself dies with it through PR_SET_PDEATHSIG): older than an hour and no
/// live mariadbd behind their pid file.
fn remove_abandoned_server_dirs() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for e in entries.flatten() {
        if !e
            .file_name()
            .to_string_lossy()
            .starts_with(SERVER_DIR_PREFIX)
        {
            continue;
        }
        let old = older_than(&e, Duration::from_secs(3600));
        let live = std::fs::read_to_string(e.path().join("mysqld.pid"))
            .ok()
            .and_then(|p| p.trim().parse::<u32>().ok())
            .is_some_and(|pid| Path::new(&format!("/proc/{pid}")).exists());
        if old && !live {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

pub(super) fn copy_dir(from: &Path, to: &Path) {
    let out = Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("running cp: {e}"));
    assert!(
        out.status.success(),
        "cp -a {} {} failed: {}",
        from.display(),
        to.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}
