//! The key filter of osmium's crawler dumps: the tokens after the class
//! list of `lru_crawler mgdump` (and `metadump`), which make the server
//! stream only the keys whose placement hash falls in some ranges, parsed
//! here ([`DumpFilter::parse`], what the server runs) and written here
//! ([`filter_commands`], what a proxy moving keys sends):
//!
//! ```text
//! lru_crawler mgdump <classes|all|hash> keyhash=<fn> [tag=<t>] ranges=<lo>-<hi>[,<lo>-<hi>...]
//! lru_crawler mgdump <classes|all|hash> keyhash=<fn> [tag=<t>] modula=<n>:<i>[,<i>...]
//! ```
//!
//! * `keyhash`: one of nutcracker's hash names (`fnv1a_64`, `md5`, ...,
//!   [`HashKind::ALL`]); a key's hash is that function of the key, or of
//!   its hash-tag part when `tag` is given (as [`crate::hash::tagged`]).
//! * `tag`: the pool's two hash-tag characters (`tag={}`), or their bytes
//!   in hex (`tag=0x7b7d`) when they are not printable.
//! * `ranges`: inclusive ranges of the hash, each bound in decimal or in
//!   hex with `0x`; a key is listed when its hash lies in one of them.
//! * `modula`: a key is listed when its hash modulo `n` is one of the `i`.
//! * At most [`MAX_SELECTORS`] ranges (or `i`) per command, so a line stays
//!   well under the 2048 bytes a server reads before it needs a `\n`: a
//!   caller with more ranges sends several commands, one after the other.
//!
//! Anything else (an unknown or repeated option, a bad number, `lo > hi`,
//! no `keyhash`, neither or both of `ranges` and `modula`) is refused with
//! `CLIENT_ERROR bad dump filter`, and the connection stays open.
//! memcached 1.6.45 answers any such line (an `mgdump` with more than one
//! argument) with plain `ERROR\r\n` and keeps the connection: a caller that
//! reads `ERROR` falls back to the unfiltered dump ([`UNFILTERED_MGDUMP`])
//! and filters the keys itself.

use crate::hash::{tagged, HashKind};

/// Most ranges (or modula picks) one command carries.
pub const MAX_SELECTORS: usize = 64;

/// The unfiltered dump of every key, memcached 1.6.45's own syntax.
pub const UNFILTERED_MGDUMP: &str = "lru_crawler mgdump hash\r\n";

/// Which hashes a filter keeps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Select {
    /// Inclusive ranges, sorted, disjoint and not adjacent.
    Ranges(Vec<(u32, u32)>),
    /// `hash % n` is one of `picks` (sorted, unique, each below `n`).
    Modula {
        /// The modulus: a modula table's length (each server repeated
        /// `weight` times).
        n: u32,
        /// The remainders kept: the table entries of the servers dumped.
        picks: Vec<u32>,
    },
}

/// A parsed dump filter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DumpFilter {
    /// The key hash (`keyhash=`).
    pub hash: HashKind,
    /// The hash tag (`tag=`): only the tagged part of a key is hashed.
    pub tag: Option<[u8; 2]>,
    /// Which hashes are kept.
    pub select: Select,
}

/// Why a filter was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FilterError {
    /// An option other than keyhash, tag, ranges, modula (or no `=`).
    UnknownOption,
    /// An option given twice, or both `ranges` and `modula`.
    Repeated,
    /// No `keyhash`.
    NoHash,
    /// Neither `ranges` nor `modula`.
    NoSelection,
    /// `keyhash` names no hash.
    BadHash,
    /// `tag` is not two characters nor `0x` and four hex digits.
    BadTag,
    /// A bad number, range or modulus.
    BadNumber,
    /// More than [`MAX_SELECTORS`] ranges or picks.
    TooMany,
}

