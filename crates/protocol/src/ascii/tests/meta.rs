//! The meta commands: accepted forms, every flag, every error path.

use super::{command, err, line_of, with};
use crate::ascii::meta::{
    opaque_too_long, BAD_TOKEN, DUPLICATE_FLAG, ERROR_DECODING_KEY, INVALID_DELTA_VALUE,
    INVALID_FLAG, INVALID_INITIAL, INVALID_MA_MODE, INVALID_MS_MODE, INVALID_OR_DUPLICATE,
    OPAQUE_TOO_LONG, OPTIONS_TOO_LONG,
};
use crate::ascii::{BAD_FORMAT, ERROR};
use crate::request::{
    Arith, Command, Delete, MetaGet, MetaReply, Reply, Store, StoreMode, REALTIME_MAXDELTA,
};

const PAST: i64 = REALTIME_MAXDELTA + 1;

/// The meta reply's (token count, first flag, quiet, binary key).
fn meta(line: &[u8]) -> (usize, usize, bool, bool) {
    with(line, |r| match r.reply {
        Reply::Meta(MetaReply {
            tokens,
            first_flag,
            quiet,
            binary_key,
        }) => (tokens.count(), first_flag, quiet, binary_key),
        other => panic!("not a meta reply: {other:?}"),
    })
}

fn mg(line: &[u8]) -> MetaGet<'static> {
    with(line, |r| match r.command {
        Command::MetaGet(g) => MetaGet { key: b"", ..g },
        other => panic!("{other:?}"),
    })
}

fn mg_key(line: &[u8]) -> Vec<u8> {
    with(line, |r| match r.command {
        Command::MetaGet(g) => g.key.to_vec(),
        other => panic!("{other:?}"),
    })
}

fn ms(line: &[u8]) -> Store<'static> {
    with(line, |r| match r.command {
        Command::Store(s) => Store { key: b"", ..s },
        other => panic!("{other:?}"),
    })
}

#[test]
fn mn() {
    // Checked against memcached 1.6.45: mn is not tokenized.
    assert_eq!(command(b"mn\r\n"), "Noop");
    assert_eq!(command(b"mn foo ! bar\r\n"), "Noop");
    assert_eq!(meta(b"mn v\r\n"), (0, 2, false, false));
    assert_eq!(err(b"mn\n"), (BAD_FORMAT, 0, false));
}

#[test]
fn mg_flags() {
    let g = mg(b"mg k v T30 N10 R5 C9 E7 q k O123 s t c f l h\r\n");
    assert_eq!(
        g,
        MetaGet {
            key: b"",
            value: true,
            record_hit: true,
            ttl: Some(30),
            vivify: Some(10),
            recache: Some(5),
            if_cas: Some(9),
            new_cas: Some(7),
            binary_key: false,
        }
    );
    assert_eq!(meta(b"mg k v T30 q\r\n"), (5, 2, true, false));
    assert_eq!(
        mg(b"mg k\r\n"),
        MetaGet {
            record_hit: true,
            ..MetaGet::default()
        }
    );
    assert_eq!(mg(b"mg k u\n"), MetaGet::default());
    assert_eq!(mg(b"mg k T-1 N-5 R-\r\n").ttl, Some(PAST));
    assert_eq!(mg(b"mg k T-1 N-5 R-\r\n").vivify, Some(PAST));
    assert_eq!(mg(b"mg k T-1 N-5 R-\r\n").recache, Some(0));
    // Every known flag is accepted by every meta command.
    assert!(mg(b"mg k x I MS F5 J1 D2 P L\r\n").record_hit);
    // Keys are any bytes but a space.
    assert_eq!(mg_key(b"mg a\0b v\r\n"), b"a\0b");
    assert_eq!(mg_key(b"mg !k\tx v\r\n"), b"!k\tx");
    assert_eq!(mg_key(b"mg k\r\r\n"), b"k\r");
    let long = line_of(&[b"mg ", &[b'k'; 250], b" v\r\n"]);
    assert_eq!(mg_key(&long).len(), 250);
    // The reply keeps every token, in order.
    with(b"mg k  O1 k   v\r\n", |r| match r.reply {
        Reply::Meta(m) => assert_eq!(m.flags().collect::<Vec<_>>(), [&b"O1"[..], b"k", b"v"]),
        other => panic!("{other:?}"),
    });
}

