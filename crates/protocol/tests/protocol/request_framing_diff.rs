//! The server's request parser and osmium-proxy's request framer read the
//! same client byte streams alike: where each request ends, whether it is
//! answered, and, where both accept it, its command and keys (the rules
//! are in `framing_diff`, shared with the `request_framing_diff` fuzz
//! target). Streams are generated from valid and invalid commands (odd
//! spacing, bad numbers, long keys, `noreply` and `q` in odd places, data
//! blocks of the wrong length) and cut at a random point; the regression
//! cases below are disagreements that were found and fixed.

use crate::framing_diff;

use proptest::prelude::*;

fn word() -> impl Strategy<Value = Vec<u8>> {
    let words: Vec<&'static str> = vec![
        "get",
        "gets",
        "gat",
        "gats",
        "set",
        "add",
        "replace",
        "append",
        "prepend",
        "cas",
        "delete",
        "incr",
        "decr",
        "touch",
        "mg",
        "ms",
        "md",
        "ma",
        "me",
        "mn",
        "version",
        "flush_all",
        "verbosity",
        "stats",
        "shutdown",
        "slabs",
        "watch",
        "foo",
        "quit",
        "GET",
    ];
    prop_oneof![
        8 => proptest::sample::select(words).prop_map(|w| w.as_bytes().to_vec()),
        1 => Just(b" set".to_vec()),
        1 => Just(b" get".to_vec()),
        1 => Just(b"mn".to_vec()),
    ]
}

fn arg() -> impl Strategy<Value = Vec<u8>> {
    let args: Vec<&'static str> = vec![
        "k",
        "key",
        "a",
        "b",
        "0",
        "1",
        "3",
        "5",
        "10",
        "-1",
        "-",
        "-0",
        "+5",
        "05",
        "000000000005",
        "2147483645",
        "2147483646",
        "2147483647",
        "4294967296",
        "99999999999",
        "noreply",
        "q",
        "qx",
        "v",
        "b",
        "bx",
        "T30",
        "N0",
        "MS",
        "ME",
        "O123",
        "!",
        "k\t",
        "k\r",
        "a2V5",
        "HTTP/1.1",
        "t",
        "c",
        "f",
    ];
    prop_oneof![
        10 => proptest::sample::select(args).prop_map(|a| a.as_bytes().to_vec()),
        1 => (250usize..253).prop_map(|n| vec![b'x'; n]),
        1 => proptest::collection::vec(any::<u8>(), 1..4)
            .prop_map(|v| v.into_iter().filter(|&b| b != b' ' && b != b'\n').collect()),
    ]
}

fn spaces() -> impl Strategy<Value = &'static [u8]> {
    prop_oneof![8 => Just(&b" "[..]), 1 => Just(&b"  "[..])]
}

fn end() -> impl Strategy<Value = &'static [u8]> {
    prop_oneof![8 => Just(&b"\r\n"[..]), 1 => Just(&b"\n"[..]), 1 => Just(&b" \r\n"[..])]
}

/// One request line, and a data block after it (sized from one of its
/// numbers, give or take).
fn command() -> impl Strategy<Value = Vec<u8>> {
    (
        word(),
        proptest::collection::vec((spaces(), arg()), 0..8),
        end(),
        any::<bool>(),
        prop_oneof![Just(0i64), Just(0), Just(-1), Just(1), Just(2)],
        any::<u8>(),
    )
        .prop_map(|(word, args, end, block, skew, fill)| {
            let mut req = word;
            let mut size = None;
            for (sep, a) in &args {
                req.extend_from_slice(sep);
                req.extend_from_slice(a);
                if let Some(n) = std::str::from_utf8(a)
                    .ok()
                    .and_then(|s| s.parse::<i64>().ok())
                {
                    if (0..64).contains(&n) && size.is_none() {
                        size = Some(n);
                    }
                }
            }
            req.extend_from_slice(end);
            if block {
                let n = (size.unwrap_or(3) + skew).max(0) as usize;
                req.extend(std::iter::repeat_n(fill, n));
                req.extend_from_slice(b"\r\n");
            }
            req
        })
}