impl DumpFilter {
    /// The filter of a dump command's tokens after its class list.
    pub fn parse<'a>(tokens: impl IntoIterator<Item = &'a [u8]>) -> Result<Self, FilterError> {
        let mut hash = None;
        let mut tag = None;
        let mut select = None;
        for token in tokens {
            let eq = token
                .iter()
                .position(|&b| b == b'=')
                .ok_or(FilterError::UnknownOption)?;
            let (name, value) = (&token[..eq], &token[eq + 1..]);
            match name {
                b"keyhash" => {
                    let h = std::str::from_utf8(value)
                        .ok()
                        .and_then(HashKind::from_name)
                        .ok_or(FilterError::BadHash)?;
                    if hash.replace(h).is_some() {
                        return Err(FilterError::Repeated);
                    }
                }
                b"tag" => {
                    if tag.replace(parse_tag(value)?).is_some() {
                        return Err(FilterError::Repeated);
                    }
                }
                b"ranges" | b"modula" => {
                    let s = if name == b"ranges" {
                        Select::Ranges(parse_ranges(value)?)
                    } else {
                        parse_modula(value)?
                    };
                    if select.replace(s).is_some() {
                        return Err(FilterError::Repeated);
                    }
                }
                _ => return Err(FilterError::UnknownOption),
            }
        }
        Ok(DumpFilter {
            hash: hash.ok_or(FilterError::NoHash)?,
            tag,
            select: select.ok_or(FilterError::NoSelection)?,
        })
    }

    /// The hash of `key` the filter looks at.
    #[inline]
    pub fn key_hash(&self, key: &[u8]) -> u32 {
        self.hash.hash(tagged(key, self.tag))
    }

    /// Whether the dump lists `key`.
    #[inline]
    pub fn matches(&self, key: &[u8]) -> bool {
        self.matches_hash(self.key_hash(key))
    }

    /// Whether the dump lists the keys whose hash is `h`.
    #[inline]
    pub fn matches_hash(&self, h: u32) -> bool {
        match &self.select {
            Select::Ranges(r) => {
                let i = r.partition_point(|&(_, hi)| hi < h);
                r.get(i).is_some_and(|&(lo, _)| lo <= h)
            }
            Select::Modula { n, picks } => picks.binary_search(&(h % n)).is_ok(),
        }
    }

    /// The filter's tokens, as [`DumpFilter::parse`] reads them back.
    pub fn tokens(&self) -> String {
        let mut s = format!("keyhash={}", self.hash.name());
        if let Some(t) = self.tag {
            s.push_str(" tag=");
            if t.iter().all(|b| b.is_ascii_graphic()) {
                s.extend(t.iter().map(|&b| b as char));
            } else {
                s.push_str(&format!("0x{:02x}{:02x}", t[0], t[1]));
            }
        }
        match &self.select {
            Select::Ranges(r) => {
                s.push_str(" ranges=");
                let list: Vec<String> = r.iter().map(|(lo, hi)| format!("{lo}-{hi}")).collect();
                s.push_str(&list.join(","));
            }
            Select::Modula { n, picks } => {
                let list: Vec<String> = picks.iter().map(u32::to_string).collect();
                s.push_str(&format!(" modula={n}:{}", list.join(",")));
            }
        }
        s
    }

    /// The whole `lru_crawler mgdump hash ...\r\n` line of this filter.
    pub fn command(&self) -> String {
        format!("lru_crawler mgdump hash {}\r\n", self.tokens())
    }
}

/// The `lru_crawler mgdump` lines (each ending `\r\n`) that list the keys
/// whose hash (`hash` of the key's `tag` part) lies in one of `spans`
/// (inclusive; any order, overlaps allowed): at most [`MAX_SELECTORS`]
/// ranges a line, in hash order; none when `spans` is empty. Send them to
/// one server one after the other (each is answered `OK`, its keys, `EN`);
/// if the first is answered `ERROR` the server does not filter (memcached):
/// send [`UNFILTERED_MGDUMP`] instead and check each key against the rings.
pub fn filter_commands(
    spans: impl IntoIterator<Item = (u32, u32)>,
    hash: HashKind,
    tag: Option<[u8; 2]>,
) -> Vec<String> {
    let merged = merge(spans.into_iter().collect());
    merged
        .chunks(MAX_SELECTORS)
        .map(|chunk| {
            DumpFilter {
                hash,
                tag,
                select: Select::Ranges(chunk.to_vec()),
            }
            .command()
        })
        .collect()
}

