//! The classic commands: accepted forms and every error path.

use super::{command, err, keys, line_of, noreply, with};
use crate::ascii::{BAD_FORMAT, ERROR, INVALID_DELTA, INVALID_EXPTIME};
use crate::ascii::{MEMLIMIT_NOT_BYTES, MEMLIMIT_TOO_SMALL};
use crate::request::{
    Arith, Command, Delete, Keys, Reply, ShutdownMode, Store, StoreMode, REALTIME_MAXDELTA,
};

const PAST: i64 = REALTIME_MAXDELTA + 1;

fn store(
    mode: StoreMode,
    key: &'static [u8],
    flags: u32,
    exptime: i64,
    value_len: usize,
    cas: u64,
) -> Command<'static> {
    Command::Store(Store {
        mode,
        key,
        flags,
        exptime,
        value_len,
        cas,
        new_cas: None,
        stale_if_older: false,
        binary_key: false,
        create_exptime: None,
    })
}

#[test]
fn short_lines_are_bad_format() {
    // Checked against memcached 1.6.45: "mn\n" (3 bytes) is too short.
    for line in [
        &b""[..],
        b"\n",
        b"a\n",
        b"\r\n",
        b"ab\n",
        b"mn\n",
        b"\r\r\n",
    ] {
        assert_eq!(err(line), (BAD_FORMAT, 0, false), "{line:?}");
    }
    assert_eq!(err(b"ab\r\n"), (ERROR, 0, false));
    assert_eq!(err(b"abc\n"), (ERROR, 0, false));
}

#[test]
fn get_keys_come_from_the_raw_line() {
    assert_eq!(keys(b"get a\r\n"), [b"a"]);
    assert_eq!(keys(b"get a\n"), [b"a"]);
    assert_eq!(keys(b"get a  bb   c \r\n"), [&b"a"[..], b"bb", b"c"]);
    assert_eq!(keys(b"get  a\r\n"), [b"a"]);
    // Any byte but a space is a key byte; only the final \r\n (or \n) ends
    // the line.
    assert_eq!(keys(b"get a\0b\tc\r\n"), [b"a\0b\tc"]);
    assert_eq!(keys(b"get a\r\r\n"), [b"a\r"]);
    assert_eq!(keys(b"get a\rb\n"), [b"a\rb"]);
    // Keys over 250 bytes are the executor's to refuse, in order.
    let long = line_of(&[b"get a ", &[b'k'; 251], b" b\r\n"]);
    assert_eq!(keys(&long).len(), 3);
    // Any number of keys: the tokenizer keeps 23 tokens, the keys run on.
    let many: Vec<u8> = line_of(&[
        b"get",
        &(0..500)
            .flat_map(|i| format!(" k{i}").into_bytes())
            .collect::<Vec<_>>(),
        b"\r\n",
    ]);
    let ks = keys(&many);
    assert_eq!(ks.len(), 500);
    assert_eq!(ks[499], b"k499");
    assert!(with(b"gets a b\r\n", |r| matches!(
        r.command,
        Command::Get {
            with_cas: true,
            touch: None,
            ..
        }
    )));
    assert!(with(b"get a\r\n", |r| matches!(
        r.command,
        Command::Get {
            with_cas: false,
            touch: None,
            ..
        }
    )));
}