#[test]
fn mg_errors() {
    // Checked against memcached 1.6.45.
    assert_eq!(err(b"mg\r\n"), (BAD_FORMAT, 0, false));
    assert_eq!(err(b"mg \r\n"), (BAD_FORMAT, 0, false));
    assert_eq!(err(b"mg k v !\r\n"), (BAD_FORMAT, 0, false));
    assert_eq!(err(b"mg k \x80\r\n"), (BAD_FORMAT, 0, false));
    assert_eq!(err(b"mg k \x7f\r\n"), (BAD_FORMAT, 0, false));
    assert_eq!(err(b"mg k {\r\n"), (BAD_FORMAT, 0, false));
    assert_eq!(err(b"mg k 5\r\n"), (INVALID_FLAG, 0, false));
    assert_eq!(err(b"mg k [\r\n"), (INVALID_FLAG, 0, false));
    assert_eq!(err(b"mg k z\r\n"), (INVALID_FLAG, 0, false));
    assert_eq!(err(b"mg k v v\r\n"), (DUPLICATE_FLAG, 0, false));
    assert_eq!(err(b"mg k T1 T2\r\n"), (DUPLICATE_FLAG, 0, false));
    assert_eq!(err(b"mg k T Tx\r\n"), (DUPLICATE_FLAG, 0, false));
    // Argument errors: the last message wins, after the whole pass; a
    // duplicate or unknown flag stops at once.
    assert_eq!(err(b"mg k T\r\n"), (BAD_TOKEN, 0, false));
    assert_eq!(err(b"mg k Tx\r\n"), (BAD_TOKEN, 0, false));
    assert_eq!(err(b"mg k T+1\r\n"), (BAD_TOKEN, 0, false));
    assert_eq!(err(b"mg k N2147483648\r\n"), (BAD_TOKEN, 0, false));
    assert_eq!(err(b"mg k C-1\r\n"), (BAD_TOKEN, 0, false));
    assert_eq!(err(b"mg k E\r\n"), (BAD_TOKEN, 0, false));
    assert_eq!(err(b"mg k Tx Jx\r\n"), (INVALID_INITIAL, 0, false));
    assert_eq!(err(b"mg k Jx Tx\r\n"), (BAD_TOKEN, 0, false));
    assert_eq!(err(b"mg k Dx\r\n"), (INVALID_DELTA_VALUE, 0, false));
    assert_eq!(err(b"mg k Fx\r\n"), (BAD_FORMAT, 0, false));
    assert_eq!(err(b"mg k Tx Fx\r\n"), (BAD_TOKEN, 0, false));
    assert_eq!(err(b"mg k Tx v v\r\n"), (DUPLICATE_FLAG, 0, false));
    assert_eq!(err(b"mg k Tx 5\r\n"), (INVALID_FLAG, 0, false));
    // Key length, then token count, then flags.
    let long = line_of(&[b"mg ", &[b'k'; 251], b" v\r\n"]);
    assert_eq!(err(&long), (BAD_FORMAT, 0, false));
    // Checked against memcached 1.6.45: 20 tokens pass, 21 do not; flags
    // after the 23rd token are not checked.
    assert_eq!(
        err(&line_of(&[b"mg k ", &b"t ".repeat(17), b"v\r\n"])),
        (DUPLICATE_FLAG, 0, false)
    );
    assert_eq!(
        err(&line_of(&[b"mg k ", &b"v ".repeat(18), b"v\r\n"])),
        (OPTIONS_TOO_LONG, 0, false)
    );
    assert_eq!(
        err(&line_of(&[b"mg k ", &b"v ".repeat(24), b"!\r\n"])),
        (OPTIONS_TOO_LONG, 0, false)
    );
    assert_eq!(
        err(&line_of(&[
            b"mg ",
            &[b'k'; 251],
            &b" v".repeat(30),
            b"\r\n"
        ])),
        (BAD_FORMAT, 0, false)
    );
    // Meta errors are never hidden, whatever q says.
    with(b"mg k q v v\r\n", |r| {
        assert!(matches!(
            r.reply,
            Reply::Meta(MetaReply { quiet: false, .. })
        ))
    });
}

