//! memcached-tool's verbs with its output formats (`display`, `stats`,
//! `settings`, `sizes`, `dump`, `keys`; `scripts/memcached-tool` of
//! memcached 1.6.45 is the reference), and `hotkeys`, which prints
//! osmium's `stats hotkeys`.

use std::collections::{BTreeMap, HashSet};
use std::io::{self, Write};

use osmium_protocol::client::{encode, reply};

use crate::conn::{normalize, uri_decode, Conn};

/// `stats <sub>` as memcached-tool's `stats`/`settings`/`sizes` print it:
/// a `#addr Field Value` header, then every pair sorted by name, in
/// columns of the given widths. memcached-tool keeps the `\r` of the
/// server's line in the value (it `chomp`s the `\n` only), so the value
/// is padded with it and every line ends in `\r\n`: the same here, byte
/// for byte.
pub(crate) fn table(addr: &str, sub: &str, out: &mut dyn Write) -> io::Result<()> {
    let addr = normalize(addr);
    let mut conn = Conn::connect(&addr)?;
    let pairs: BTreeMap<String, String> = conn.stats(sub)?.into_iter().collect();
    match sub {
        "" => {
            writeln!(out, "#{addr:<22} {:>5} {:>13}", "Field", "Value")?;
            for (k, v) in &pairs {
                writeln!(out, "{k:>29} {:>14}", format!("{v}\r"))?;
            }
        }
        _ => {
            let label = if sub == "sizes" { "Size" } else { "Field" };
            let value = if sub == "sizes" { "Count" } else { "Value" };
            writeln!(out, "#{addr:<17} {label:>5} {value:>11}")?;
            for (k, v) in &pairs {
                writeln!(out, "{k:>24} {:>12}", format!("{v}\r"))?;
            }
        }
    }
    Ok(())
}

