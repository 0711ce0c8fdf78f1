//! osmium-tool's memcached-tool verbs (`display`, `stats`, `settings`,
//! `sizes`, `dump`, `keys`) and `hotkeys` against a real osmium, and
//! against memcached 1.6.45 when the oracle is built; `dump` replayed into
//! a second server gives back every item; a unix socket path works as an
//! address.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;

use common::{address, memcached_bin, osmium_bin, roundtrip, run_tool, start, Running, TempDir};
use osmium_test_harness::Osmium;

/// Stores `items` (key, flags, exptime, value) with `set`.
fn load(server: &Running, items: &[(String, u32, u64, Vec<u8>)]) {
    let mut s = server.connect();
    for (k, f, e, v) in items {
        let mut req = format!("set {k} {f} {e} {}\r\n", v.len()).into_bytes();
        req.extend_from_slice(v);
        req.extend_from_slice(b"\r\n");
        assert_eq!(roundtrip(&mut s, &req, b"\r\n"), b"STORED\r\n", "set {k}");
    }
}

/// `mg <key> v f` → (flags, value), `None` on a miss.
fn fetch(s: &mut std::net::TcpStream, key: &str) -> Option<(u32, Vec<u8>)> {
    let reply = roundtrip(s, format!("mg {key} v f\r\nmn\r\n").as_bytes(), b"MN\r\n");
    let text = String::from_utf8_lossy(&reply);
    if text.starts_with("EN") {
        return None;
    }
    let head = text.split("\r\n").next().unwrap();
    let mut words = head.split(' ').skip(1);
    let len: usize = words.next().unwrap().parse().unwrap();
    let flags = words
        .find_map(|w| w.strip_prefix('f'))
        .unwrap()
        .parse()
        .unwrap();
    let start = head.len() + 2;
    Some((flags, reply[start..start + len].to_vec()))
}

fn items() -> Vec<(String, u32, u64, Vec<u8>)> {
    let mut v: Vec<_> = (0..40)
        .map(|i| (format!("key:{i}"), i, 0, format!("value {i}").into_bytes()))
        .collect();
    // A key with `%` (URI-encoded by metadump), a binary value with CR LF,
    // an expiry, a larger item in another slab class.
    v.push(("pct%41x".into(), 7, 0, b"a\r\nb\0c".to_vec()));
    v.push(("expiring".into(), 1, 3600, b"soon".to_vec()));
    v.push(("big".into(), 0, 0, vec![b'z'; 5000]));
    v
}

/// The `add` commands of a dump: key → (flags, exptime, value).
fn parse_dump(out: &[u8]) -> BTreeMap<String, (u32, i64, Vec<u8>)> {
    let mut map = BTreeMap::new();
    let mut rest = out;
    while !rest.is_empty() {
        let eol = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .expect("dump line");
        let head = String::from_utf8(rest[..eol].to_vec()).unwrap();
        let f: Vec<&str> = head.split(' ').collect();
        assert_eq!(f.len(), 5, "dump line {head:?}");
        assert_eq!(f[0], "add");
        let len: usize = f[4].parse().unwrap();
        let data = &rest[eol + 2..];
        assert_eq!(&data[len..len + 2], b"\r\n");
        map.insert(
            f[1].to_string(),
            (
                f[2].parse().unwrap(),
                f[3].parse().unwrap(),
                data[..len].to_vec(),
            ),
        );
        rest = &data[len + 2..];
    }
    map
}

