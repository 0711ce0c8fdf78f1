//! The key dumps operators' tools use, over real sockets, against osmium and
//! genuine memcached 1.6.45 alike: `lru_crawler metadump` and `mgdump` list
//! every live item in memcached's formats, `stats cachedump` lists the
//! items with text keys, and libmemcached's `memcdump` lists the keys.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common;
use osmium_test_harness::Running;

fn servers() -> Vec<(&'static str, PathBuf)> {
    let mut out = vec![("osmium", PathBuf::from(env!("CARGO_BIN_EXE_osmium")))];
    if let Some(bin) = common::memcached_bin() {
        out.push(("memcached", bin));
    }
    out
}

fn start(bin: &Path) -> Running {
    common::osmium().bin(bin).start()
}

fn read_until(s: &mut TcpStream, end: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = [0u8; 65536];
    while !out.ends_with(end) {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) => panic!("read failed after {:?}: {e}", String::from_utf8_lossy(&out)),
        }
    }
    out
}

/// Stores `n` items `key<i>` (flags i, the even ones with a TTL), one
/// binary key, and one item that expires at once.
fn fill(c: &mut TcpStream, n: usize) {
    for i in 0..n {
        let ttl = if i % 2 == 0 { 1000 } else { 0 };
        c.write_all(format!("set key{i} {i} {ttl} 5 noreply\r\nhello\r\n").as_bytes())
            .unwrap();
    }
    c.write_all(b"ms Zm9vYmFy 2 b q\r\nhi\r\n").unwrap();
    c.write_all(b"set gone 0 -1 1 noreply\r\nx\r\nmn\r\n")
        .unwrap();
    read_until(c, b"MN\r\n");
}

#[test]
fn metadump_and_mgdump_list_every_live_item() {
    for (kind, bin) in servers() {
        let srv = start(&bin);
        let mut c = srv.connect();
        fill(&mut c, 300);
        c.write_all(b"lru_crawler metadump all\r\n").unwrap();
        let dump = String::from_utf8(read_until(&mut c, b"END\r\n")).unwrap();
        let body = dump
            .strip_prefix("OK\r\n")
            .unwrap_or_else(|| panic!("{kind}: {dump:?}"));
        let mut keys = BTreeSet::new();
        for line in body.strip_suffix("END\r\n").unwrap().lines() {
            // key=<k> exp=<t|-1> la=<t> cas=<n> fetch=<yes|no> cls=<n> size=<n> flags=<n>
            let fields: Vec<&str> = line.split(' ').filter(|f| !f.is_empty()).collect();
            let names: Vec<&str> = fields
                .iter()
                .map(|f| f.split('=').next().unwrap())
                .collect();
            assert_eq!(
                names,
                ["key", "exp", "la", "cas", "fetch", "cls", "size", "flags"],
                "{kind}: {line}"
            );
            assert!(line.ends_with(' '), "{kind}: {line:?}");
            let key = fields[0].strip_prefix("key=").unwrap().to_string();
            if let Some(i) = key
                .strip_prefix("key")
                .and_then(|i| i.parse::<usize>().ok())
            {
                assert_eq!(fields[7], format!("flags={i}"), "{kind}");
                assert_eq!(fields[1] == "exp=-1", i % 2 == 1, "{kind}: {line}");
                // memcached's item size: header, key, flags, value and CAS.
                let size = 48 + key.len() + 1 + if i == 0 { 0 } else { 4 } + 5 + 2 + 8;
                assert_eq!(fields[6], format!("size={size}"), "{kind}: {line}");
            }
            assert!(keys.insert(key), "{kind}: a key listed twice");
        }
        let mut want: BTreeSet<String> = (0..300).map(|i| format!("key{i}")).collect();
        want.insert("foobar".into());
        assert_eq!(keys, want, "{kind}: metadump");

        c.write_all(b"lru_crawler mgdump all\r\n").unwrap();
        let dump = String::from_utf8(read_until(&mut c, b"EN\r\n")).unwrap();
        let got: BTreeSet<&str> = dump
            .strip_prefix("OK\r\n")
            .unwrap()
            .strip_suffix("EN\r\n")
            .unwrap()
            .lines()
            .collect();
        let mut want: BTreeSet<String> = (0..300).map(|i| format!("mg key{i}")).collect();
        want.insert("mg Zm9vYmFy b".into());
        let want: BTreeSet<&str> = want.iter().map(String::as_str).collect();
        assert_eq!(got, want, "{kind}: mgdump");

        // The connection goes on after a dump; a dump behind queued replies
        // is refused.
        c.write_all(b"version\r\nlru_crawler metadump all\r\n")
            .unwrap();
        let reply = String::from_utf8(read_until(
            &mut c,
            b"ERROR cannot pipeline other commands before metadump\r\n",
        ))
        .unwrap();
        assert!(reply.starts_with("VERSION "), "{kind}: {reply:?}");
    }
}