#[test]
fn get_errors_and_noreply() {
    // Checked against memcached 1.6.45.
    assert_eq!(err(b"get\n"), (BAD_FORMAT, 0, false));
    assert_eq!(err(b"get \r\n"), (BAD_FORMAT, 0, false));
    assert_eq!(err(b"get    \r\n"), (BAD_FORMAT, 0, false));
    assert_eq!(err(b"gets\r\n"), (BAD_FORMAT, 0, false));
    // A leading space: the command word is empty.
    assert_eq!(err(b" get a\r\n"), (ERROR, 0, false));
    assert_eq!(err(b"get\ta\r\n"), (ERROR, 0, false));
    assert_eq!(err(b"GET a\r\n"), (ERROR, 0, false));
    // noreply is the last token, which is also looked up as a key.
    assert!(noreply(b"get a noreply\r\n"));
    assert_eq!(keys(b"get a noreply\r\n"), [&b"a"[..], b"noreply"]);
    assert!(noreply(b"get noreply\r\n"));
    assert!(!noreply(b"get noreply a\r\n"));
    // With more than 23 tokens, the 23rd is the "last".
    let tail: Vec<u8> = (0..30)
        .flat_map(|i| format!(" k{i}").into_bytes())
        .collect();
    assert!(!noreply(&line_of(&[b"get", &tail, b" noreply\r\n"])));
    let mut at_23: Vec<u8> = b"get".to_vec();
    for i in 0..21 {
        at_23.extend_from_slice(format!(" k{i}").as_bytes());
    }
    at_23.extend_from_slice(b" noreply k21 k22\r\n");
    assert!(noreply(&at_23));
}

#[test]
fn gat() {
    let touch = |line: &[u8]| {
        with(line, |r| match r.command {
            Command::Get {
                touch, with_cas, ..
            } => (touch, with_cas),
            other => panic!("{other:?}"),
        })
    };
    assert_eq!(touch(b"gat 10 a b\r\n"), (Some(10), false));
    assert_eq!(touch(b"gats 10 a\r\n"), (Some(10), true));
    assert_eq!(touch(b"gat -1 a\r\n"), (Some(PAST), false));
    // Checked against memcached 1.6.45: a lone '-' is 0 to mcmc.
    assert_eq!(touch(b"gat - a\r\n"), (Some(0), false));
    assert_eq!(keys(b"gat 10  a  b\r\n"), [b"a", b"b"]);
    assert_eq!(err(b"gat 10\r\n"), (BAD_FORMAT, 0, false));
    assert_eq!(err(b"gat\r\n"), (BAD_FORMAT, 0, false));
    assert_eq!(err(b"gat x a\r\n"), (INVALID_EXPTIME, 0, false));
    assert_eq!(err(b"gat +1 a\r\n"), (INVALID_EXPTIME, 0, false));
    assert_eq!(err(b"gat 2147483648 a\r\n"), (INVALID_EXPTIME, 0, false));
    // gat has no noreply check.
    assert!(!noreply(b"gat 1 a noreply\r\n"));
    assert_eq!(err(b"gat x a noreply\r\n"), (INVALID_EXPTIME, 0, false));
}

#[test]
fn storage_accepted_forms() {
    let set = |line: &[u8]| {
        with(line, |r| {
            (format!("{:?}", r.command), r.reply == Reply::TEXT)
        })
    };
    assert_eq!(
        set(b"set k 5 10 3\r\n"),
        (
            format!("{:?}", store(StoreMode::Set, b"k", 5, 10, 3, 0)),
            true
        )
    );
    assert_eq!(
        set(b"set k 5 10 3\n").0,
        format!("{:?}", store(StoreMode::Set, b"k", 5, 10, 3, 0))
    );
    assert_eq!(
        command(b"add k 0 0 1\r\n"),
        format!("{:?}", store(StoreMode::Add, b"k", 0, 0, 1, 0))
    );
    assert_eq!(
        command(b"replace k 0 0 1\r\n"),
        format!("{:?}", store(StoreMode::Replace, b"k", 0, 0, 1, 0))
    );
    assert_eq!(
        command(b"append k 0 0 1\r\n"),
        format!("{:?}", store(StoreMode::Append, b"k", 0, 0, 1, 0))
    );
    assert_eq!(
        command(b"prepend k 0 0 1\r\n"),
        format!("{:?}", store(StoreMode::Prepend, b"k", 0, 0, 1, 0))
    );
    assert_eq!(
        command(b"cas k 0 0 1 99\r\n"),
        format!("{:?}", store(StoreMode::Cas, b"k", 0, 0, 1, 99))
    );
    assert_eq!(
        command(b"set k 0 -1 1\r\n"),
        format!("{:?}", store(StoreMode::Set, b"k", 0, PAST, 1, 0))
    );
    assert_eq!(
        command(b"set k 0 0 2147483645\r\n"),
        format!("{:?}", store(StoreMode::Set, b"k", 0, 0, 2147483645, 0))
    );
    // Checked against memcached 1.6.45: extra tokens are ignored, noreply is
    // the last token.
    assert!(noreply(b"set k 0 0 1 noreply\r\n"));
    assert!(noreply(b"set k 0 0 1 extra noreply\r\n"));
    assert!(!noreply(b"set k 0 0 1 noreply extra\r\n"));
    let many = line_of(&[b"set k 0 0 1 ", &b"a ".repeat(20), b"noreply\r\n"]);
    assert!(!noreply(&many));
    assert!(with(&many, |r| matches!(r.command, Command::Store(_))));
}