fn stdout(args: &[&str]) -> Vec<u8> {
    let out = run_tool(args);
    assert!(
        out.status.success(),
        "osmium-tool {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn verbs_against(bin: &Path) {
    let server = start(bin, &["-m", "64"]);
    let addr = address(&server);
    let items = items();
    load(&server, &items);

    // display: memcached-tool's header and one row per class with pages.
    let display = String::from_utf8(stdout(&[&addr, "display"])).unwrap();
    let mut lines = display.lines();
    assert_eq!(
        lines.next(),
        Some("  #  Item_Size  Max_age   Pages   Count   Full?  Evicted Evict_Time OOM")
    );
    let rows: Vec<&str> = lines.collect();
    assert!(!rows.is_empty(), "{display}");
    let counted: u64 = rows
        .iter()
        .map(|r| r.split_whitespace().nth(4).unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(counted, items.len() as u64, "{display}");
    // The default mode is display.
    assert_eq!(String::from_utf8(stdout(&[&addr])).unwrap(), display);

    // stats / settings: `#addr Field Value`, then sorted pairs (each value
    // padded with its `\r`, as memcached-tool; `lines()` drops `\r\n`).
    let stats = String::from_utf8(stdout(&[&addr, "stats"])).unwrap();
    assert_eq!(
        stats.lines().next().unwrap(),
        format!("#{addr:<22} {:>5} {:>13}", "Field", "Value")
    );
    assert!(
        stats
            .lines()
            .any(|l| l == format!("{:>29} {:>13}", "curr_items", items.len())),
        "{stats}"
    );
    let names: Vec<&str> = stats
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted);
    // The mode may come first.
    let stats2 = String::from_utf8(stdout(&["stats", &addr])).unwrap();
    assert_eq!(stats2.lines().next(), stats.lines().next());

    let settings = String::from_utf8(stdout(&[&addr, "settings"])).unwrap();
    assert_eq!(
        settings.lines().next().unwrap(),
        format!("#{addr:<17} {:>5} {:>11}", "Field", "Value")
    );
    assert!(
        settings
            .lines()
            .any(|l| l == format!("{:>24} {:>11}", "maxbytes", 64 << 20)),
        "{settings}"
    );

    // keys: metadump lines, URI-encoded; -u decodes; a limit.
    let keys = String::from_utf8(stdout(&[&addr, "keys"])).unwrap();
    assert_eq!(keys.lines().count(), items.len(), "{keys}");
    assert!(keys.lines().all(|l| l.starts_with("key=")), "{keys}");
    assert!(keys.contains("key=pct%2541x "), "{keys}");
    let unescaped = String::from_utf8(stdout(&[&addr, "keys", "-u"])).unwrap();
    assert!(unescaped.contains("key=pct%41x "), "{unescaped}");
    let limited = String::from_utf8(stdout(&[&addr, "keys", "5"])).unwrap();
    assert_eq!(limited.lines().count(), 5);
    let bad = run_tool(&[&addr, "keys", "0"]);
    assert!(!bad.status.success());

    // dump: `add` commands with flags, exptime and the exact value.
    let raw = stdout(&[&addr, "dump"]);
    let dump = parse_dump(&raw);
    assert_eq!(dump.len(), items.len());
    for (k, f, e, v) in &items {
        let (flags, exp, value) = &dump[k];
        assert_eq!((flags, value), (f, v), "{k}");
        if *e == 0 {
            assert_eq!(*exp, 0, "{k}");
        } else {
            assert!(*exp > 1_000_000_000, "{k}: absolute exptime, got {exp}");
        }
    }
    assert_eq!(parse_dump(&stdout(&[&addr, "dump", "3"])).len(), 3);

    // The dump replayed into an empty server gives every item back.
    let copy = start(bin, &[]);
    let mut c = copy.connect();
    let n = dump.len();
    let mut replies = roundtrip(&mut c, &raw, b"\r\n");
    while replies.windows(8).filter(|w| w == b"STORED\r\n").count() < n {
        replies.extend(roundtrip(&mut c, b"", b"\r\n"));
    }
    for (k, f, _, v) in &items {
        assert_eq!(fetch(&mut c, k), Some((*f, v.clone())), "{k} after replay");
    }

    // sizes: the header of memcached-tool's sizes.
    let sizes = String::from_utf8(stdout(&[&addr, "sizes"])).unwrap();
    assert_eq!(
        sizes.lines().next().unwrap(),
        format!("#{addr:<17} {:>5} {:>11}", "Size", "Count")
    );

    // hotkeys: a table when the server reports them, else a clear error.
    let hot = run_tool(&[&addr, "hotkeys"]);
    let out = String::from_utf8_lossy(&hot.stdout);
    let err = String::from_utf8_lossy(&hot.stderr);
    if hot.status.success() {
        assert!(out.starts_with("Rank Key"), "{out}");
    } else {
        assert!(err.contains("stats hotkeys"), "{err}");
        assert!(out.is_empty());
    }

    // Usage errors.
    assert!(!run_tool(&[&addr, "nonsense"]).status.success());
    assert!(!run_tool(&[&addr, "stats", "extra"]).status.success());
}

#[test]
fn verbs_against_osmium() {
    verbs_against(&osmium_bin());
}

#[test]
fn verbs_against_memcached() {
    if let Some(bin) = memcached_bin() {
        verbs_against(&bin);
    }
}

#[test]
fn unix_socket_address() {
    let dir = TempDir::new("unix");
    let sock = dir.0.join("osmium.sock");
    let sock_s = sock.to_str().unwrap();
    // With -s the server listens on the socket only.
    let _server = Osmium::new().bin(osmium_bin()).unix_socket(&sock).start();
    let stats = String::from_utf8(stdout(&[sock_s, "stats"])).unwrap();
    assert!(stats.starts_with(&format!("#{sock_s:<22}")), "{stats}");
    assert!(stats.contains("curr_connections"), "{stats}");
}

#[test]
fn unreachable_server_is_an_error() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = run_tool(&[&format!("127.0.0.1:{port}"), "stats"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("Couldn't connect"));
}

/// Items that went to the flash tier (`-m 16` and 2,000 items of 20 KB):
/// every key `keys` lists is in `dump` with its exact value (`mg` reads
/// values from flash); that the server lists its flash items in
/// `lru_crawler metadump` is the server's part.
#[test]
fn dump_reads_flash_items() {
    let dir = TempDir::new("flash");
    let ext = format!(
        "ext_path={}:64m,ext_page_size=8",
        dir.0.join("flash").display()
    );
    let server = start(&osmium_bin(), &["-m", "16", "-o", &ext]);
    let value = |i: usize| {
        let mut v = format!("{i:08}-").into_bytes();
        v.resize(20_000, b'a' + (i % 26) as u8);
        v
    };
    let items: Vec<_> = (0..2000)
        .map(|i| (format!("flash:{i}"), 0u32, 0u64, value(i)))
        .collect();
    load(&server, &items);
    let addr = address(&server);
    let keys = String::from_utf8(stdout(&[&addr, "keys"])).unwrap();
    let listed = keys.lines().count();
    let dump = parse_dump(&stdout(&[&addr, "dump"]));
    assert!(listed > 0);
    assert!(
        dump.len() >= listed,
        "{} dumped, {listed} listed",
        dump.len()
    );
    for (k, (_, _, v)) in &dump {
        let i: usize = k.strip_prefix("flash:").unwrap().parse().unwrap();
        assert_eq!(v, &value(i), "{k}");
    }
    eprintln!("flash: {listed} keys listed, {} dumped", dump.len());
}

/// A key the text protocol cannot carry (stored with `ms <base64> b`) is
/// read back with `mg <base64> b` and dumped as memcached-tool prints it:
/// the raw bytes.
fn binary_key_against(bin: &Path) {
    let server = start(bin, &[]);
    let mut s = server.connect();
    // "sp ace\x01" in base64.
    assert_eq!(
        roundtrip(&mut s, b"ms c3AgYWNlAQ== 2 b F7\r\nhi\r\n", b"\r\n"),
        b"HD\r\n"
    );
    let dump = stdout(&[&address(&server), "dump"]);
    assert_eq!(dump, b"add sp ace\x01 7 0 2\r\nhi\r\n");
    let keys = String::from_utf8(stdout(&[&address(&server), "keys"])).unwrap();
    assert!(keys.starts_with("key=sp%20ace%01 exp=-1 "), "{keys}");
}

#[test]
fn binary_key_osmium() {
    binary_key_against(&osmium_bin());
}

#[test]
fn binary_key_memcached() {
    if let Some(bin) = memcached_bin() {
        binary_key_against(&bin);
    }
}