fn stream() -> impl Strategy<Value = (Vec<u8>, usize)> {
    proptest::collection::vec(command(), 1..8).prop_flat_map(|cmds| {
        let bytes = cmds.concat();
        let len = bytes.len();
        (Just(bytes), 0..=len)
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4000, ..ProptestConfig::default() })]

    #[test]
    fn both_parsers_read_a_stream_alike((bytes, cut) in stream()) {
        if let Err(e) = framing_diff::check(&bytes, cut) {
            prop_assert!(false, "{}", e);
        }
    }
}

#[track_caller]
fn agrees(stream: &[u8]) {
    for cut in 0..=stream.len() {
        if let Err(e) = framing_diff::check(stream, cut) {
            panic!("{e}");
        }
    }
}

#[test]
fn well_formed_requests_agree() {
    agrees(b"get a b c\r\ngets a\r\ngat 10 a b\r\nset k 0 0 5\r\nhello\r\n");
    agrees(b"cas k 1 2 3 4 noreply\r\nabc\r\ndelete k\r\nincr k 5 noreply\r\ntouch k 10\r\n");
    agrees(b"mg k v t q\r\nms k 2 T0 q\r\nhi\r\nmd k q\r\nma k\r\nme k\r\nmn\r\n");
    agrees(b"flush_all\r\nflush_all 10 noreply\r\nversion\r\nverbosity 1\r\nquit\r\n");
}

/// A storage line with tokens after the ones it reads still carries its
/// data block: the proxy answered `ERROR` and read the block as commands
/// (here a `flush_all` the client stored as a value).
#[test]
fn extra_storage_tokens_keep_the_block() {
    agrees(b"set k 0 0 9 x y\r\nflush_all\r\nget k\r\n");
    agrees(b"cas k 0 0 9 1 x noreply\r\nflush_all\r\n");
}

/// Data lengths are mcmc's 32-bit numbers: `-` is 0, leading zeros count
/// towards 11 bytes, nothing past INT_MAX - 2.
#[test]
fn data_lengths_as_memcached_reads_them() {
    agrees(b"set k 0 0 -\r\n\r\nget k\r\n");
    agrees(b"set k 0 0 -0\r\n\r\nms k -\r\n\r\n");
    agrees(b"set k 0 0 000000000005\r\nhello\r\n");
    agrees(b"set k 0 0 2147483646\r\nget k\r\n");
    agrees(b"ms k 2147483646\r\nget k\r\n");
}

/// A line starting with a space is no get or set to memcached: `ERROR`,
/// and what follows is the next request.
#[test]
fn a_leading_space_is_no_command() {
    agrees(b" set k 0 0 5\r\nhello\r\n quit\r\n get k\r\n flush_all\r\n");
}

/// Replies hidden or shown as memcached hides them: `noreply` is the last
/// of 23 tokens, and hides refused lines' errors too.
#[test]
fn noreply_as_memcached_reads_it() {
    agrees(b"flush_all noreply\r\nverbosity 1 noreply\r\nfoo noreply\r\ndelete noreply\r\n");
    agrees(b"set k 0 0 1 noreply\r\nxyz\r\nincr k x noreply\r\ntouch k x noreply\r\n");
    let mut many = b"delete k".to_vec();
    for _ in 0..22 {
        many.extend_from_slice(b" noreply");
    }
    many.extend_from_slice(b" x\r\nget k\r\n");
    agrees(&many);
}

/// Meta flags are read by their first byte (`qx` is `q`, `bx` is `b`), a
/// flag memcached's tokenizer refuses refuses the line (an `ms` block is
/// swallowed), and `me` decodes its key only as memcached does.
#[test]
fn meta_flags_as_memcached_reads_them() {
    agrees(b"mg k qx v\r\nmd a2V5 bx\r\nmg k q q\r\nmg k v !\r\nms k 5 !\r\nhello\r\n");
    agrees(b"me a2V5 b\r\nme a2V5 b x\r\nme k q\r\n");
}

/// Lines memcached closes the connection at: no `\n` in 2048 bytes (but a
/// get's), and an HTTP request line.
#[test]
fn lines_memcached_closes_at() {
    let mut long = b"set k 0 0 1 ".to_vec();
    long.resize(3000, b'x');
    agrees(&long);
    agrees(b"GET / HTTP/1.1\r\nget k\r\n");
}
