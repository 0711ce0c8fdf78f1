//! Property tests of the 1.6.45 text/meta parser (`osmium_protocol::ascii`):
//! it never panics, the pieces of a request it returns are pieces of the
//! input (or of the key buffer), storage errors swallow exactly the data
//! block they announced, tokens are never empty, framing does not depend on
//! how the bytes arrive, and a get served as it streams in serves the keys
//! the whole line has.
use osmium_protocol::ascii::numbers::tokto_i32;
use osmium_protocol::ascii::tokens::{tokenize, NO_FLAGS};
use osmium_protocol::ascii::{frame, parse_line, partial_get, Frame, LINE_LIMIT};
use osmium_protocol::request::{Command, KeyBuffer, Reply, Request, Tokens, KEY_MAX_LENGTH};
use proptest::prelude::*;

/// Words that steer lines into every command and error path.
fn word() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => prop::sample::select(vec![
            &b"get"[..], b"gets", b"gat", b"gats", b"set", b"add", b"replace", b"append",
            b"prepend", b"cas", b"delete", b"incr", b"decr", b"touch", b"mg", b"ms", b"md",
            b"ma", b"me", b"mn", b"flush_all", b"verbosity", b"cache_memlimit", b"shutdown",
            b"stats", b"version", b"quit", b"watch", b"lru_crawler", b"slabs", b"noreply",
            b"HTTP/1.1", b"0", b"1", b"-1", b"-", b"+1", b"01", b"4294967296", b"2147483645",
            b"18446744073709551616", b"v", b"q", b"b", b"k", b"T30", b"Tx", b"N5", b"C1",
            b"E5", b"F5", b"MS", b"MA", b"M", b"Zm9v", b"O123", b"I", b"x", b"D2", b"J3",
            b"!", b"\x80", b"\t", b"\r", b"\0",
        ]).prop_map(|w| w.to_vec()),
        1 => prop::collection::vec(any::<u8>(), 1..8),
        1 => prop::collection::vec(b'a'..=b'z', 240..260),
    ]
}

/// A request line: words separated by one or more spaces, maybe a leading
/// or trailing space, and a terminator.
fn line() -> impl Strategy<Value = Vec<u8>> {
    (
        any::<bool>(),
        prop::collection::vec((word(), 1usize..3), 0..28),
        prop::sample::select(vec![&b"\r\n"[..], b"\n", b"\r\r\n", b" \r\n"]),
    )
        .prop_map(|(lead, words, end)| {
            let mut l = Vec::new();
            if lead {
                l.push(b' ');
            }
            for (i, (w, spaces)) in words.iter().enumerate() {
                if i > 0 {
                    l.extend(std::iter::repeat_n(b' ', *spaces));
                }
                l.extend_from_slice(w);
            }
            l.extend_from_slice(end);
            l
        })
}

fn memchr_count(line: &[u8]) -> usize {
    line.iter().filter(|&&b| b == b'\n').count()
}

fn is_piece_of(piece: &[u8], whole: &[u8]) -> bool {
    let (p, w) = (piece.as_ptr() as usize, whole.as_ptr() as usize);
    piece.is_empty() || (p >= w && p + piece.len() <= w + whole.len())
}

fn tokens_of<'a>(r: &Request<'a>) -> Vec<Tokens<'a>> {
    let mut all = Vec::new();
    if let Reply::Meta(m) = r.reply {
        all.push(m.tokens);
    }
    match r.command {
        Command::Stats { tokens, .. }
        | Command::LruCrawler { tokens }
        | Command::Admin { tokens } => all.push(tokens),
        _ => {}
    }
    all
}

