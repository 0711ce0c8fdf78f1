//! osmium's key filter on `lru_crawler mgdump` / `metadump`
//! (`keyhash=<fn> [tag=<t>] ranges=<lo>-<hi>,...` or `modula=<n>:<i>,...`)
//! over real sockets: a filtered dump lists exactly the keys whose hash
//! (computed here with osmium-placement) is selected, RAM and flash items
//! alike; bad filters are answered `CLIENT_ERROR bad dump filter` and the
//! connection goes on; genuine memcached 1.6.45 answers a filtered line
//! `ERROR` and goes on too (what a caller falls back on).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use osmium_placement::filter::{filter_commands, DumpFilter, MAX_SELECTORS};
use osmium_placement::hash::{tagged, HashKind};

use crate::common;
use common::tcp::LineClient as Client;
use osmium_test_harness::Running;

const OSMIUM: &str = env!("CARGO_BIN_EXE_osmium");

fn start(bin: &Path, extra: &[&str]) -> Running {
    common::osmium().bin(bin).args(extra).start()
}

impl Client {
    /// Sends `line`; the keys of its `mg` dump (`OK`, `mg <key>`..., `EN`),
    /// base64 keys decoded.
    fn mgdump(&mut self, line: &str) -> Vec<Vec<u8>> {
        self.send(line.as_bytes());
        assert_eq!(self.line(), "OK\r\n", "{line}");
        let mut keys = Vec::new();
        loop {
            let l = self.line();
            if l == "EN\r\n" {
                return keys;
            }
            let f: Vec<&str> = l.trim_end().split(' ').collect();
            assert_eq!(f[0], "mg", "{l:?}");
            keys.push(if f.get(2) == Some(&"b") {
                base64_decode(f[1])
            } else {
                f[1].as_bytes().to_vec()
            });
        }
    }

    fn version(&mut self) {
        self.send(b"version\r\n");
        assert!(self.line().starts_with("VERSION "));
    }
}

fn base64_decode(s: &str) -> Vec<u8> {
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = Vec::new();
    let (mut acc, mut bits) = (0u32, 0);
    for c in s.bytes().filter(|&c| c != b'=') {
        acc = (acc << 6) | A.iter().position(|&a| a == c).unwrap() as u32;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    out
}

/// The keys stored by [`fill`]: plain ones, hash-tagged ones (several
/// sharing a tag), and one binary key.
fn keys(n: usize) -> Vec<Vec<u8>> {
    let mut k: Vec<Vec<u8>> = (0..n)
        .map(|i| {
            if i % 3 == 0 {
                format!("user:{{{}}}:field{i}", i % 37).into_bytes()
            } else {
                format!("key{i}").into_bytes()
            }
        })
        .collect();
    k.push(b"bin\x00\xff\x80key".to_vec());
    k
}

fn fill(c: &mut Client, keys: &[Vec<u8>], value_len: usize) {
    let value = vec![b'v'; value_len];
    for key in keys {
        let mut req = if key.iter().all(|b| b.is_ascii_graphic()) {
            format!("ms {} {} q\r\n", String::from_utf8_lossy(key), value_len).into_bytes()
        } else {
            format!("ms {} {} b q\r\n", base64_encode(key), value_len).into_bytes()
        };
        req.extend_from_slice(&value);
        req.extend_from_slice(b"\r\n");
        c.send(&req);
    }
    c.send(b"mn\r\n");
    assert_eq!(c.line(), "MN\r\n");
}

/// metadump's URL encoding of a key undone.
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            out.push(u8::from_str_radix(&s[i + 1..i + 3], 16).unwrap());
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).unwrap()
}

fn base64_encode(data: &[u8]) -> String {
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut s = String::new();
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (b[0] as u32) << 16 | (b[1] as u32) << 8 | b[2] as u32;
        for i in 0..4 {
            if i <= chunk.len() {
                s.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                s.push('=');
            }
        }
    }
    s
}

/// A small xorshift for ranges that differ from run to run of the loop.
fn next(x: &mut u64) -> u32 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    (*x >> 32) as u32
}

/// The keys of `keys` whose `hash` of their `tag` part lies in `spans`.
fn expected(
    keys: &[Vec<u8>],
    spans: &[(u32, u32)],
    hash: HashKind,
    tag: Option<[u8; 2]>,
) -> BTreeSet<Vec<u8>> {
    keys.iter()
        .filter(|k| {
            let h = hash.hash(tagged(k, tag));
            spans.iter().any(|&(lo, hi)| (lo..=hi).contains(&h))
        })
        .cloned()
        .collect()
}

