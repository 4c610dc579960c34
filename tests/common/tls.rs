//! Certificates for a TLS-enabled private server, made by the test with the `openssl`
//! command (a CA, a server certificate for 127.0.0.1 and localhost, a client
//! certificate), and the `mariadbd` arguments that use them.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::required_binary;

/// A CA and the certificates it signed, in a temporary directory.
pub struct TestPki {
    dir: tempfile::TempDir,
}

impl TestPki {
    /// Makes a fresh CA, a server certificate (SAN: IP 127.0.0.1, DNS localhost) and a
    /// client certificate. Panics with openssl's output if any step fails.
    pub fn new() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("innopilot-pki-")
            .tempdir()
            .expect("creating a directory for test certificates");
        let pki = TestPki { dir };
        pki.ca("ca");
        pki.signed(
            "server",
            "localhost",
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
        );
        pki.signed(
            "client",
            "innopilot-client",
            "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n",
        );
        pki
    }

    /// `name.pem` (certificate) or `name-key.pem` under the directory.
    pub fn path(&self, file: &str) -> PathBuf {
        self.dir.path().join(file)
    }

    /// A second, unrelated CA (a server certificate it did not sign must be refused).
    pub fn other_ca(&self) -> PathBuf {
        self.ca("other-ca");
        self.path("other-ca.pem")
    }

    /// `mariadbd` arguments for TLS with this PKI.
    pub fn server_args(&self) -> Vec<String> {
        vec![
            format!("--ssl-ca={}", self.path("ca.pem").display()),
            format!("--ssl-cert={}", self.path("server.pem").display()),
            format!("--ssl-key={}", self.path("server-key.pem").display()),
        ]
    }

    fn openssl(&self, args: &[&str]) {
        let out = Command::new(required_binary("openssl"))
            .args(args)
            .current_dir(self.dir.path())
            .output()
            .expect("running openssl");
        assert!(
            out.status.success(),
            "openssl {args:?} failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn ca(&self, name: &str) {
        let key = format!("{name}-key.pem");
        let cert = format!("{name}.pem");
        self.openssl(&[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            &format!("/CN=innopilot test {name}"),
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
            "-keyout",
            &key,
            "-out",
            &cert,
        ]);
    }

    fn signed(&self, name: &str, cn: &str, extensions: &str) {
        let ext = format!("{name}.ext");
        std::fs::write(self.dir.path().join(&ext), extensions).expect("writing extensions");
        self.openssl(&[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            &format!("/CN={cn}"),
            "-keyout",
            &format!("{name}-key.pem"),
            "-out",
            &format!("{name}.csr"),
        ]);
        self.openssl(&[
            "x509",
            "-req",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca-key.pem",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            &ext,
            "-out",
            &format!("{name}.pem"),
        ]);
    }

    #[allow(dead_code)]
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}