/// memcached-tool's `display`: one row per slab class with pages, from
/// `stats items` and `stats slabs`.
pub(crate) fn display(addr: &str, out: &mut dyn Write) -> io::Result<()> {
    let mut conn = Conn::connect(addr)?;
    let mut classes: BTreeMap<u32, BTreeMap<String, i64>> = BTreeMap::new();
    for (name, value) in conn.stats("items")? {
        // items:<class>:<field> <number>
        let mut parts = name.splitn(3, ':');
        let (Some("items"), Some(class), Some(field)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if let (Ok(class), Ok(v)) = (class.parse(), value.parse()) {
            classes.entry(class).or_default().insert(field.into(), v);
        }
    }
    let mut max = 0;
    for (name, value) in conn.stats("slabs")? {
        // <class>:<field> <number>
        let Some((class, field)) = name.split_once(':') else {
            continue;
        };
        if let (Ok(class), Ok(v)) = (class.parse(), value.parse()) {
            classes.entry(class).or_default().insert(field.into(), v);
            max = class;
        }
    }
    writeln!(
        out,
        "  #  Item_Size  Max_age   Pages   Count   Full?  Evicted Evict_Time OOM"
    )?;
    let empty = BTreeMap::new();
    for n in 1..=max {
        let it = classes.get(&n).unwrap_or(&empty);
        let get = |f: &str| it.get(f).copied().unwrap_or(0);
        if get("total_pages") == 0 {
            continue;
        }
        let chunk = get("chunk_size");
        let size = if chunk < 1024 {
            format!("{chunk}B")
        } else {
            format!("{:.1}K", chunk as f64 / 1024.0)
        };
        let full = if get("used_chunks") == get("total_chunks") {
            "yes"
        } else {
            " no"
        };
        writeln!(
            out,
            "{n:3} {size:>8} {:>9}s {:7} {:7} {full:>7} {:8} {:8} {:4}",
            get("age"),
            get("total_pages"),
            get("number"),
            get("evicted"),
            get("evicted_time"),
            get("outofmemory"),
        )?;
    }
    Ok(())
}

/// One `lru_crawler metadump all` line's key (URI-encoded as sent) and
/// `exp`, or `None` for a line that is not an item.
fn metadump_item(line: &[u8]) -> Option<(&[u8], i64)> {
    let rest = line.strip_prefix(b"key=")?;
    let mut fields = rest.split(|&b| b == b' ');
    let key = fields.next()?;
    let exp = fields.next()?.strip_prefix(b"exp=")?;
    let exp = std::str::from_utf8(exp).ok()?.parse().ok()?;
    Some((key, exp))
}

/// Sends `lru_crawler metadump all` and calls `each` with every line up
/// to `END`, until `each` returns false. An error reply (the crawler is
/// off, or still busy after 5 s) is an error.
fn metadump(conn: &mut Conn, mut each: impl FnMut(&[u8]) -> bool) -> io::Result<()> {
    conn.send(b"lru_crawler metadump all\r\n")?;
    let mut busy = 0;
    loop {
        let line = conn.line()?;
        if line == b"END" {
            return Ok(());
        }
        // Another crawl is running: ask again for up to 5 s.
        if line.starts_with(b"BUSY") && busy < 50 {
            busy += 1;
            std::thread::sleep(std::time::Duration::from_millis(100));
            conn.send(b"lru_crawler metadump all\r\n")?;
            continue;
        }
        if line.starts_with(b"ERROR")
            || line.starts_with(b"CLIENT_ERROR")
            || line.starts_with(b"SERVER_ERROR")
            || line.starts_with(b"BUSY")
        {
            return Err(io::Error::other(format!(
                "lru_crawler metadump all: {}",
                String::from_utf8_lossy(&line)
            )));
        }
        if !each(&line) {
            return Ok(());
        }
    }
}

/// memcached-tool's `keys [-u] [limit]`: the metadump lines of items,
/// URI-decoded with `-u`.
pub(crate) fn keys(
    addr: &str,
    unescape: bool,
    limit: Option<u64>,
    out: &mut dyn Write,
) -> io::Result<()> {
    let mut conn = Conn::connect(addr)?;
    eprint!("Dumping memcache keys");
    if let Some(l) = limit {
        eprint!(" (limiting to {l} keys)");
    }
    eprintln!();
    let mut count = 0u64;
    let mut failed = Ok(());
    metadump(&mut conn, |line| {
        if limit.is_some_and(|l| count == l) {
            return false;
        }
        if metadump_item(line).is_some() {
            let text = if unescape {
                uri_decode(line)
            } else {
                line.to_vec()
            };
            if let Err(e) = out.write_all(&text).and_then(|_| out.write_all(b"\n")) {
                failed = Err(e);
                return false;
            }
            count += 1;
        }
        true
    })?;
    failed
}

/// How many `mg` requests `dump` pipelines before reading their replies.
const DUMP_BATCH: usize = 100;

/// memcached-tool's `dump [limit]`: every item as the `add` command that
/// stores it again (`add <key> <flags> <exptime> <bytes>\r\n<data>\r\n`),
/// with the keys of `lru_crawler metadump all` and the values of `mg`
/// (which reads items on the flash tier too). Items gone between the two
/// are left out, as memcached-tool leaves them.
pub(crate) fn dump(addr: &str, limit: Option<u64>, out: &mut dyn Write) -> io::Result<()> {
    let mut conn = Conn::connect(addr)?;
    eprint!("Dumping memcache contents");
    if let Some(l) = limit {
        eprint!(" (limiting to {l} keys)");
    }
    eprintln!();
    let mut items: Vec<(Vec<u8>, i64)> = Vec::new();
    let mut seen = HashSet::new();
    let mut count = 0u64;
    metadump(&mut conn, |line| {
        if limit.is_some_and(|l| count == l) {
            return false;
        }
        if let Some((key, exp)) = metadump_item(line) {
            let key = uri_decode(key);
            if seen.insert(key.clone()) {
                items.push((key, if exp == -1 { 0 } else { exp }));
            }
            count += 1;
        }
        true
    })?;
    if limit.is_some() {
        // The dump may still be streaming: a new connection for the values.
        conn = Conn::connect(addr)?;
    }
    for batch in items.chunks(DUMP_BATCH) {
        let mut req = Vec::new();
        for (key, _) in batch {
            // Keys a text line cannot carry go base64-encoded (`b`).
            let long = key.is_empty() || key.len() > 250;
            encode::meta(&mut req, b"mg", key, None, long)
                .flag(b'v')
                .flag(b'f')
                .end();
        }
        conn.send(&req)?;
        for (key, exp) in batch {
            let line = conn.line()?;
            if !line.starts_with(b"VA ") {
                // EN (gone meanwhile) or an error for this key.
                continue;
            }
            let bad =
                || io::Error::other(format!("bad mg reply: {}", String::from_utf8_lossy(&line)));
            let len = reply::meta_value_len(&line).ok_or_else(bad)?;
            let flags = match reply::meta_flag(&line, b'f') {
                Some(f) => std::str::from_utf8(f)
                    .ok()
                    .and_then(|f| f.parse().ok())
                    .ok_or_else(bad)?,
                None => 0,
            };
            let value = conn.value(len)?;
            let mut add = Vec::with_capacity(key.len() + len + 40);
            encode::storage(&mut add, b"add", key, flags, *exp, &value, None, false);
            out.write_all(&add)?;
        }
    }
    Ok(())
}

/// One row of `stats hotkeys`: `STAT hotkey <rank> <key> <reads/s>
/// <writes/s> <bytes/s>`, the key URI-encoded as the server sent it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct HotKey {
    pub rank: u32,
    pub key: String,
    pub reads: f64,
    pub writes: f64,
    pub bytes: f64,
}