/// Sorted, overlapping and adjacent spans joined; spans with `lo > hi`
/// are swapped round.
fn merge(mut spans: Vec<(u32, u32)>) -> Vec<(u32, u32)> {
    for s in &mut spans {
        if s.0 > s.1 {
            *s = (s.1, s.0);
        }
    }
    spans.sort_unstable();
    let mut out: Vec<(u32, u32)> = Vec::with_capacity(spans.len());
    for (lo, hi) in spans {
        match out.last_mut() {
            Some(last) if last.1.checked_add(1).is_none_or(|next| lo <= next) => {
                last.1 = last.1.max(hi);
            }
            _ => out.push((lo, hi)),
        }
    }
    out
}

/// A decimal or `0x` hex `u32`.
fn parse_number(s: &[u8]) -> Result<u32, FilterError> {
    let (digits, radix) = match s {
        [b'0', b'x' | b'X', rest @ ..] => (rest, 16),
        _ => (s, 10),
    };
    if digits.is_empty() || digits.len() > 10 {
        return Err(FilterError::BadNumber);
    }
    let mut v: u32 = 0;
    for &b in digits {
        let d = (b as char).to_digit(radix).ok_or(FilterError::BadNumber)?;
        v = v
            .checked_mul(radix)
            .and_then(|v| v.checked_add(d))
            .ok_or(FilterError::BadNumber)?;
    }
    Ok(v)
}

fn parse_tag(v: &[u8]) -> Result<[u8; 2], FilterError> {
    match v {
        [a, b] => Ok([*a, *b]),
        [b'0', b'x' | b'X', hex @ ..] if hex.len() == 4 => {
            let byte = |h: &[u8]| {
                let s = std::str::from_utf8(h).map_err(|_| FilterError::BadTag)?;
                u8::from_str_radix(s, 16).map_err(|_| FilterError::BadTag)
            };
            Ok([byte(&hex[..2])?, byte(&hex[2..])?])
        }
        _ => Err(FilterError::BadTag),
    }
}

/// A comma-separated list, at most [`MAX_SELECTORS`] items, none empty.
fn list(v: &[u8]) -> Result<impl Iterator<Item = &[u8]>, FilterError> {
    if v.is_empty() {
        return Err(FilterError::BadNumber);
    }
    if v.iter().filter(|&&b| b == b',').count() >= MAX_SELECTORS {
        return Err(FilterError::TooMany);
    }
    Ok(v.split(|&b| b == b','))
}

fn parse_ranges(v: &[u8]) -> Result<Vec<(u32, u32)>, FilterError> {
    let mut spans = Vec::new();
    for item in list(v)? {
        let dash = item
            .iter()
            .position(|&b| b == b'-')
            .ok_or(FilterError::BadNumber)?;
        let lo = parse_number(&item[..dash])?;
        let hi = parse_number(&item[dash + 1..])?;
        if lo > hi {
            return Err(FilterError::BadNumber);
        }
        spans.push((lo, hi));
    }
    Ok(merge(spans))
}