#[test]
fn base64_keys() {
    assert_eq!(mg_key(b"mg Zm9v b v\r\n"), b"foo");
    assert_eq!(meta(b"mg Zm9v b v\r\n"), (4, 2, false, true));
    assert!(mg(b"mg Zm9v b\r\n").binary_key);
    assert_eq!(mg_key(b"mg Zm9vAGJhcg== b\r\n"), b"foo\0bar");
    // Checked against memcached 1.6.45.
    assert_eq!(err(b"mg Zm9 b\r\n"), (ERROR_DECODING_KEY, 0, false));
    assert_eq!(err(b"mg k b\r\n"), (ERROR_DECODING_KEY, 0, false));
    assert_eq!(err(b"mg Zm9v b b\r\n"), (DUPLICATE_FLAG, 0, false));
    assert_eq!(err(b"mg k b Tx\r\n"), (BAD_TOKEN, 0, false));
    assert_eq!(err(b"mg k Tx b\r\n"), (ERROR_DECODING_KEY, 0, false));
    assert_eq!(err(b"ma k b\r\n"), (INVALID_OR_DUPLICATE, 0, false));
    with(b"md Zm9v b q\r\n", |r| match r.command {
        Command::Delete(d) => assert_eq!((d.key, d.binary_key), (&b"foo"[..], true)),
        other => panic!("{other:?}"),
    });
    with(b"ma Zm9v b\r\n", |r| match r.command {
        Command::Arith(a) => assert_eq!((a.key, a.binary_key), (&b"foo"[..], true)),
        other => panic!("{other:?}"),
    });
    // A 248-byte base64 key decodes to 186 bytes.
    let long = line_of(&[b"mg ", &[b'A'; 248], b" b\r\n"]);
    assert_eq!(mg_key(&long).len(), 186);
    let long = line_of(&[b"mg ", &[b'A'; 246], b"== b\r\n"]);
    assert_eq!(mg_key(&long).len(), 184);
}

#[test]
fn opaque_lengths() {
    let o32 = line_of(&[b"O", &[b'x'; 31]]);
    let o33 = line_of(&[b"O", &[b'x'; 32]]);
    // Checked against memcached 1.6.45: md refuses before the lookup.
    assert_eq!(
        err(&line_of(&[b"md k ", &o33, b"\r\n"])),
        (OPAQUE_TOO_LONG, 0, false)
    );
    assert!(with(&line_of(&[b"md k ", &o32, b"\r\n"]), |r| matches!(
        r.command,
        Command::Delete(_)
    )));
    // mg, ms and ma parse; the server checks where memcached does.
    for line in [
        line_of(&[b"mg k v ", &o33, b"\r\n"]),
        line_of(&[b"ms k 1 ", &o33, b"\r\n"]),
        line_of(&[b"ma k ", &o33, b"\r\n"]),
    ] {
        with(&line, |r| match (r.command, r.reply) {
            (Command::Error { .. }, _) => panic!("{line:?}"),
            (_, Reply::Meta(m)) => assert!(opaque_too_long(&m)),
            (_, other) => panic!("{other:?}"),
        });
    }
    with(&line_of(&[b"mg k v ", &o32, b"\r\n"]), |r| match r.reply {
        Reply::Meta(m) => assert!(!opaque_too_long(&m)),
        other => panic!("{other:?}"),
    });
}

#[test]
fn md() {
    with(b"md k q C5 I T30 x F3 E9\r\n", |r| {
        assert_eq!(
            r.command,
            Command::Delete(Delete {
                key: b"k",
                if_cas: Some(5),
                mark_stale: true,
                exptime: Some(30),
                drop_value: true,
                flags: 3,
                new_cas: Some(9),
                binary_key: false,
            })
        );
        assert!(matches!(
            r.reply,
            Reply::Meta(MetaReply {
                quiet: true,
                first_flag: 2,
                ..
            })
        ));
    });
    assert!(with(b"md k\n", |r| r.command
        == Command::Delete(Delete {
            key: b"k",
            ..Delete::default()
        })));
    // Checked against memcached 1.6.45: md reports preparse errors as they are.
    assert_eq!(err(b"md k !\r\n"), (BAD_FORMAT, 0, false));
    assert_eq!(err(b"md k q q\r\n"), (DUPLICATE_FLAG, 0, false));
    assert_eq!(err(b"md k Tx\r\n"), (BAD_TOKEN, 0, false));
    assert_eq!(err(b"md k F4294967296\r\n"), (BAD_FORMAT, 0, false));
    assert_eq!(err(b"md\r\n"), (BAD_FORMAT, 0, false));
}