/// Runs the filtered dumps of `spans` (as many commands as it takes) and
/// checks they list exactly the expected keys, each once.
fn check_spans(
    c: &mut Client,
    keys: &[Vec<u8>],
    spans: &[(u32, u32)],
    hash: HashKind,
    tag: Option<[u8; 2]>,
) {
    let want = expected(keys, spans, hash, tag);
    let mut got = BTreeSet::new();
    for line in filter_commands(spans.iter().copied(), hash, tag) {
        for key in c.mgdump(&line) {
            assert!(
                got.insert(key.clone()),
                "{:?} listed twice",
                String::from_utf8_lossy(&key)
            );
        }
    }
    assert_eq!(got, want, "{hash:?} {tag:?} {} spans", spans.len());
}

#[test]
fn a_filtered_mgdump_lists_exactly_the_keys_in_its_ranges() {
    let srv = start(Path::new(OSMIUM), &[]);
    let mut c = Client::to(&srv);
    let keys = keys(3000);
    fill(&mut c, &keys, 10);
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for (hash, tag) in [
        (HashKind::Fnv1a64, Some(*b"{}")),
        (HashKind::Md5, None),
        (HashKind::Murmur, Some(*b"{}")),
        (HashKind::OneAtATime, None),
        (HashKind::Crc32a, Some(*b":d")),
    ] {
        // A few wide ranges, then many narrow ones (several commands).
        for count in [1usize, 5, MAX_SELECTORS * 2 + 7] {
            let width = u32::MAX / (count as u32 * 3);
            let spans: Vec<(u32, u32)> = (0..count)
                .map(|_| {
                    let lo = next(&mut seed);
                    (lo, lo.saturating_add(width))
                })
                .collect();
            check_spans(&mut c, &keys, &spans, hash, tag);
        }
    }
    // The whole hash space is every key; an empty range none.
    let all: BTreeSet<Vec<u8>> = keys.iter().cloned().collect();
    let every = c.mgdump("lru_crawler mgdump hash keyhash=md5 ranges=0-0xffffffff\r\n");
    assert_eq!(every.into_iter().collect::<BTreeSet<_>>(), all);
    let h = HashKind::Md5.hash(b"key1");
    let one = c.mgdump(&format!(
        "lru_crawler mgdump all keyhash=md5 ranges={h}-{h}\r\n"
    ));
    assert!(one.contains(&b"key1".to_vec()), "{one:?}");

    // modula: the keys whose hash modulo n is one of the picks.
    for (n, picks) in [(5u32, vec![0u32]), (7, vec![1, 3, 6]), (1, vec![0])] {
        let list: Vec<String> = picks.iter().map(u32::to_string).collect();
        let line = format!(
            "lru_crawler mgdump hash keyhash=fnv1a_64 tag={{}} modula={n}:{}\r\n",
            list.join(",")
        );
        let got: BTreeSet<Vec<u8>> = c.mgdump(&line).into_iter().collect();
        let want: BTreeSet<Vec<u8>> = keys
            .iter()
            .filter(|k| picks.contains(&(HashKind::Fnv1a64.hash(tagged(k, Some(*b"{}"))) % n)))
            .cloned()
            .collect();
        assert_eq!(got, want, "{line}");
    }

    // metadump takes the same filter.
    let f = DumpFilter::parse([&b"keyhash=md5"[..], b"ranges=0-0x3fffffff"]).unwrap();
    c.send(b"lru_crawler metadump all keyhash=md5 ranges=0-0x3fffffff\r\n");
    assert_eq!(c.line(), "OK\r\n");
    let mut got = BTreeSet::new();
    loop {
        let l = c.line();
        if l == "END\r\n" {
            break;
        }
        let key = l.strip_prefix("key=").unwrap().split(' ').next().unwrap();
        got.insert(percent_decode(key));
    }
    let want: BTreeSet<String> = keys
        .iter()
        .filter(|k| f.matches(k) && k.iter().all(|b| b.is_ascii_graphic()))
        .map(|k| String::from_utf8(k.clone()).unwrap())
        .collect();
    // (metadump shows the binary key base64-encoded; the text keys must match.)
    let text_keys: BTreeSet<String> = keys
        .iter()
        .filter_map(|k| String::from_utf8(k.clone()).ok())
        .collect();
    let text: BTreeSet<String> = got.intersection(&text_keys).cloned().collect();
    assert_eq!(text, want);
    c.version();
}

