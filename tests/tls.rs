//! TLS against a private MariaDB started with certificates made by the test: the
//! verifying modes connect and `status` says the connection is encrypted; a server
//! certificate from another CA is refused; a client certificate (`REQUIRE X509`)
//! works through ssl-cert/ssl-key, from the DSN, the configuration or a defaults file.

mod common;

use std::process::Output;

use common::run::innopilot_isolated;
use common::tls::TestPki;
use common::MariaDb;

fn innopilot(args: &[&str]) -> Output {
    innopilot_isolated(args)
}

fn status_json(args: &[&str]) -> serde_json::Value {
    let mut all = vec!["status", "--json"];
    all.extend_from_slice(args);
    let out = innopilot(&all);
    assert!(
        out.status.success(),
        "status {args:?}: {:?}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("status --json is JSON")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_modes_against_a_tls_server() {
    let pki = TestPki::new();
    let db = MariaDb::builder()
        .args(pki.server_args())
        // Plain-text connections over TCP are refused by the server itself.
        .arg("--require-secure-transport=ON")
        .start();
    let ca = pki.path("ca.pem");
    let ca = ca.to_str().unwrap();
    let base = format!("mysql://root@127.0.0.1:{}/", db.port());

    // verify-identity: the CA and the name (IP SAN 127.0.0.1) are checked.
    let dsn = format!("{base}?ssl-mode=verify-identity&ssl-ca={ca}");
    let v = status_json(&["--dsn", &dsn]);
    assert_eq!(v["connection"]["encrypted"], true, "{}", v["connection"]);
    assert_eq!(v["connection"]["ssl_mode"], "verify-identity");
    assert!(
        v["connection"]["tls_cipher"]
            .as_str()
            .is_some_and(|c| !c.is_empty()),
        "{}",
        v["connection"]
    );

    // A CA alone means verify-ca.
    let v = status_json(&["--dsn", &format!("{base}?ssl-ca={ca}")]);
    assert_eq!(v["connection"]["ssl_mode"], "verify-ca");
    assert_eq!(v["connection"]["encrypted"], true);

    // The default (preferred) uses TLS when offered, and the text output says so.
    let out = innopilot(&["status", "--dsn", &base]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.lines()
            .next()
            .is_some_and(|l| l.starts_with("connection") && l.contains("over TLS")),
        "{text}"
    );

    // ssl-mode from the configuration file, the CA from a defaults file.
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("innopilot.toml");
    std::fs::write(&cfg, "[server]\nssl_mode = \"verify-ca\"\n").unwrap();
    let cnf = dir.path().join("client.cnf");
    std::fs::write(
        &cnf,
        format!(
            "[client]\nuser=root\nhost=127.0.0.1\nport={}\nssl-ca={ca}\n",
            db.port()
        ),
    )
    .unwrap();
    let v = status_json(&[
        "--config",
        cfg.to_str().unwrap(),
        "--defaults-file",
        cnf.to_str().unwrap(),
    ]);
    assert_eq!(v["connection"]["ssl_mode"], "verify-ca");
    assert_eq!(v["connection"]["encrypted"], true);

    // A server certificate from another CA is refused, with a clear error.
    let other = pki.other_ca();
    let dsn = format!(
        "{base}?ssl-mode=verify-ca&ssl-ca={}",
        other.to_str().unwrap()
    );
    let out = innopilot(&["status", "--dsn", &dsn]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.to_lowercase().contains("certificate") || stderr.contains("tls"),
        "{stderr}"
    );

    // TLS refused by us, required by the server: the server says no.
    let out = innopilot(&["status", "--dsn", &format!("{base}?ssl-mode=disabled")]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // A client certificate, for an account that requires one; the password stays out
    // of every message.
    db.exec("CREATE USER 'x509'@'127.0.0.1' IDENTIFIED BY 'cl13nt-pw' REQUIRE X509; GRANT PROCESS, REPLICATION CLIENT ON *.* TO 'x509'@'127.0.0.1';")
        .await;
    let cert = pki.path("client.pem");
    let key = pki.path("client-key.pem");
    let x509 = format!(
        "mysql://x509:cl13nt-pw@127.0.0.1:{}/?ssl-mode=verify-identity&ssl-ca={ca}",
        db.port()
    );
    let with_cert = format!(
        "{x509}&ssl-cert={}&ssl-key={}",
        cert.display(),
        key.display()
    );
    let v = status_json(&["--dsn", &with_cert]);
    assert_eq!(v["connection"]["encrypted"], true);
    let out = innopilot(&["status", "--dsn", &x509]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("cl13nt-pw"), "{stderr}");

    // A certificate without its key is refused before connecting (exit 2).
    let out = innopilot(&[
        "status",
        "--dsn",
        &format!("{x509}&ssl-cert={}", cert.display()),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("ssl-key"), "{stderr}");
    assert!(!stderr.contains("cl13nt-pw"), "{stderr}");
}