#[test]
fn storage_numbers() {
    let flags_exptime = |line: &[u8]| {
        with(line, |r| match r.command {
            Command::Store(s) => (s.flags, s.exptime, s.value_len),
            other => panic!("{other:?}"),
        })
    };
    // Checked against memcached 1.6.45: flags and exptime are C numbers read
    // from the raw line, stored into 32 bits.
    assert_eq!(flags_exptime(b"set k +0 0 1\r\n"), (0, 0, 1));
    assert_eq!(flags_exptime(b"set k 4294967296 0 1\r\n"), (0, 0, 1));
    assert_eq!(
        flags_exptime(b"set k 18446744073709551615 0 1\r\n"),
        (u32::MAX, 0, 1)
    );
    assert_eq!(
        flags_exptime(b"set k -18446744073709551615 0 1\r\n"),
        (1, 0, 1)
    );
    assert_eq!(flags_exptime(b"set k 0 4294967297 1\r\n"), (0, 1, 1));
    assert_eq!(flags_exptime(b"set k -0 -0 1\r\n"), (0, 0, 1));
    assert_eq!(flags_exptime(b"set k 0\t 0 1\r\n"), (0, 0, 1));
    assert_eq!(flags_exptime(b"set k 5\x00x 0 1\r\n"), (5, 0, 1));
    assert_eq!(flags_exptime(b"set k 5 0\x0b 1\r\n"), (5, 0, 1));
    assert_eq!(flags_exptime(b"set k 5 \t7 1\r\n"), (5, 7, 1));
    // A white-space token: strtoul skips into the next token.
    assert_eq!(flags_exptime(b"set k \t 0 1\r\n"), (0, 0, 1));
    // The length is mcmc's: 11 bytes at most, digits only.
    assert_eq!(flags_exptime(b"set k 0 0 00000000001\r\n"), (0, 0, 1));
    assert_eq!(flags_exptime(b"set k 0 0 -0\r\n"), (0, 0, 0));
}

