//! `osmium-proxy -t` over the YAML files of `tests/data/nutcracker/`:
//! twemproxy's example layouts (its `conf/nutcracker*.yml` shapes, for
//! memcached pools) are accepted; the files named `bad-*` are refused
//! with nutcracker's first line ("configuration file '...' syntax is
//! invalid") and the reason; the `edge-*` files pin what the YAML reader
//! makes of YAML's own forms (capitalised booleans, hex integers,
//! aliases). Each file's first line says what it holds. A file added
//! to the folder must be added to the table below.

use std::path::{Path, PathBuf};
use std::process::Command;

/// How `-t` ends for a file.
enum Expect {
    /// "syntax is ok", exit 0.
    Ok,
    /// "syntax is invalid", exit 1, the reason containing this text.
    Invalid(&'static str),
    /// The file parses, but `-t`'s check of the files it names fails:
    /// "is invalid", exit 1, the reason containing this text.
    Unusable(&'static str),
}

use Expect::*;

const CASES: &[(&str, Expect)] = &[
    ("nutcracker.yml", Ok),
    ("leaf.yml", Ok),
    ("root.yml", Ok),
    ("every-directive.yml", Ok),
    ("osmium-keys.yml", Ok),
    ("edge-capital-true.yml", Ok),
    ("edge-hex-timeout.yml", Ok),
    ("edge-alias.yml", Ok),
    ("edge-numeric-pool-name.yml", Ok),
    ("edge-comments-and-blank-lines.yml", Ok),
    ("redis-pools.yml", Invalid("redis pools are not supported")),
    ("bad-syntax.yml", Invalid("conf: invalid yaml: ")),
    ("bad-tab-indent.yml", Invalid("conf: invalid yaml: ")),
    (
        "bad-duplicate-directive.yml",
        Invalid("conf: invalid yaml: p: duplicate entry with key \"timeout\""),
    ),
    (
        "bad-duplicate-pool.yml",
        Invalid("conf: invalid yaml: duplicate entry with key \"p\""),
    ),
    (
        "bad-same-listen.yml",
        Invalid("have the same listen address"),
    ),
    (
        "bad-yes-boolean.yml",
        Invalid("is not \"true\" or \"false\""),
    ),
    (
        "bad-on-boolean.yml",
        Invalid("is not \"true\" or \"false\""),
    ),
    (
        "bad-unknown-directive.yml",
        Invalid("\"timeuot\" is unknown"),
    ),
    ("bad-zero-weight.yml", Invalid("zero weight")),
    (
        "bad-no-weight.yml",
        Invalid("invalid \"hostname:port:weight [name]\""),
    ),
    ("bad-port.yml", Invalid("invalid port")),
    (
        "bad-duplicate-server-name.yml",
        Invalid("same name '127.0.0.1'"),
    ),
    ("bad-negative-timeout.yml", Invalid("is not a number")),
    ("bad-float-timeout.yml", Invalid("is not a number")),
    ("bad-no-listen.yml", Invalid("\"listen:\" is missing")),
    ("bad-no-servers.yml", Invalid("has no servers")),
    ("bad-empty-servers.yml", Invalid("has no servers")),
    ("bad-servers-mapping.yml", Invalid("must be a sequence")),
    (
        "bad-pool-scalar.yml",
        Invalid("must be a mapping of directives"),
    ),
    ("bad-root-sequence.yml", Invalid("mapping of pool names")),
    ("bad-empty.yml", Invalid("mapping of pool names")),
    (
        "bad-two-documents.yml",
        Invalid("more than one document is not supported"),
    ),
    ("bad-hash-tag.yml", Invalid("two characters")),
    ("bad-redis-auth.yml", Invalid("is for redis pools")),
    ("bad-merge-key.yml", Invalid("\"<<\" must be a scalar")),
    (
        "bad-non-scalar-value.yml",
        Invalid("\"timeout\" must be a scalar"),
    ),
    ("bad-alias-servers.yml", Invalid("same name '127.0.0.1'")),
    (
        "bad-tls-key.yml",
        Invalid("\"tls.listen.verify\" is unknown"),
    ),
    ("bad-tls-files.yml", Unusable("/nonexistent/osmium-ca.pem")),
];

fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/nutcracker")
}

#[test]
fn every_file_is_in_the_table() {
    let mut files: Vec<String> = std::fs::read_dir(data_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yml"))
        .collect();
    files.sort();
    let mut listed: Vec<String> = CASES.iter().map(|(f, _)| f.to_string()).collect();
    listed.sort();
    assert_eq!(files, listed);
}

#[test]
fn test_conf_reads_the_examples_as_before() {
    let mut wrong = Vec::new();
    for (file, expect) in CASES {
        let path = data_dir().join(file);
        let out = Command::new(env!("CARGO_BIN_EXE_osmium-proxy"))
            .args(["-t", "-c", path.to_str().unwrap()])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        let first = format!("osmium-proxy: configuration file '{}' ", path.display());
        let (code, head, reason) = match expect {
            Ok => (0, "syntax is ok", ""),
            Invalid(r) => (1, "syntax is invalid", *r),
            Unusable(r) => (1, "is invalid", *r),
        };
        let good = out.status.code() == Some(code)
            && text.starts_with(&format!("{first}{head}\n"))
            && text.contains(reason);
        if !good {
            wrong.push(format!("{file}: {:?}\n{text}", out.status.code()));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
