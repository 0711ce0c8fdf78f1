//! Test certificates made with the `openssl` command (as tests/support/tls.py
//! makes them for the Python suites): a CA, a server certificate for
//! `IP:127.0.0.1,DNS:localhost` and a client certificate it signed, in a
//! temporary directory removed on drop. Used by the TLS tests of this crate
//! and of crates/client-tests.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

pub(crate) struct Certs {
    dir: PathBuf,
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("running `openssl` (apt install openssl): {e}"));
    assert!(
        out.status.success(),
        "openssl {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Certs {
    /// `ca.pem`, `server.pem`/`server.key`, `client.pem`/`client.key` in a
    /// directory named after this process and `name`.
    pub(crate) fn new(name: &str) -> Certs {
        let dir = std::env::temp_dir().join(format!("osmium-certs-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let certs = Certs { dir };
        let ca = [
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "30",
            "-subj",
            "/CN=osmium-test-ca",
        ];
        openssl(&certs.dir, &ca);
        certs.signed(
            "server",
            "localhost",
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n",
        );
        certs.signed("client", "test-client", "extendedKeyUsage=clientAuth\n");
        certs
    }

    /// `name.pem` and `name.key`, signed by the CA, with these extensions.
    fn signed(&self, name: &str, cn: &str, ext: &str) {
        let (key, csr, pem, extfile) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.pem"),
            format!("{name}.ext"),
        );
        let subj = format!("/CN={cn}");
        let req = [
            "req", "-newkey", "rsa:2048", "-nodes", "-keyout", &key, "-out", &csr, "-subj", &subj,
        ];
        openssl(&self.dir, &req);
        std::fs::write(
            self.dir.join(&extfile),
            format!("basicConstraints=CA:FALSE\n{ext}"),
        )
        .unwrap();
        let sign = [
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            &pem,
            "-days",
            "30",
            "-extfile",
            &extfile,
        ];
        openssl(&self.dir, &sign);
    }

    /// The path of one of the files, e.g. `ca.pem`.
    pub(crate) fn path(&self, file: &str) -> String {
        self.dir
            .join(file)
            .to_str()
            .expect("a UTF-8 temp path")
            .into()
    }

    /// `-Z -o ssl_chain_cert=..,ssl_key=..,ssl_ca_cert=..` plus `extra`
    /// options (`ssl_verify_mode=1`, ...).
    pub(crate) fn server_args(&self, extra: &[&str]) -> Vec<String> {
        let mut opts = vec![
            format!("ssl_chain_cert={}", self.path("server.pem")),
            format!("ssl_key={}", self.path("server.key")),
            format!("ssl_ca_cert={}", self.path("ca.pem")),
        ];
        opts.extend(extra.iter().map(|o| o.to_string()));
        vec!["-Z".into(), "-o".into(), opts.join(",")]
    }
}

impl Drop for Certs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