#[test]
fn storage_errors() {
    // Checked against memcached 1.6.45: too few tokens and a bad length
    // are process_request's BAD_FORMAT: shown, nothing swallowed.
    assert_eq!(err(b"set k 0 0\r\n"), (BAD_FORMAT, 0, false));
    assert_eq!(err(b"set\r\n"), (BAD_FORMAT, 0, false));
    assert_eq!(err(b"set k 0 0 -1\r\n"), (BAD_FORMAT, 0, false));
    assert_eq!(err(b"set k 0 0 -1 noreply\r\n"), (BAD_FORMAT, 0, false));
    assert_eq!(err(b"set k 0 0 +1\r\n"), (BAD_FORMAT, 0, false));
    assert_eq!(err(b"set k 0 0 000000000001\r\n"), (BAD_FORMAT, 0, false));
    assert_eq!(err(b"set k 0 0 x\r\n"), (BAD_FORMAT, 0, false));
    assert_eq!(err(b"set k 0 0 2147483646\r\n"), (BAD_FORMAT, 0, false));
    assert_eq!(err(b"cas k 0 0 -1 5\r\n"), (BAD_FORMAT, 0, false));
    // Once the length is known, errors swallow the data block and obey
    // noreply.
    let long = line_of(&[b"set ", &[b'k'; 251], b" 0 0 3\r\n"]);
    assert_eq!(err(&long), (BAD_FORMAT, 5, false));
    let long = line_of(&[b"set ", &[b'k'; 251], b" 0 0 3 noreply\r\n"]);
    assert_eq!(err(&long), (BAD_FORMAT, 5, true));
    let ok = line_of(&[b"set ", &[b'k'; 250], b" 0 0 3\r\n"]);
    assert!(with(&ok, |r| matches!(r.command, Command::Store(_))));
    assert_eq!(err(b"set k x 0 1 noreply\r\n"), (BAD_FORMAT, 3, true));
    assert_eq!(err(b"set k -1 0 1\r\n"), (BAD_FORMAT, 3, false));
    assert_eq!(err(b"set k 0 x 1\r\n"), (BAD_FORMAT, 3, false));
    assert_eq!(err(b"set k 0 1.5 1\r\n"), (BAD_FORMAT, 3, false));
    assert_eq!(err(b"set k 5x 0 1\r\n"), (BAD_FORMAT, 3, false));
    assert_eq!(
        err(b"set k 0 9223372036854775808 10\r\n"),
        (BAD_FORMAT, 12, false)
    );
    assert_eq!(
        err(b"set k 18446744073709551616 0 0\r\n"),
        (BAD_FORMAT, 2, false)
    );
    // cas needs its sixth token, an mcmc u64.
    assert_eq!(err(b"cas k 0 0 1\r\n"), (BAD_FORMAT, 3, false));
    assert_eq!(err(b"cas k 0 0 1 noreply\r\n"), (BAD_FORMAT, 3, true));
    assert_eq!(err(b"cas k 0 0 1 -1\r\n"), (BAD_FORMAT, 3, false));
    assert_eq!(
        err(b"cas k 0 0 1 18446744073709551616\r\n"),
        (BAD_FORMAT, 3, false)
    );
    assert_eq!(
        command(b"cas k 0 0 1 18446744073709551615 noreply\r\n"),
        format!("{:?}", store(StoreMode::Cas, b"k", 0, 0, 1, u64::MAX))
    );
}

#[test]
fn delete() {
    let del = |key: &'static [u8]| {
        format!(
            "{:?}",
            Command::Delete(Delete {
                key,
                ..Delete::default()
            })
        )
    };
    assert_eq!(command(b"delete k\r\n"), del(b"k"));
    // Checked against memcached 1.6.45: 1.6.45 ignores any further tokens.
    assert_eq!(command(b"delete k 0\r\n"), del(b"k"));
    assert_eq!(command(b"delete k 1 2 3\r\n"), del(b"k"));
    assert!(noreply(b"delete k noreply\r\n"));
    assert!(noreply(b"delete k 0 noreply\r\n"));
    assert_eq!(err(b"delete\r\n"), (BAD_FORMAT, 0, false));
    assert_eq!(err(b"delete \r\n"), (BAD_FORMAT, 0, false));
    let long = line_of(&[b"delete ", &[b'k'; 251], b" noreply\r\n"]);
    assert_eq!(err(&long), (BAD_FORMAT, 0, true));
}

#[test]
fn incr_decr() {
    let arith = |incr, delta| {
        format!(
            "{:?}",
            Command::Arith(Arith {
                key: b"k",
                incr,
                delta,
                create: None,
                if_cas: 0,
                new_cas: None,
                exptime: None,
                binary_key: false
            })
        )
    };
    assert_eq!(command(b"incr k 5\r\n"), arith(true, 5));
    assert_eq!(
        command(b"decr k 18446744073709551615 x\r\n"),
        arith(false, u64::MAX)
    );
    assert!(noreply(b"incr k 1 noreply\r\n"));
    assert_eq!(err(b"incr k\r\n"), (BAD_FORMAT, 0, false));
    assert_eq!(err(b"decr\r\n"), (BAD_FORMAT, 0, false));
    assert_eq!(err(b"incr k x\r\n"), (INVALID_DELTA, 0, false));
    assert_eq!(err(b"incr k -1\r\n"), (INVALID_DELTA, 0, false));
    assert_eq!(err(b"incr k +1\r\n"), (INVALID_DELTA, 0, false));
    assert_eq!(
        err(b"incr k 18446744073709551616\r\n"),
        (INVALID_DELTA, 0, false)
    );
    // Checked against memcached 1.6.45: the delta is "noreply", and the
    // error is hidden.
    assert_eq!(err(b"incr k noreply\r\n"), (INVALID_DELTA, 0, true));
    let long = line_of(&[b"incr ", &[b'k'; 251], b" x\r\n"]);
    assert_eq!(err(&long), (BAD_FORMAT, 0, false));
}