/// Everything a parse promises about one line.
fn check_line(line: &[u8]) -> Result<(), TestCaseError> {
    let mut keys = KeyBuffer::new();
    let buffer = keys.0.as_ptr() as usize..keys.0.as_ptr() as usize + KEY_MAX_LENGTH;
    let r = parse_line(line, &mut keys);
    let in_input_or_buffer =
        |k: &[u8]| is_piece_of(k, line) || buffer.contains(&(k.as_ptr() as usize));
    for tokens in tokens_of(&r) {
        prop_assert!(tokens.count() <= 23);
        for i in 0..tokens.count() {
            let t = tokens.get(i);
            prop_assert!(!t.is_empty() && !t.contains(&b' '));
            prop_assert!(is_piece_of(t, line));
        }
    }
    match r.command {
        Command::Get { keys, .. } => {
            for k in keys {
                prop_assert!(!k.is_empty() && !k.contains(&b' '));
                prop_assert!(is_piece_of(k, line));
                // A framed line has one \n, its last byte: no key holds it.
                if memchr_count(line) == 1 {
                    prop_assert!(!k.contains(&b'\n'));
                }
            }
        }
        Command::Store(s) => {
            prop_assert!(s.key.len() <= KEY_MAX_LENGTH && !s.key.is_empty() || s.binary_key);
            prop_assert!(in_input_or_buffer(s.key));
            prop_assert!(s.value_len <= i32::MAX as usize - 2);
            prop_assert!(s.exptime >= 0);
        }
        Command::Delete(d) => {
            prop_assert!(d.key.len() <= KEY_MAX_LENGTH && in_input_or_buffer(d.key))
        }
        Command::Arith(a) => {
            prop_assert!(a.key.len() <= KEY_MAX_LENGTH && in_input_or_buffer(a.key))
        }
        Command::MetaGet(g) => {
            prop_assert!(g.key.len() <= KEY_MAX_LENGTH && in_input_or_buffer(g.key))
        }
        Command::MetaDebug { key, .. } | Command::Touch { key, .. } => {
            prop_assert!(key.len() <= KEY_MAX_LENGTH && in_input_or_buffer(key))
        }
        Command::Error { message, discard } => {
            prop_assert!(!message.is_empty() && !message.contains('\n'));
            if discard > 0 {
                // Only a storage command whose length token was valid swallows,
                // and it swallows exactly that length and its \r\n.
                let t = tokenize(line, NO_FLAGS).unwrap();
                let len_token = if t.get(0) == b"ms" { 2 } else { 4 };
                let n = tokto_i32(t.get(len_token)).unwrap();
                prop_assert_eq!(discard as i64, i64::from(n) + 2);
            }
        }
        _ => {}
    }
    Ok(())
}