#[test]
fn bad_filters_are_client_errors_and_the_connection_goes_on() {
    let srv = start(Path::new(OSMIUM), &[]);
    let mut c = Client::to(&srv);
    fill(&mut c, &keys(10), 3);
    let many: Vec<String> = (0..=MAX_SELECTORS).map(|i| format!("{i}-{i}")).collect();
    let too_many = format!(
        "lru_crawler mgdump hash keyhash=md5 ranges={}\r\n",
        many.join(",")
    );
    for line in [
        "lru_crawler mgdump hash keyhash=md5\r\n",
        "lru_crawler mgdump hash ranges=1-2\r\n",
        "lru_crawler mgdump hash keyhash=sha256 ranges=1-2\r\n",
        "lru_crawler mgdump hash keyhash=md5 ranges=5-1\r\n",
        "lru_crawler mgdump hash keyhash=md5 ranges=1-99999999999\r\n",
        "lru_crawler mgdump hash keyhash=md5 ranges=1-2,,3-4\r\n",
        "lru_crawler mgdump hash keyhash=md5 ranges=1-2 ranges=3-4\r\n",
        "lru_crawler mgdump hash keyhash=md5 modula=0:0\r\n",
        "lru_crawler mgdump hash keyhash=md5 modula=4:4\r\n",
        "lru_crawler mgdump hash keyhash=md5 tag=abc ranges=1-2\r\n",
        "lru_crawler mgdump hash keyhash=md5 ranges=1-2 junk\r\n",
        "lru_crawler metadump all keyhash=md5 ranges=x\r\n",
        too_many.as_str(),
    ] {
        c.send(line.as_bytes());
        assert_eq!(c.line(), "CLIENT_ERROR bad dump filter\r\n", "{line}");
        c.version();
    }
    // The class list is checked first, as without a filter.
    c.send(b"lru_crawler mgdump 99 keyhash=md5 ranges=1-2\r\n");
    assert_eq!(c.line(), "BADCLASS invalid class id\r\n");
    // crawl takes no filter: the line is not a command.
    c.send(b"lru_crawler crawl all keyhash=md5 ranges=1-2\r\n");
    assert_eq!(c.line(), "ERROR\r\n");
    // The unfiltered dump is unchanged.
    let all = c.mgdump("lru_crawler mgdump hash\r\n");
    assert_eq!(all.len(), 11);
}

#[test]
fn memcached_answers_a_filtered_mgdump_with_error() {
    let Some(bin) = common::memcached_bin() else {
        eprintln!("no memcached 1.6.45: skipped");
        return;
    };
    let srv = start(&bin, &[]);
    let mut c = Client::to(&srv);
    fill(&mut c, &keys(10), 3);
    for line in filter_commands([(0, 1000), (5000, 6000)], HashKind::Fnv1a64, Some(*b"{}")) {
        c.send(line.as_bytes());
        assert_eq!(c.line(), "ERROR\r\n", "{line}");
        c.version();
    }
    // The fallback: the unfiltered dump.
    let all = c.mgdump(osmium_placement::filter::UNFILTERED_MGDUMP);
    assert_eq!(all.len(), 11);
}

struct Dir(PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn a_filtered_dump_includes_the_items_on_flash() {
    let dir = Dir(std::env::temp_dir().join(format!("osmium-dump-filter-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).unwrap();
    let ext = format!(
        "ext_path={}:64m,ext_page_size=4,ext_wbuf_size=1",
        dir.0.join("flash").display()
    );
    let srv = start(Path::new(OSMIUM), &["-m", "4", "-t", "2", "-o", &ext]);
    let mut c = Client::to(&srv);
    let keys = keys(5000);
    fill(&mut c, &keys, 1500);
    c.send(b"stats\r\n");
    let mut on_flash = 0u64;
    loop {
        let l = c.line();
        if l == "END\r\n" {
            break;
        }
        if let Some(v) = l.strip_prefix("STAT extstore_objects_used ") {
            on_flash = v.trim_end().parse().unwrap();
        }
    }
    assert!(on_flash > 1000, "{on_flash} items on flash");
    // Both halves of the hash space: every key once, flash ones included.
    let halves = [(0, u32::MAX / 2), (u32::MAX / 2 + 1, u32::MAX)];
    let mut got = BTreeSet::new();
    for span in halves {
        let want = expected(&keys, &[span], HashKind::Fnv1a64, Some(*b"{}"));
        let lines = filter_commands([span], HashKind::Fnv1a64, Some(*b"{}"));
        let part: BTreeSet<Vec<u8>> = c.mgdump(&lines[0]).into_iter().collect();
        assert_eq!(part, want);
        got.extend(part);
    }
    assert_eq!(got.len(), keys.len());
    check_spans(&mut c, &keys, &[(1 << 30, 3 << 30)], HashKind::Md5, None);
}