#[test]
fn touch() {
    let t = |exptime| format!("{:?}", Command::Touch { key: b"k", exptime });
    assert_eq!(command(b"touch k 10\r\n"), t(10));
    assert_eq!(command(b"touch k -1\r\n"), t(PAST));
    // Checked against memcached 1.6.45.
    assert_eq!(command(b"touch k -\r\n"), t(0));
    assert!(noreply(b"touch k 1 noreply\r\n"));
    assert_eq!(err(b"touch k\r\n"), (BAD_FORMAT, 0, false));
    assert_eq!(err(b"touch k x noreply\r\n"), (INVALID_EXPTIME, 0, true));
    assert_eq!(err(b"touch k 2147483648\r\n"), (INVALID_EXPTIME, 0, false));
    let long = line_of(&[b"touch ", &[b'k'; 251], b" x\r\n"]);
    assert_eq!(err(&long), (BAD_FORMAT, 0, false));
}

#[test]
fn flush_all() {
    let delay = |line: &[u8]| {
        with(line, |r| match r.command {
            Command::FlushAll { delay } => {
                (delay, matches!(r.reply, Reply::Text { noreply: true }))
            }
            other => panic!("{other:?}"),
        })
    };
    assert_eq!(delay(b"flush_all\r\n"), (Some(0), false));
    assert_eq!(delay(b"flush_all noreply\r\n"), (Some(0), true));
    assert_eq!(delay(b"flush_all 10\r\n"), (Some(10), false));
    assert_eq!(delay(b"flush_all -5 noreply\r\n"), (Some(-5), true));
    assert_eq!(delay(b"flush_all 10 20\r\n"), (Some(10), false));
    assert_eq!(delay(b"flush_all x\r\n"), (None, false));
    // Checked against memcached 1.6.45: noreply not last is the delay.
    assert_eq!(delay(b"flush_all noreply 10\r\n"), (None, false));
    // The command is found by its first token: leading spaces are fine.
    assert_eq!(delay(b"  flush_all 3\r\n"), (Some(3), false));
}

#[test]
fn small_commands() {
    assert_eq!(command(b"version\r\n"), "Version");
    assert_eq!(command(b"version x\r\n"), "Version");
    assert_eq!(command(b"quit\n"), "Quit");
    assert_eq!(command(b"quit now\r\n"), "Quit");
    assert_eq!(err(b"versions\r\n"), (ERROR, 0, false));
    assert_eq!(err(b" quit\r\n"), (ERROR, 0, false));
    assert_eq!(command(b"verbosity 1\r\n"), "Verbosity { level: 1 }");
    assert!(noreply(b"verbosity 1 noreply\r\n"));
    assert_eq!(err(b"verbosity\r\n"), (BAD_FORMAT, 0, false));
    assert_eq!(err(b"verbosity noreply\r\n"), (BAD_FORMAT, 0, true));
    assert_eq!(err(b"verbosity -1\r\n"), (BAD_FORMAT, 0, false));
    assert_eq!(
        command(b"verbosity 4294967295\r\n"),
        "Verbosity { level: 4294967295 }"
    );
    // Checked against memcached 1.6.45.
    assert_eq!(err(b"cache_memlimit 7\r\n"), (MEMLIMIT_TOO_SMALL, 0, false));
    assert_eq!(err(b"cache_memlimit x\r\n"), (ERROR, 0, false));
    assert_eq!(err(b"cache_memlimit\r\n"), (ERROR, 0, false));
    assert_eq!(
        err(b"cache_memlimit 1000000001\r\n"),
        (MEMLIMIT_NOT_BYTES, 0, false)
    );
    assert_eq!(
        err(b"cache_memlimit 7 noreply\r\n"),
        (MEMLIMIT_TOO_SMALL, 0, true)
    );
    assert_eq!(
        command(b"cache_memlimit 8\r\n"),
        "CacheMemlimit { megabytes: 8 }"
    );
    assert_eq!(
        command(b"cache_memlimit 1000000000\r\n"),
        "CacheMemlimit { megabytes: 1000000000 }"
    );
}