/// Serves a get line the way `partial_get`'s documentation tells a server
/// to, with the line arriving in the given pieces; returns the keys served
/// and the line's touch/with_cas, or None if the line was not streamed.
/// What a streamed get served: its keys, its touch, its with_cas.
type Streamed = (Vec<Vec<u8>>, Result<Option<i64>, &'static str>, bool);

fn stream(pieces: &[&[u8]]) -> Option<Streamed> {
    let mut buf: Vec<u8> = Vec::new();
    let mut served = Vec::new();
    let mut state = None;
    for piece in pieces {
        buf.extend_from_slice(piece);
        if state.is_none() {
            if buf.contains(&b'\n') {
                return None;
            }
            let pg = partial_get(&buf)?;
            buf.drain(..pg.keys_start);
            state = Some((pg.touch, pg.with_cas));
        }
        let (content, done) = match buf.iter().position(|&b| b == b'\n') {
            Some(nl) => {
                let end = if nl > 0 && buf[nl - 1] == b'\r' {
                    nl - 1
                } else {
                    nl
                };
                (buf[..end].to_vec(), true)
            }
            None => (buf.clone(), false),
        };
        // Complete keys: those followed by a space (all of them once the line
        // is done).
        let complete = if done {
            content.len()
        } else {
            content
                .iter()
                .rposition(|&b| b == b' ')
                .map_or(0, |p| p + 1)
        };
        served.extend(
            content[..complete]
                .split(|&b| b == b' ')
                .filter(|k| !k.is_empty())
                .map(<[u8]>::to_vec),
        );
        if done {
            let (touch, with_cas) = state?;
            return Some((served, touch, with_cas));
        }
        buf.drain(..complete);
    }
    None
}

proptest! {
    #[test]
    fn any_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..700)) {
        let mut keys = KeyBuffer::new();
        let _ = parse_line(&bytes, &mut keys);
        let _ = frame(&bytes);
        let _ = partial_get(&bytes);
        for mstart in [2, 3, NO_FLAGS] {
            if let Some(t) = tokenize(&bytes, mstart) {
                for i in 0..t.count() {
                    prop_assert!(!t.get(i).is_empty());
                }
            }
        }
        let mut with_newline = bytes.clone();
        with_newline.push(b'\n');
        check_line(&with_newline)?;
    }

    #[test]
    fn structured_lines_keep_their_promises(l in line()) {
        check_line(&l)?;
    }

    #[test]
    fn storage_discards_what_it_announced(
        cmd in prop::sample::select(vec![&b"set"[..], b"cas", b"ms", b"append"]),
        key in prop::sample::select(vec![b"k".to_vec(), vec![b'k'; 251], b"Zm9v".to_vec(), b"!".to_vec()]),
        len in prop::sample::select(vec![&b"0"[..], b"5", b"-1", b"x", b"01", b"2147483645", b"2147483646", b"-"]),
        rest in prop::collection::vec(word(), 0..5),
    ) {
        let mut l = [cmd, &key[..]].join(&b' ');
        if cmd != b"ms" {
            l.extend_from_slice(b" 0 0");
        }
        l.push(b' ');
        l.extend_from_slice(len);
        for w in &rest {
            l.push(b' ');
            l.extend_from_slice(w);
        }
        l.extend_from_slice(b"\r\n");
        let mut keys = KeyBuffer::new();
        // mcmc reads a lone '-' as 0; otherwise these are plain decimals.
        let announced = match len {
            b"-" => Some(0),
            b"+1" => None,
            _ => std::str::from_utf8(len).ok().and_then(|s| s.parse::<i64>().ok()),
        };
        match parse_line(&l, &mut keys).command {
            Command::Store(s) => {
                prop_assert_eq!(Some(s.value_len as i64), announced);
            }
            Command::Error { discard, .. } if discard > 0 => {
                prop_assert_eq!(Some(discard as i64 - 2), announced);
            }
            Command::Error { .. } => {
                // Nothing swallowed: the length was refused (or never read).
                let valid = matches!(announced, Some(n) if (0..=i32::MAX as i64 - 2).contains(&n));
                let t = tokenize(&l, NO_FLAGS).unwrap();
                let enough = t.count() >= if cmd == b"ms" { 3 } else { 5 };
                prop_assert!(!valid || !enough || cmd == b"ms");
            }
            other => prop_assert!(false, "{:?}", other),
        }
    }

    #[test]
    fn framing_does_not_depend_on_how_bytes_arrive(l in line(), tail in prop::collection::vec(any::<u8>(), 0..20), cut in any::<prop::sample::Index>()) {
        let mut stream_bytes = l.clone();
        stream_bytes.extend_from_slice(&tail);
        let first_nl = stream_bytes.iter().position(|&b| b == b'\n').unwrap();
        prop_assert_eq!(frame(&stream_bytes), Frame::Line(first_nl + 1));
        let at = cut.index(first_nl + 1);
        // Before its newline a short line is always waiting for more.
        prop_assert_eq!(frame(&stream_bytes[..at]), if at > LINE_LIMIT { frame(&stream_bytes[..at]) } else { Frame::Incomplete });
        let mut k1 = KeyBuffer::new();
        let mut k2 = KeyBuffer::new();
        let whole = format!("{:?}", parse_line(&stream_bytes[..first_nl + 1], &mut k1));
        let again = format!("{:?}", parse_line(&l[..first_nl + 1], &mut k2));
        prop_assert_eq!(whole, again);
    }

    #[test]
    fn long_lines_close_unless_they_are_gets(prefix in prop::sample::select(vec![&b"get "[..], b"gets ", b"gat ", b"set ", b"  get ", b"mg "]), n in 2049usize..4000) {
        let mut l = prefix.to_vec();
        l.resize(n, b'k');
        let expect = if prefix.trim_ascii_start().starts_with(b"get") { Frame::Incomplete } else { Frame::Close };
        prop_assert_eq!(frame(&l), expect);
    }

    #[test]
    fn a_streamed_get_serves_the_keys_of_the_whole_line(
        cmd in prop::sample::select(vec![&b"get"[..], b"gets", b"gat 30", b"gats -1", b"gat x"]),
        keys in prop::collection::vec((prop::collection::vec(prop_oneof![b'a'..=b'z', Just(b'\r'), Just(0u8), Just(b'\t')], 1..20), 1usize..4), 1..40),
        crlf in any::<bool>(),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..6),
    ) {
        let mut l = cmd.to_vec();
        for (k, spaces) in &keys {
            l.extend(std::iter::repeat_n(b' ', *spaces));
            l.extend_from_slice(k);
        }
        l.extend_from_slice(if crlf { b"\r\n" } else { b"\n" });
        let mut points: Vec<usize> = cuts.iter().map(|c| c.index(l.len())).collect();
        points.push(0);
        points.push(l.len());
        points.sort_unstable();
        points.dedup();
        let pieces: Vec<&[u8]> = points.windows(2).map(|w| &l[w[0]..w[1]]).collect();
        let mut kb = KeyBuffer::new();
        let parsed = parse_line(&l, &mut kb);
        // Not streamed (None): the whole line arrived at once, or its start
        // was not far enough along when the newline came.
        if let Some((served, touch, with_cas)) = stream(&pieces) {
            match parsed.command {
                Command::Get { keys, touch: t, with_cas: w } => {
                    prop_assert_eq!(served, keys.map(<[u8]>::to_vec).collect::<Vec<_>>());
                    prop_assert_eq!(touch, Ok(t));
                    prop_assert_eq!(with_cas, w);
                }
                Command::Error { message, .. } => prop_assert_eq!(touch, Err(message)),
                other => prop_assert!(false, "{:?}", other),
            }
        }
    }
}