#[test]
fn ma() {
    let arith = |line: &[u8]| {
        with(line, |r| match r.command {
            Command::Arith(a) => Arith { key: b"", ..a },
            other => panic!("{other:?}"),
        })
    };
    let base = Arith {
        key: b"",
        incr: true,
        delta: 1,
        create: None,
        if_cas: 0,
        new_cas: None,
        exptime: None,
        binary_key: false,
    };
    assert_eq!(arith(b"ma k\r\n"), base);
    assert_eq!(arith(b"ma k MI\r\n"), base);
    assert_eq!(arith(b"ma k M+\r\n"), base);
    assert_eq!(
        arith(b"ma k MD\r\n"),
        Arith {
            incr: false,
            ..base
        }
    );
    assert_eq!(
        arith(b"ma k M-\r\n"),
        Arith {
            incr: false,
            ..base
        }
    );
    // Checked against memcached 1.6.45: the mode is the byte after M.
    assert_eq!(arith(b"ma k MIxx\r\n"), base);
    assert_eq!(
        arith(b"ma k D5 J7 N30 C4 E8 T60 q v t c\r\n"),
        Arith {
            delta: 5,
            create: Some((7, 30)),
            if_cas: 4,
            new_cas: Some(8),
            exptime: Some(60),
            ..base
        }
    );
    assert_eq!(arith(b"ma k N-1\r\n").create, Some((0, PAST)));
    assert_eq!(arith(b"ma k C0\r\n").if_cas, 0);
    assert_eq!(arith(b"ma k D18446744073709551615\r\n").delta, u64::MAX);
    assert_eq!(meta(b"ma k q\r\n"), (3, 2, true, false));
    // Checked against memcached 1.6.45: ma answers every preparse failure
    // the same way.
    assert_eq!(err(b"ma k v v\r\n"), (INVALID_OR_DUPLICATE, 0, false));
    assert_eq!(err(b"ma k Dx\r\n"), (INVALID_OR_DUPLICATE, 0, false));
    assert_eq!(err(b"ma k z\r\n"), (INVALID_OR_DUPLICATE, 0, false));
    assert_eq!(
        err(&line_of(&[b"ma ", &[b'k'; 251], b"\r\n"])),
        (INVALID_OR_DUPLICATE, 0, false)
    );
    assert_eq!(
        err(&line_of(&[b"ma k ", &b"v ".repeat(19), b"\r\n"])),
        (INVALID_OR_DUPLICATE, 0, false)
    );
    assert_eq!(err(b"ma k M\r\n"), (INVALID_MA_MODE, 0, false));
    assert_eq!(err(b"ma k M\n"), (INVALID_MA_MODE, 0, false));
    assert_eq!(err(b"ma k MX\r\n"), (INVALID_MA_MODE, 0, false));
    assert_eq!(err(b"ma k Mi\r\n"), (INVALID_MA_MODE, 0, false));
    // The tokenizer's refusal comes first.
    assert_eq!(err(b"ma k -\r\n"), (BAD_FORMAT, 0, false));
    assert_eq!(err(b"ma\r\n"), (BAD_FORMAT, 0, false));
}

#[test]
fn me() {
    assert_eq!(
        command(b"me k\r\n"),
        format!(
            "{:?}",
            Command::MetaDebug {
                key: b"k",
                binary_key: false
            }
        )
    );
    // Checked against memcached 1.6.45: with 3 tokens "b" is not looked at,
    // with 4 the key is decoded.
    assert_eq!(
        command(b"me Zm9v b\r\n"),
        format!(
            "{:?}",
            Command::MetaDebug {
                key: b"Zm9v",
                binary_key: false
            }
        )
    );
    assert_eq!(
        command(b"me Zm9v b x\r\n"),
        format!(
            "{:?}",
            Command::MetaDebug {
                key: b"foo",
                binary_key: true
            }
        )
    );
    assert_eq!(meta(b"me Zm9v b x\r\n"), (4, 2, false, true));
    assert_eq!(
        command(b"me k v q\r\n"),
        format!(
            "{:?}",
            Command::MetaDebug {
                key: b"k",
                binary_key: false
            }
        )
    );
    assert_eq!(err(b"me Zm9 b x\r\n"), (BAD_FORMAT, 0, false));
    assert_eq!(err(b"me\r\n"), (BAD_FORMAT, 0, false));
    assert_eq!(err(b"me \r\n"), (BAD_FORMAT, 0, false));
    assert_eq!(err(b"me k !\r\n"), (BAD_FORMAT, 0, false));
    assert_eq!(
        err(&line_of(&[b"me ", &[b'k'; 251], b"\r\n"])),
        (BAD_FORMAT, 0, false)
    );
}