fn parse_modula(v: &[u8]) -> Result<Select, FilterError> {
    let colon = v
        .iter()
        .position(|&b| b == b':')
        .ok_or(FilterError::BadNumber)?;
    let n = parse_number(&v[..colon])?;
    if n == 0 {
        return Err(FilterError::BadNumber);
    }
    let mut picks = Vec::new();
    for item in list(&v[colon + 1..])? {
        let i = parse_number(item)?;
        if i >= n {
            return Err(FilterError::BadNumber);
        }
        picks.push(i);
    }
    picks.sort_unstable();
    picks.dedup();
    Ok(Select::Modula { n, picks })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &str) -> Result<DumpFilter, FilterError> {
        DumpFilter::parse(line.split(' ').map(str::as_bytes))
    }

    #[test]
    fn a_filter_reads_back_what_it_writes() {
        let f = parse("keyhash=md5 tag={} ranges=10-20,0x0-0x5,21-30").unwrap();
        assert_eq!(f.hash, HashKind::Md5);
        assert_eq!(f.tag, Some(*b"{}"));
        assert_eq!(f.select, Select::Ranges(vec![(0, 5), (10, 30)]));
        assert_eq!(f.tokens(), "keyhash=md5 tag={} ranges=0-5,10-30");
        assert_eq!(parse(&f.tokens()), Ok(f));
        let m = parse("modula=5:4,1,1 keyhash=crc32 tag=0x0a20").unwrap();
        assert_eq!(m.tag, Some(*b"\n "));
        assert_eq!(
            m.select,
            Select::Modula {
                n: 5,
                picks: vec![1, 4]
            }
        );
        assert_eq!(m.tokens(), "keyhash=crc32 tag=0x0a20 modula=5:1,4");
        assert_eq!(parse(&m.tokens()), Ok(m));
    }

    #[test]
    fn bad_filters_are_refused() {
        use FilterError::*;
        for (line, want) in [
            ("ranges=1-2", NoHash),
            ("keyhash=md5", NoSelection),
            ("keyhash=sha1 ranges=1-2", BadHash),
            ("keyhash=md5 keyhash=md5 ranges=1-2", Repeated),
            ("keyhash=md5 ranges=1-2 modula=2:1", Repeated),
            ("keyhash=md5 ranges=2-1", BadNumber),
            ("keyhash=md5 ranges=1-4294967296", BadNumber),
            ("keyhash=md5 ranges=1-", BadNumber),
            ("keyhash=md5 ranges=", BadNumber),
            ("keyhash=md5 ranges=1-2,", BadNumber),
            ("keyhash=md5 ranges=0x-1", BadNumber),
            ("keyhash=md5 ranges=+1-2", BadNumber),
            ("keyhash=md5 modula=0:0", BadNumber),
            ("keyhash=md5 modula=3:3", BadNumber),
            ("keyhash=md5 modula=3", BadNumber),
            ("keyhash=md5 tag={ ranges=1-2", BadTag),
            ("keyhash=md5 tag=0xzz00 ranges=1-2", BadTag),
            ("keyhash=md5 ranges=1-2 extra", UnknownOption),
            ("keyhash=md5 ranges=1-2 limit=3", UnknownOption),
        ] {
            assert_eq!(parse(line), Err(want), "{line}");
        }
        let many: Vec<String> = (0..=MAX_SELECTORS).map(|i| format!("{i}-{i}")).collect();
        let line = format!("keyhash=md5 ranges={}", many.join(","));
        assert_eq!(parse(&line), Err(TooMany));
    }

    #[test]
    fn keys_match_by_their_tagged_hash() {
        let f = parse("keyhash=fnv1a_64 tag={} ranges=0-0x7fffffff").unwrap();
        for key in [&b"user:{42}:name"[..], b"plain", b"{x}"] {
            let h = HashKind::Fnv1a64.hash(tagged(key, Some(*b"{}")));
            assert_eq!(f.matches(key), h <= 0x7fff_ffff);
        }
        let all = parse("keyhash=fnv1a_64 ranges=0-0xffffffff").unwrap();
        assert!(all.matches(b"anything"));
    }

    #[test]
    fn commands_are_chunked_and_merged() {
        assert!(filter_commands([], HashKind::Md5, None).is_empty());
        let spans: Vec<(u32, u32)> = (0..150u32).map(|i| (i * 10, i * 10 + 3)).collect();
        let lines = filter_commands(spans.clone(), HashKind::Fnv1a64, Some(*b"{}"));
        assert_eq!(lines.len(), 3);
        assert!(lines.iter().all(|l| l.len() < 2048 && l.ends_with("\r\n")));
        assert!(lines[0]
            .starts_with("lru_crawler mgdump hash keyhash=fnv1a_64 tag={} ranges=0-3,10-13,"));
        let back: Vec<(u32, u32)> = lines
            .iter()
            .flat_map(|l| {
                let tokens = l.trim_end().split(' ').skip(3).map(str::as_bytes);
                match DumpFilter::parse(tokens).unwrap().select {
                    Select::Ranges(r) => r,
                    Select::Modula { .. } => unreachable!(),
                }
            })
            .collect();
        assert_eq!(back, spans);
        let joined = filter_commands([(5, 9), (0, 4), (u32::MAX, u32::MAX)], HashKind::Md5, None);
        assert_eq!(
            joined,
            ["lru_crawler mgdump hash keyhash=md5 ranges=0-9,4294967295-4294967295\r\n"]
        );
    }
}