#[test]
fn shutdown() {
    let mode = |line: &[u8]| {
        with(line, |r| match r.command {
            Command::Shutdown { mode } => (mode, matches!(r.reply, Reply::Text { noreply: true })),
            other => panic!("{other:?}"),
        })
    };
    assert_eq!(mode(b"shutdown\r\n"), (ShutdownMode::Immediate, false));
    assert_eq!(
        mode(b"shutdown graceful\r\n"),
        (ShutdownMode::Graceful, false)
    );
    // memcached compares with strncmp over the token's length (checked
    // against memcached 1.6.45 run with -A: "shutdown g" shuts it down
    // gracefully, "shutdown gx" is an invalid mode).
    assert_eq!(mode(b"shutdown g\r\n"), (ShutdownMode::Graceful, false));
    assert_eq!(
        mode(b"shutdown graceful\0x\r\n"),
        (ShutdownMode::Graceful, false)
    );
    assert_eq!(
        mode(b"shutdown gracefully\r\n"),
        (ShutdownMode::Invalid, false)
    );
    assert_eq!(
        mode(b"shutdown graceful x\r\n"),
        (ShutdownMode::Invalid, false)
    );
    assert_eq!(mode(b"shutdown noreply\r\n"), (ShutdownMode::Invalid, true));
}

#[test]
fn stats_and_admin_commands_keep_their_tokens() {
    with(b"stats items\r\n", |r| match r.command {
        Command::Stats { group, tokens } => {
            assert_eq!(group, Some(&b"items"[..]));
            assert_eq!(tokens.count(), 2);
            assert_eq!(r.reply, Reply::TEXT);
        }
        other => panic!("{other:?}"),
    });
    with(b"stats\r\n", |r| {
        assert!(matches!(r.command, Command::Stats { group: None, .. }))
    });
    // stats has no noreply: "stats noreply" asks for a group "noreply".
    assert!(!noreply(b"stats noreply\r\n"));
    with(b"stats cachedump 1 2\n", |r| match r.command {
        Command::Stats { tokens, .. } => assert_eq!(tokens.get(3), b"2"),
        other => panic!("{other:?}"),
    });
    for (line, name, nr) in [
        (
            &b"lru_crawler crawl all noreply\r\n"[..],
            &b"lru_crawler"[..],
            true,
        ),
        (b"slabs reassign 1 2\r\n", b"slabs", false),
        (b"lru mode flat noreply\r\n", b"lru", true),
        (b"extstore item_size 10\r\n", b"extstore", false),
        (b"refresh_certs\r\n", b"refresh_certs", false),
        (b"watch noreply\r\n", b"watch", false),
        (b"watch\r\n", b"watch", false),
    ] {
        with(line, |r| {
            let tokens = match r.command {
                Command::LruCrawler { tokens } | Command::Admin { tokens } => tokens,
                other => panic!("{other:?}"),
            };
            assert_eq!(tokens.get(0), name);
            assert_eq!(r.reply, Reply::Text { noreply: nr }, "{line:?}");
        });
    }
    assert!(with(b"lru_crawler\r\n", |r| matches!(
        r.command,
        Command::LruCrawler { .. }
    )));
    // watch is found by its first word, the others by their first token.
    assert_eq!(err(b" watch\r\n"), (ERROR, 0, false));
    assert!(with(b" slabs automove 1\r\n", |r| matches!(
        r.command,
        Command::Admin { .. }
    )));
    // Names match exactly.
    assert_eq!(err(b"slab\r\n"), (ERROR, 0, false));
    assert_eq!(err(b"lru_crawlers\r\n"), (ERROR, 0, false));
}