#[test]
fn ms_forms() {
    let base = Store {
        mode: StoreMode::Set,
        key: b"",
        flags: 0,
        exptime: 0,
        value_len: 3,
        cas: 0,
        new_cas: None,
        stale_if_older: false,
        binary_key: false,
        create_exptime: None,
    };
    assert_eq!(ms(b"ms k 3\r\n"), base);
    assert_eq!(ms(b"ms k 3\n"), base);
    assert_eq!(meta(b"ms k 3 T1 q\r\n"), (5, 3, true, false));
    assert_eq!(
        ms(b"ms k 3 F7 T30 E9\r\n"),
        Store {
            flags: 7,
            exptime: 30,
            new_cas: Some(9),
            ..base
        }
    );
    assert_eq!(ms(b"ms k 3 T-1\r\n").exptime, PAST);
    assert_eq!(ms(b"ms k 01\r\n").value_len, 1);
    assert_eq!(ms(b"ms k 2147483645\r\n").value_len, 2147483645);
    assert_eq!(ms(b"ms k 3 F4294967295\r\n").flags, u32::MAX);
    with(b"ms Zm9v 3 b\r\n", |r| match r.command {
        Command::Store(s) => assert_eq!((s.key, s.binary_key), (&b"foo"[..], true)),
        other => panic!("{other:?}"),
    });
}

#[test]
fn ms_modes() {
    let mode = |line: &[u8]| {
        let s = ms(line);
        (s.mode, s.cas, s.exptime, s.create_exptime, s.stale_if_older)
    };
    use StoreMode::*;
    assert_eq!(mode(b"ms k 1 MS\r\n"), (Set, 0, 0, None, false));
    assert_eq!(mode(b"ms k 1 ME\r\n"), (Add, 0, 0, None, false));
    assert_eq!(mode(b"ms k 1 MA\r\n"), (Append, 0, 0, None, false));
    assert_eq!(mode(b"ms k 1 MP\r\n"), (Prepend, 0, 0, None, false));
    assert_eq!(mode(b"ms k 1 MR\r\n"), (Replace, 0, 0, None, false));
    // C upgrades set and replace to cas; other modes keep the CAS to check.
    assert_eq!(mode(b"ms k 1 C5\r\n"), (Cas, 5, 0, None, false));
    assert_eq!(mode(b"ms k 1 MS C0\r\n"), (Cas, 0, 0, None, false));
    assert_eq!(mode(b"ms k 1 MR C5\r\n"), (Cas, 5, 0, None, false));
    assert_eq!(mode(b"ms k 1 ME C5\r\n"), (Add, 5, 0, None, false));
    assert_eq!(mode(b"ms k 1 MA C5\r\n"), (Append, 5, 0, None, false));
    assert_eq!(mode(b"ms k 1 MP C5\r\n"), (Prepend, 5, 0, None, false));
    // I only with cas.
    assert_eq!(mode(b"ms k 1 C5 I\r\n"), (Cas, 5, 0, None, true));
    assert_eq!(mode(b"ms k 1 I\r\n"), (Set, 0, 0, None, false));
    assert_eq!(mode(b"ms k 1 MA C5 I\r\n"), (Append, 5, 0, None, false));
    // N vivifies append/prepend, its exptime replacing T's; elsewhere N is
    // ignored.
    assert_eq!(
        mode(b"ms k 1 MA N30 T10\r\n"),
        (Append, 0, 30, Some(30), false)
    );
    assert_eq!(
        mode(b"ms k 1 T10 MP N-1\r\n"),
        (Prepend, 0, PAST, Some(PAST), false)
    );
    assert_eq!(mode(b"ms k 1 MS N30 T10\r\n"), (Set, 0, 10, None, false));
    assert_eq!(mode(b"ms k 1 ME N30\r\n"), (Add, 0, 0, None, false));
    // Checked against memcached 1.6.45: the byte after M is the mode.
    assert_eq!(mode(b"ms k 1 MSxyz\r\n"), (Set, 0, 0, None, false));
    assert_eq!(mode(b"ms k 1 M\0\r\n"), (Set, 0, 0, None, false));
}