#[test]
fn cachedump_lists_items_with_text_keys() {
    for (kind, bin) in servers() {
        let srv = start(&bin);
        let mut c = srv.connect();
        fill(&mut c, 50);
        c.write_all(b"stats cachedump 1 0\r\n").unwrap();
        let dump = String::from_utf8(read_until(&mut c, b"END\r\n")).unwrap();
        let mut keys = BTreeSet::new();
        for line in dump.strip_suffix("END\r\n").unwrap().lines() {
            // ITEM <key> [<bytes> b; <exptime> s]
            let rest = line
                .strip_prefix("ITEM ")
                .unwrap_or_else(|| panic!("{kind}: {line}"));
            let (key, meta) = rest.split_once(' ').unwrap();
            assert!(
                meta.starts_with("[5 b; ") && meta.ends_with(" s]"),
                "{kind}: {line}"
            );
            keys.insert(key.to_string());
        }
        let want: BTreeSet<String> = (0..50).map(|i| format!("key{i}")).collect();
        // memcached lists only its cold LRU's items (those that left the hot
        // LRU); osmium's cache is one class and lists them all.
        if kind == "osmium" {
            assert_eq!(keys, want, "{kind}");
        } else {
            // (Possibly none yet: memcached moves them in the background.)
            assert!(keys.is_subset(&want), "{kind}: {keys:?}");
        }
        assert!(!keys.contains("foobar"), "{kind}: binary keys are left out");
        c.write_all(b"stats cachedump 64 0\r\nstats cachedump 1\r\n")
            .unwrap();
        assert_eq!(
            read_until(&mut c, b"CLIENT_ERROR bad command line\r\n"),
            b"CLIENT_ERROR Illegal slab id\r\nCLIENT_ERROR bad command line\r\n",
            "{kind}"
        );
    }
}

#[test]
fn memcdump_lists_the_keys() {
    if Command::new("memcdump").arg("--version").output().is_err() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "memcdump (libmemcached-tools) is not installed"
        );
        eprintln!("SKIP: memcdump (libmemcached-tools) is not installed");
        return;
    }
    for (kind, bin) in servers() {
        let srv = start(&bin);
        let mut c = srv.connect();
        fill(&mut c, 200);
        let out = Command::new("memcdump")
            .arg(format!("--servers=127.0.0.1:{}", srv.port()))
            .output()
            .unwrap();
        let listed: BTreeSet<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .collect();
        let want: BTreeSet<String> = (0..200).map(|i| format!("key{i}")).collect();
        // memcdump reads `stats cachedump`: memcached lists the items of its
        // cold LRUs only, osmium every item with a text key.
        if kind == "osmium" {
            assert_eq!(listed, want, "{kind}");
        } else {
            assert!(
                listed.is_subset(&want),
                "{kind}: memcdump listed {listed:?}"
            );
        }
    }
}