#[test]
fn unknown_commands() {
    assert_eq!(err(b"foo\r\n"), (ERROR, 0, false));
    // Checked against memcached 1.6.45: the unknown line's noreply hides the
    // ERROR.
    assert_eq!(err(b"foo noreply\r\n"), (ERROR, 0, true));
    assert_eq!(err(b"mx foo\r\n"), (ERROR, 0, false));
    assert_eq!(err(b"gex a\r\n"), (ERROR, 0, false));
    // Checked against memcached 1.6.45: an HTTP request line closes.
    assert_eq!(command(b"GET / HTTP/1.1\r\n"), "Close");
    assert_eq!(command(b"x HTTP/\r\n"), "Close");
    assert!(command(b"get / HTTP/1.0\r\n").starts_with("Get"));
    assert_eq!(err(b"x HTTP\r\n"), (ERROR, 0, false));
    assert_eq!(err(b"HTTP/1.1\r\n"), (ERROR, 0, false));
    assert_eq!(err(b"HTTP/1.1 x\r\n"), (ERROR, 0, false));
    // Checked against memcached 1.6.45: the "last" token of a long line is
    // its 23rd.
    let long = line_of(&[&b"x ".repeat(30), b"HTTP/1.1\r\n"]);
    assert_eq!(err(&long), (ERROR, 0, false));
}

#[test]
fn get_fast_path_agrees_with_the_tokenizer() {
    for line in [
        &b"get a\r\n"[..],
        b"get  a\r\n",
        b"get a \r\n",
        b"get a b\r\n",
        b"gets noreply\r\n",
        b"get a\n",
        b"get \x00\r\n",
    ] {
        let fast = with(line, |r| format!("{r:?}"));
        let mut spaced = line.to_vec();
        spaced.insert(line.iter().position(|&b| b == b' ').unwrap(), b' ');
        // Same keys through the general path (an extra space before the key).
        assert_eq!(keys(line), keys(&spaced));
        assert_eq!(noreply(line), noreply(&spaced));
        assert!(fast.contains("Get"));
    }
    with(b"get k\r\n", |r| {
        assert_eq!(
            r.command,
            Command::Get {
                keys: Keys::list(b"k"),
                touch: None,
                with_cas: false
            }
        )
    });
}

#[test]
fn set_fast_path_agrees_with_the_general_path() {
    use crate::ascii::parse::{store_fast, store_tokens};
    let keys: [&[u8]; 5] = [b"k", b"a\0b", b"\r", &[b'k'; 250], &[b'k'; 251]];
    let numbers: [&[u8]; 16] = [
        b"0",
        b"7",
        b"007",
        b"-1",
        b"-0",
        b"-",
        b"+1",
        b"x",
        b"4294967296",
        b"18446744073709551615",
        b"18446744073709551616",
        b"9223372036854775808",
        b"-9223372036854775808",
        b"2147483645",
        b"2147483646",
        b"000000000001",
    ];
    let mut fast = 0;
    for key in keys {
        for flags in numbers {
            for exptime in numbers {
                for len in numbers {
                    for end in [&b"\r\n"[..], b"\n", b" \r\n", b" noreply\r\n"] {
                        let line =
                            line_of(&[b"set ", key, b" ", flags, b" ", exptime, b" ", len, end]);
                        let content = line.len() - if line.ends_with(b"\r\n") { 2 } else { 1 };
                        let general = format!("{:?}", store_tokens(&line, StoreMode::Set));
                        if let Some(r) = store_fast(&line, 4, content, StoreMode::Set) {
                            fast += 1;
                            assert_eq!(format!("{r:?}"), general, "{line:?}");
                        }
                        assert_eq!(with(&line, |r| format!("{r:?}")), general, "{line:?}");
                    }
                }
            }
        }
    }
    assert!(fast > 1000, "{fast}");
}
