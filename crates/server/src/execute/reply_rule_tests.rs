//! The rule "execute decides, compose says", checked on the source: no
//! file of `execute/` writes reply bytes. Each file is read (comments left
//! out) and fails on the output's type, its methods that add or drop
//! bytes, the composers' encoders, and byte appends; the executor replies
//! through `compose::replies::Replies` with outcomes. The exceptions are
//! named in [`ALLOWED`], each with why (docs/ARCHITECTURE.md, invariant 3),
//! and an exception no longer used fails too, so the list only shrinks.

use std::path::Path;

/// What execute must not write with.
const FORBIDDEN: &[&str] = &[
    // The connection's output itself (execute sees it as `Replies`).
    "Output",
    // `Output`'s methods that add or drop bytes.
    ".buf()",
    ".truncate(",
    ".put_value(",
    ".release_uncommitted(",
    ".drain_front(",
    ".discard_refs(",
    ".sent_queue(",
    ".commit()",
    // The composers' encoders, and the one entry past `Replies`.
    "compose::write(",
    "text::line(",
    "text::number(",
    "text::end(",
    "text::value(",
    "text::outcome(",
    "text::stat_rows(",
    "binary::hit(",
    "binary::miss(",
    "binary::ok(",
    "binary::always(",
    "binary::error(",
    "binary::outcome(",
    "binary::stats(",
    "meta::",
    "encode::",
    "format::",
    "dump_stream(",
    // Bytes appended by hand.
    "extend_from_slice(",
    "write!(",
];

/// (file, forbidden text it may use, why).
const ALLOWED: &[(&str, &str, &str)] = &[
    (
        "dump.rs",
        "Output",
        "the key dumps stream as the socket drains, in their own formats",
    ),
    (
        "dump.rs",
        "format::",
        "the key dumps' formats (compose::dump), written item by item",
    ),
    (
        "stats.rs",
        "dump_stream(",
        "stats cachedump is a key dump (dump::cachedump)",
    ),
    (
        "watch.rs",
        "extend_from_slice(",
        "log lines for watchers (handed to the logger), not replies",
    ),
];

/// This file names what it forbids.
const SELF: &str = "reply_rule_tests.rs";

/// The file's code without its comments.
fn code(text: &str) -> String {
    text.lines()
        .map(|l| l.split("//").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn execute_writes_no_reply_bytes() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/execute");
    let mut broken = Vec::new();
    let mut used = vec![false; ALLOWED.len()];
    let mut files = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !name.ends_with(".rs") || name == SELF {
            continue;
        }
        files += 1;
        let code = code(&std::fs::read_to_string(&path).unwrap());
        for (n, line) in code.lines().enumerate() {
            for &bad in FORBIDDEN {
                if !line.contains(bad) {
                    continue;
                }
                match ALLOWED
                    .iter()
                    .position(|&(file, text, _)| file == name && text == bad)
                {
                    Some(i) => used[i] = true,
                    None => broken.push(format!("{name}:{}: {bad}: {}", n + 1, line.trim())),
                }
            }
        }
    }
    assert!(files > 10, "read {files} files of {}", dir.display());
    assert!(
        broken.is_empty(),
        "execute/ writes reply bytes (say an Outcome through Replies instead):\n{}",
        broken.join("\n")
    );
    for (i, &(file, text, why)) in ALLOWED.iter().enumerate() {
        assert!(
            used[i],
            "the exception ({file}, {text}: {why}) is no longer used: remove it"
        );
    }
}

#[test]
fn comments_are_left_out() {
    assert_eq!(code("a // text::line(\n/// Output\nb"), "a \n\nb");
}