/// The rows of a `stats hotkeys` reply, hottest first; rows in another
/// shape are skipped.
pub(crate) fn parse_hotkeys(stats: &[(String, String)]) -> Vec<HotKey> {
    let mut rows: Vec<HotKey> = stats
        .iter()
        .filter(|(name, _)| name == "hotkey")
        .filter_map(|(_, value)| {
            let f: Vec<&str> = value.split(' ').collect();
            let [rank, key, reads, writes, bytes] = f.as_slice() else {
                return None;
            };
            Some(HotKey {
                rank: rank.parse().ok()?,
                key: key.to_string(),
                reads: reads.parse().ok()?,
                writes: writes.parse().ok()?,
                bytes: bytes.parse().ok()?,
            })
        })
        .collect();
    rows.sort_by_key(|h| h.rank);
    rows
}

/// `hotkeys [limit]`: osmium's `stats hotkeys` as a table. A server that
/// answers with an error (memcached, an osmium without the report) is an
/// error naming the reply; an empty report prints the header alone.
pub(crate) fn hotkeys(addr: &str, limit: Option<u64>, out: &mut dyn Write) -> io::Result<()> {
    let mut conn = Conn::connect(addr)?;
    let stats = conn
        .stats("hotkeys")
        .map_err(|e| io::Error::other(format!("no hot-key report (stats hotkeys: {e})")))?;
    let rows = parse_hotkeys(&stats);
    writeln!(
        out,
        "{:>4} {:<40} {:>12} {:>12} {:>14}",
        "Rank", "Key", "Reads/s", "Writes/s", "Bytes/s"
    )?;
    for h in rows.iter().take(limit.map_or(usize::MAX, |l| l as usize)) {
        writeln!(
            out,
            "{:>4} {:<40} {:>12.1} {:>12.1} {:>14.1}",
            h.rank, h.key, h.reads, h.writes, h.bytes
        )?;
    }
    if rows.is_empty() {
        eprintln!("no hot keys reported by {}", normalize(addr));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_metadump_lines() {
        let line = b"key=a%20b exp=-1 la=1521046038 cas=717111 fetch=no cls=13 size=1232";
        assert_eq!(metadump_item(line), Some((&b"a%20b"[..], -1)));
        assert_eq!(metadump_item(b"END"), None);
        assert_eq!(metadump_item(b"key=x exp=zz"), None);
    }

    #[test]
    fn reads_hotkeys_rows() {
        let stats = vec![
            ("hotkey".into(), "2 b 1.5 0 10".into()),
            ("hotkey".into(), "1 a%20x 100 2 4096.5".into()),
            ("hotkey".into(), "3 broken".into()),
        ];
        let rows = parse_hotkeys(&stats);
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].key, "a%20x");
        assert_eq!(rows[0].bytes, 4096.5);
        assert_eq!(rows[1].rank, 2);
    }
}