#[test]
fn ms_errors() {
    // Checked against memcached 1.6.45: before the length is known nothing
    // is swallowed.
    assert_eq!(err(b"ms\r\n"), (BAD_FORMAT, 0, false));
    assert_eq!(err(b"ms k\r\n"), (BAD_FORMAT, 0, false));
    assert_eq!(err(b"ms k x\r\n"), (BAD_FORMAT, 0, false));
    assert_eq!(err(b"ms k -1\r\n"), (BAD_FORMAT, 0, false));
    assert_eq!(err(b"ms k +1\r\n"), (BAD_FORMAT, 0, false));
    assert_eq!(err(b"ms k 2147483646\r\n"), (BAD_FORMAT, 0, false));
    // memcached 1.6.45 swallows nothing when its tokenizer refuses a flag
    // token, and runs the data block as commands; osmium swallows it
    // whenever the length is a number (a deliberate difference).
    assert_eq!(err(b"ms k 1 !x\r\n"), (BAD_FORMAT, 3, false));
    assert_eq!(err(b"ms k 1 T1 \xff\r\n"), (BAD_FORMAT, 3, false));
    // Afterwards every error swallows the data block.
    assert_eq!(err(b"ms k 1 T!\r\n"), (BAD_TOKEN, 3, false));
    assert_eq!(err(b"ms a 1 b\r\n"), (ERROR_DECODING_KEY, 3, false));
    assert_eq!(err(b"ms k 1 Fx\r\n"), (BAD_FORMAT, 3, false));
    assert_eq!(err(b"ms k 1 C1 Fx\r\n"), (BAD_FORMAT, 3, false));
    assert_eq!(err(b"ms k 1 Cx Fx\r\n"), (BAD_TOKEN, 3, false));
    assert_eq!(err(b"ms k 1 Fx Cx\r\n"), (BAD_TOKEN, 3, false));
    assert_eq!(err(b"ms k 1 F-1\r\n"), (BAD_FORMAT, 3, false));
    assert_eq!(err(b"ms k 1 F4294967296\r\n"), (BAD_FORMAT, 3, false));
    assert_eq!(err(b"ms k 10 v v\r\n"), (DUPLICATE_FLAG, 12, false));
    assert_eq!(err(b"ms k 10 S\r\n"), (INVALID_FLAG, 12, false));
    assert_eq!(err(b"ms k 0 5\r\n"), (INVALID_FLAG, 2, false));
    assert_eq!(err(b"ms k 1 Ms\r\n"), (INVALID_MS_MODE, 3, false));
    assert_eq!(err(b"ms k 1 MX\r\n"), (INVALID_MS_MODE, 3, false));
    assert_eq!(err(b"ms k 1 M\r\n"), (INVALID_MS_MODE, 3, false));
    assert_eq!(err(b"ms k 1 M q\r\n"), (INVALID_MS_MODE, 3, false));
    assert_eq!(
        err(&line_of(&[b"ms ", &[b'k'; 251], b" 4\r\n"])),
        (BAD_FORMAT, 6, false)
    );
    assert_eq!(
        err(&line_of(&[b"ms k 1 ", &b"v ".repeat(18), b"\r\n"])),
        (OPTIONS_TOO_LONG, 3, false)
    );
    assert_eq!(
        err(&line_of(&[b"ms k 1 ", &b"v ".repeat(17), b"\r\n"])),
        (DUPLICATE_FLAG, 3, false)
    );
    assert_eq!(
        err(b"ms k 2147483645 MZ\r\n"),
        (INVALID_MS_MODE, 2147483647, false)
    );
    // ms has no noreply: an error is always shown.
    with(b"ms k 1 q MX\r\n", |r| {
        assert!(matches!(r.reply, Reply::Meta(_)))
    });
    assert_eq!(err(b"mz k\r\n"), (ERROR, 0, false));
}
