//! The binary protocol, SASL (-S) and text authentication (-Y) over real
//! loopback sockets.
//!
//! The assertions are genuine memcached's behaviour: each test listed in
//! `against_both!` runs twice, as `osmium::<name>` against the `osmium`
//! binary and as `memcached::<name>` against memcached 1.6.45
//! (`common::memcached_bin`: `MEMCACHED_BIN`, else the oracle built by
//! `scripts/build-memcached.sh`). The SASL tests that need osmium's own
//! options (`--sasl-pwdb`) run against osmium only. Packets are built and
//! parsed here by hand, independently of the server's protocol crate.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::binary_wire;
use crate::common;
use binary_wire::*;
use common::{against_both, wait_until};

against_both!(
    get_set_and_their_variants,
    quiet_commands_are_silent_until_noop,
    add_replace_append_prepend_and_cas,
    delete_with_and_without_cas,
    incr_and_decr,
    touch_and_get_and_touch,
    flush_now_and_later,
    flush_disabled_answers_auth_error,
    stat_groups,
    counters_match_the_text_protocol,
    quit_and_quietly_quit,
    protocol_errors,
    bad_magic_closes_and_drops_unsent_replies,
    requests_split_at_every_byte,
    many_pipelined_requests_in_one_write,
    too_large_values_are_swallowed_in_sync,
    binding_protocol_flag,
);

fn get_set_and_their_variants() {
    let srv = Server::start(&[]);
    let mut c = srv.connect();
    let r = one(&mut c, set(b"k1", 0xdead_beef, 0, b"hello").opaque(9));
    assert_eq!((r.op, r.status, r.opaque), (SET, 0, 9));
    assert!(r.cas != 0 && r.value.is_empty() && r.extras.is_empty());
    let cas = r.cas;
    let got = exchange(
        &mut c,
        &[
            Req::new(GET).key(b"k1").opaque(1),
            Req::new(GETK).key(b"k1").opaque(2),
            Req::new(GETQ).key(b"k1").opaque(3),
            Req::new(GETKQ).key(b"k1").opaque(4),
        ],
        4,
    );
    for (i, r) in got.iter().enumerate() {
        assert_eq!(r.op, [GET, GETK, GETQ, GETKQ][i]);
        assert_eq!((r.status, r.opaque, r.cas), (0, i as u32 + 1, cas));
        assert_eq!(r.extras, 0xdead_beefu32.to_be_bytes());
        assert_eq!(r.value, b"hello");
        let with_key = r.op == GETK || r.op == GETKQ;
        assert_eq!(r.key, if with_key { &b"k1"[..] } else { &b""[..] });
    }
    let r = one(&mut c, Req::new(GET).key(b"nokey").opaque(7));
    assert_eq!(
        (r.status, r.opaque, r.cas, r.text().as_str()),
        (NOT_FOUND, 7, 0, "Not found")
    );
    let r = one(&mut c, Req::new(GETK).key(b"nokey"));
    assert_eq!(
        (r.status, r.key.as_slice(), r.value.len()),
        (NOT_FOUND, &b"nokey"[..], 0)
    );
    // VERSION and NOOP
    let r = one(&mut c, Req::new(VERSION).opaque(0x1122_3344));
    assert_eq!((r.status, r.opaque), (0, 0x1122_3344));
    assert!(r.text().starts_with("1.6."));
    let r = one(&mut c, Req::new(NOOP));
    assert_eq!((r.op, r.status, r.value.len()), (NOOP, 0, 0));
}

fn quiet_commands_are_silent_until_noop() {
    let srv = Server::start(&[]);
    let mut c = srv.connect();
    let got = exchange(
        &mut c,
        &[
            Req::new(GETQ).key(b"miss1").opaque(1),
            Req::new(GETKQ).key(b"miss2").opaque(2),
            with_op(set(b"q", 0, 0, b"v"), SETQ).opaque(3),
            Req::new(DELETEQ).key(b"q").opaque(4),
            arith(INCRQ, b"n", 1, 5, 0).opaque(5),
            with_op(Req::new(APPEND).key(b"n").value(b"0"), APPENDQ).opaque(6),
            expiry(GATQ, b"miss3", 0).opaque(7),
            // Errors are sent even for quiet commands.
            Req::new(DELETEQ).key(b"q").opaque(8),
            Req::new(NOOP).opaque(9),
        ],
        2,
    );
    assert_eq!(
        (got[0].op, got[0].status, got[0].opaque),
        (DELETEQ, NOT_FOUND, 8)
    );
    assert_eq!((got[1].op, got[1].opaque), (NOOP, 9));
    let r = one(&mut c, Req::new(GET).key(b"n"));
    assert_eq!(r.value, b"50");
}

fn add_replace_append_prepend_and_cas() {
    let srv = Server::start(&[]);
    let mut c = srv.connect();
    let first = one(&mut c, set(b"k", 5, 0, b"mid"));
    let r = one(&mut c, with_op(set(b"k", 0, 0, b"x"), ADD));
    assert_eq!(
        (r.status, r.text().as_str()),
        (EXISTS, "Data exists for key.")
    );
    let r = one(&mut c, with_op(set(b"missing", 0, 0, b"x"), REPLACE));
    assert_eq!((r.status, r.text().as_str()), (NOT_FOUND, "Not found"));
    let r = one(&mut c, Req::new(APPEND).key(b"missing").value(b"x"));
    assert_eq!((r.status, r.text().as_str()), (NOT_STORED, "Not stored."));
    // A wrong CAS makes SET/REPLACE/APPEND fail, the right one succeeds.
    let r = one(&mut c, set(b"k", 0, 0, b"y").cas(first.cas + 1000));
    assert_eq!(r.status, EXISTS);
    let r = one(&mut c, set(b"nokey", 0, 0, b"y").cas(5));
    assert_eq!(r.status, NOT_FOUND);
    let r = one(
        &mut c,
        Req::new(APPEND).key(b"k").value(b"!").cas(first.cas + 1000),
    );
    assert_eq!(r.status, EXISTS);
    let r = one(
        &mut c,
        Req::new(APPEND).key(b"k").value(b"end").cas(first.cas),
    );
    assert_eq!(r.status, 0);
    assert!(r.cas > first.cas);
    let r = one(&mut c, Req::new(PREPEND).key(b"k").value(b"pre"));
    assert_eq!(r.status, 0);
    let r = one(&mut c, Req::new(GET).key(b"k"));
    assert_eq!(
        (r.value.as_slice(), r.extras.as_slice()),
        (&b"premidend"[..], &5u32.to_be_bytes()[..])
    );
    // ADD with the item's CAS is a compare-and-swap (memcached's quirk).
    let r2 = one(&mut c, with_op(set(b"k", 1, 0, b"swapped"), ADD).cas(r.cas));
    assert_eq!(r2.status, 0);
    assert_eq!(one(&mut c, Req::new(GET).key(b"k")).value, b"swapped");
    let stats = stats(&mut c, b"");
    assert_eq!(stat(&stats, "cas_badval"), "1");
    assert_eq!(stat(&stats, "cas_misses"), "1");
    assert_eq!(stat(&stats, "cas_hits"), "1");
}

fn delete_with_and_without_cas() {
    let srv = Server::start(&[]);
    let mut c = srv.connect();
    let s = one(&mut c, set(b"d", 0, 0, b"v"));
    let r = one(&mut c, Req::new(DELETE).key(b"d").cas(s.cas + 1));
    assert_eq!(r.status, EXISTS);
    let r = one(&mut c, Req::new(DELETE).key(b"d").cas(s.cas));
    assert_eq!((r.status, r.cas, r.value.len()), (0, 0, 0));
    let r = one(&mut c, Req::new(DELETE).key(b"d"));
    assert_eq!((r.status, r.text().as_str()), (NOT_FOUND, "Not found"));
    let stats = stats(&mut c, b"");
    assert_eq!(
        (stat(&stats, "delete_hits"), stat(&stats, "delete_misses")),
        ("1".into(), "1".into())
    );
}

fn incr_and_decr() {
    let srv = Server::start(&[]);
    let mut c = srv.connect();
    let num = |r: &Resp| u64::from_be_bytes(r.value.as_slice().try_into().unwrap());
    // A missing counter is created with the initial value...
    let r = one(&mut c, arith(INCR, b"c", 5, 10, 0));
    assert_eq!((r.status, num(&r)), (0, 10));
    let created = r.cas;
    let r = one(&mut c, arith(INCR, b"c", 5, 10, 0));
    assert_eq!(num(&r), 15);
    assert!(r.cas > created);
    let r = one(&mut c, arith(DECR, b"c", 100, 0, 0));
    assert_eq!(num(&r), 0, "decr stops at zero");
    // ...unless the expiration is 0xffffffff.
    let r = one(&mut c, arith(INCR, b"nope", 1, 0, 0xffff_ffff));
    assert_eq!((r.status, r.text().as_str()), (NOT_FOUND, "Not found"));
    let r = one(&mut c, arith(DECR, b"c", 1, 0, 0).cas(12345));
    assert_eq!(r.status, EXISTS);
    one(&mut c, set(b"w", 0, 0, b"18446744073709551615"));
    let r = one(&mut c, arith(INCR, b"w", 2, 0, 0));
    assert_eq!(num(&r), 1, "incr wraps at 64 bits");
    assert_eq!(
        one(&mut c, Req::new(GET).key(b"w")).value,
        b"1                   "
    );
    one(&mut c, set(b"t", 0, 0, b"abc"));
    let r = one(&mut c, arith(INCR, b"t", 1, 0, 0));
    assert_eq!(
        (r.status, r.text().as_str()),
        (
            NON_NUMERIC,
            "Non-numeric server-side value for incr or decr"
        )
    );
    let stats = stats(&mut c, b"");
    assert_eq!(stat(&stats, "incr_hits"), "2");
    assert_eq!(stat(&stats, "incr_misses"), "1");
    assert_eq!(stat(&stats, "decr_hits"), "1");
}

fn touch_and_get_and_touch() {
    let srv = Server::start(&[]);
    let mut c = srv.connect();
    let s = one(&mut c, set(b"t", 77, 0, b"val"));
    let r = one(&mut c, expiry(TOUCH, b"t", 100));
    // TOUCH answers the flags, no value.
    assert_eq!(
        (r.status, r.cas, r.extras.as_slice(), r.value.len()),
        (0, s.cas, &77u32.to_be_bytes()[..], 0)
    );
    let r = one(&mut c, expiry(GAT, b"t", 100));
    assert_eq!((r.value.as_slice(), r.key.len()), (&b"val"[..], 0));
    let r = one(&mut c, expiry(GATK, b"t", 100));
    assert_eq!(
        (r.value.as_slice(), r.key.as_slice()),
        (&b"val"[..], &b"t"[..])
    );
    let got = exchange(
        &mut c,
        &[
            expiry(GATQ, b"none", 1),
            expiry(TOUCH, b"none", 1),
            Req::new(NOOP),
        ],
        2,
    );
    assert_eq!((got[0].op, got[0].status), (TOUCH, NOT_FOUND));
    // A past unix time expires the item at once.
    let r = one(&mut c, expiry(TOUCH, b"t", 1_000_000_000));
    assert_eq!(r.status, 0);
    assert_eq!(one(&mut c, Req::new(GET).key(b"t")).status, NOT_FOUND);
    let stats = stats(&mut c, b"");
    assert_eq!(stat(&stats, "cmd_touch"), "6");
    assert_eq!(stat(&stats, "touch_hits"), "4");
    assert_eq!(stat(&stats, "touch_misses"), "2");
    // Touch with a bad extras length is a protocol error.
    let r = one(&mut c, Req::new(TOUCH).key(b"t"));
    assert_eq!(r.status, EINVAL);
}

fn flush_now_and_later() {
    let srv = Server::start(&[]);
    let mut c = srv.connect();
    one(&mut c, set(b"f", 0, 0, b"v"));
    let r = one(&mut c, Req::new(FLUSH));
    assert_eq!((r.status, r.cas), (0, 0));
    assert_eq!(one(&mut c, Req::new(GET).key(b"f")).status, NOT_FOUND);
    one(&mut c, set(b"f", 0, 0, b"v"));
    let r = one(&mut c, Req::new(FLUSH).extras(&2u32.to_be_bytes()));
    assert_eq!(r.status, 0);
    assert_eq!(one(&mut c, Req::new(GET).key(b"f")).status, 0, "not yet");
    // The flush takes effect two to three seconds on (the one-second clock).
    wait_until("the delayed flush took effect", || {
        one(&mut c, Req::new(GET).key(b"f")).status == NOT_FOUND
    });
    let r = one(&mut c, Req::new(FLUSH).extras(&[0; 8]));
    assert_eq!(r.status, EINVAL);
    assert!(read_to_close(&mut c).is_empty());
}

fn flush_disabled_answers_auth_error() {
    let srv = Server::start(&["-F"]);
    let mut c = srv.connect();
    let r = one(&mut c, Req::new(FLUSH));
    assert_eq!((r.status, r.text().as_str()), (AUTH_ERROR, "Auth failure."));
    assert_eq!(
        one(&mut c, Req::new(NOOP)).status,
        0,
        "connection stays open"
    );
}

fn stat_groups() {
    let srv = Server::start(&[]);
    let mut c = srv.connect();
    let all = stats(&mut c, b"");
    assert_eq!(all[0].0, "pid");
    for name in [
        "cmd_get",
        "get_hits",
        "bytes_read",
        "curr_items",
        "auth_cmds",
    ] {
        stat(&all, name);
    }
    let settings = stats(&mut c, b"settings");
    assert_eq!(stat(&settings, "binding_protocol"), "auto-negotiate");
    assert_eq!(stat(&settings, "auth_enabled_sasl"), "no");
    let r = one(&mut c, Req::new(STAT).key(b"bogus").opaque(4));
    assert_eq!(
        (r.status, r.opaque, r.text().as_str()),
        (NOT_FOUND, 4, "Not found")
    );
    assert!(stats(&mut c, b"reset").is_empty());
    assert!(stats(&mut c, b"detail on").is_empty());
    one(&mut c, set(b"pre:x", 0, 0, b"1"));
    let dump = stats(&mut c, b"detail dump");
    assert_eq!(
        dump,
        vec![(
            "detailed".into(),
            "PREFIX pre get 0 hit 0 set 1 del 0\r\nEND\r\n".into()
        )]
    );
    // Each STAT packet echoes the opaque; the terminator is an empty packet.
    c.write_all(&Req::new(STAT).key(b"settings").opaque(0xabcd).bytes())
        .unwrap();
    let raw = read_until_terminator(&mut c);
    assert!(raw
        .iter()
        .all(|r| r.opaque == 0xabcd && r.op == STAT && r.cas == 0));
}

fn read_until_terminator(s: &mut TcpStream) -> Vec<Resp> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 65536];
    loop {
        let rs = parse(&buf);
        if rs
            .last()
            .is_some_and(|r| r.key.is_empty() && r.value.is_empty())
        {
            return rs;
        }
        let k = s.read(&mut chunk).unwrap();
        assert!(k > 0);
        buf.extend_from_slice(&chunk[..k]);
    }
}

fn counters_match_the_text_protocol() {
    let srv = Server::start(&[]);
    let mut c = srv.connect();
    exchange(
        &mut c,
        &[
            set(b"a", 0, 0, b"1"),
            Req::new(GET).key(b"a"),
            Req::new(GETQ).key(b"zz"),
            Req::new(GETK).key(b"zz"),
            Req::new(NOOP),
        ],
        4,
    );
    let all = stats(&mut c, b"");
    assert_eq!(stat(&all, "cmd_set"), "1");
    assert_eq!(stat(&all, "cmd_get"), "3");
    assert_eq!(stat(&all, "get_hits"), "1");
    assert_eq!(stat(&all, "get_misses"), "2");
    assert_eq!(stat(&all, "curr_items"), "1");
}

fn quit_and_quietly_quit() {
    let srv = Server::start(&[]);
    let mut c = srv.connect();
    c.write_all(&pipeline(&[Req::new(QUIT).opaque(5), Req::new(NOOP)]))
        .unwrap();
    let got = parse(&read_to_close(&mut c));
    assert_eq!(got.len(), 1);
    assert_eq!((got[0].op, got[0].opaque), (QUIT, 5));
    let mut c = srv.connect();
    c.write_all(&pipeline(&[Req::new(QUITQ), Req::new(NOOP)]))
        .unwrap();
    assert!(read_to_close(&mut c).is_empty());
}

fn protocol_errors() {
    let srv = Server::start(&[]);
    // Unknown opcodes (VERBOSITY too: memcached does not implement it) are
    // answered and their body swallowed; the connection stays usable.
    let mut c = srv.connect();
    let got = exchange(
        &mut c,
        &[
            Req::new(0x50).value(b"abcdef").opaque(3),
            // (memcached swallows body_len bytes *after* the extras and
            // key, so an unknown request with extras would desync.)
            Req::new(VERBOSITY),
            Req::new(NOOP),
        ],
        3,
    );
    assert_eq!(
        (got[0].op, got[0].status, got[0].opaque),
        (0x50, UNKNOWN, 3)
    );
    assert_eq!(got[0].text(), "Unknown command");
    assert_eq!((got[1].op, got[1].status), (VERBOSITY, UNKNOWN));
    assert_eq!(got[2].op, NOOP);
    // Wrong extras, missing key, a body where none belongs, a key over 250
    // bytes: "Invalid arguments", then the connection is closed.
    for bad in [
        set(b"k", 0, 0, b"v").extras(b"1234"),
        set(b"", 0, 0, b"v"),
        Req::new(GET).key(b"k").value(b"zz"),
        Req::new(GET).key(&[b'x'; 251]),
        Req::new(NOOP).extras(b"1"),
        Req::new(VERSION).key(b"k"),
    ] {
        let mut c = srv.connect();
        c.write_all(&pipeline(&[bad.clone(), Req::new(NOOP)]))
            .unwrap();
        let got = parse(&read_to_close(&mut c));
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!((got[0].op, got[0].status), (bad.op, EINVAL));
        assert_eq!(got[0].text(), "Invalid arguments");
    }
    // A key longer than the body: "Unknown command", then close.
    let mut c = srv.connect();
    let mut p = Req::new(GET).key(b"abc").bytes();
    p[11] = 2;
    c.write_all(&p).unwrap();
    let got = parse(&read_to_close(&mut c));
    assert_eq!((got.len(), got[0].status), (1, UNKNOWN));
}

fn bad_magic_closes_and_drops_unsent_replies() {
    let srv = Server::start(&[]);
    // A NOOP's reply is written at once, so it survives the bad packet.
    let mut c = srv.connect();
    let mut p = pipeline(&[Req::new(NOOP).opaque(1)]);
    let mut bad = Req::new(NOOP).bytes();
    bad[0] = 0x81;
    p.extend_from_slice(&bad);
    c.write_all(&p).unwrap();
    let got = parse(&read_to_close(&mut c));
    assert_eq!(got.len(), 1);
    // A GET hit is not written until the batch ends: it is lost with it.
    let mut c = srv.connect();
    one(&mut c, set(b"a", 0, 0, b"1"));
    let mut p = pipeline(&[Req::new(GET).key(b"a")]);
    p.extend_from_slice(&bad);
    c.write_all(&p).unwrap();
    assert!(read_to_close(&mut c).is_empty());
    // Text sent to a binary-only server: closed once 24 bytes are in.
    drop(srv);
    let srv = Server::start(&["-B", "binary"]);
    let mut c = srv.connect();
    c.write_all(b"version\r\n").unwrap();
    assert!(quiet_for_a_moment(&mut c), "waits for a whole header");
    c.write_all(b"get some key or other\r\n").unwrap();
    assert!(read_to_close(&mut c).is_empty());
}

fn requests_split_at_every_byte() {
    let srv = Server::start(&[]);
    let reqs = [
        set(b"split", 3, 0, b"0123456789").opaque(1),
        Req::new(GETK).key(b"split").opaque(2),
        Req::new(GETQ).key(b"nothing").opaque(3),
        arith(INCR, b"n", 1, 41, 0).opaque(4),
        Req::new(APPEND).key(b"split").value(b"abc").opaque(5),
        Req::new(STAT).key(b"settings").opaque(6),
        Req::new(NOOP).opaque(7),
    ];
    let stream = pipeline(&reqs);
    // The same bytes in one write...
    let mut whole = srv.connect();
    whole.write_all(&stream).unwrap();
    let expected = read_until_opaque(&mut whole, 7);
    // ...and one byte at a time, on a fresh server.
    drop(whole);
    drop(srv);
    let srv = Server::start(&[]);
    let mut c = srv.connect();
    for b in &stream {
        c.write_all(std::slice::from_ref(b)).unwrap();
        std::thread::sleep(Duration::from_micros(100));
    }
    let got = read_until_opaque(&mut c, 7);
    let strip = |rs: Vec<Resp>| {
        rs.into_iter()
            .filter(|r| r.op != STAT || r.key != b"tcpport")
            .collect::<Vec<_>>()
    };
    assert_eq!(strip(parse(&got)), strip(parse(&expected)));
    let rs = parse(&got);
    assert_eq!(rs[0].status, 0);
    assert_eq!(
        (rs[1].key.as_slice(), rs[1].value.as_slice()),
        (&b"split"[..], &b"0123456789"[..])
    );
    assert_eq!(rs[2].value, 41u64.to_be_bytes());
}

/// Reads until a response with this opaque has arrived.
fn read_until_opaque(s: &mut TcpStream, opaque: u32) -> Vec<u8> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 65536];
    while !parse(&buf).iter().any(|r| r.opaque == opaque) {
        let k = s.read(&mut chunk).unwrap();
        assert!(k > 0, "closed");
        buf.extend_from_slice(&chunk[..k]);
    }
    buf
}

fn many_pipelined_requests_in_one_write() {
    let srv = Server::start(&[]);
    let mut c = srv.connect();
    let mut reqs = Vec::new();
    for i in 0..1000u32 {
        reqs.push(with_op(
            set(format!("p{i}").as_bytes(), i, 0, i.to_string().as_bytes()),
            SETQ,
        ));
    }
    for i in 0..1000u32 {
        reqs.push(Req::new(GETKQ).key(format!("p{i}").as_bytes()).opaque(i));
        reqs.push(Req::new(GETKQ).key(format!("missing{i}").as_bytes()));
    }
    reqs.push(Req::new(NOOP).opaque(u32::MAX));
    let got = exchange(&mut c, &reqs, 1001);
    for (i, r) in got[..1000].iter().enumerate() {
        assert_eq!(r.opaque, i as u32);
        assert_eq!(r.key, format!("p{i}").as_bytes());
        assert_eq!(r.value, i.to_string().as_bytes());
        assert_eq!(r.extras, (i as u32).to_be_bytes());
    }
    assert_eq!((got[1000].op, got[1000].opaque), (NOOP, u32::MAX));
}

fn too_large_values_are_swallowed_in_sync() {
    let srv = Server::start(&[]);
    let mut c = srv.connect();
    one(&mut c, set(b"big", 0, 0, b"old"));
    let huge = vec![b'x'; 2 << 20];
    let got = exchange(
        &mut c,
        &[
            set(b"big", 0, 0, &huge).opaque(1),
            with_op(set(b"big2", 0, 0, &huge), SETQ).opaque(2),
            Req::new(APPEND).key(b"other").value(&huge).opaque(3),
            Req::new(GET).key(b"big").opaque(4),
            Req::new(NOOP).opaque(5),
        ],
        5,
    );
    for r in &got[..3] {
        assert_eq!((r.status, r.text().as_str()), (TOO_LARGE, "Too large."));
    }
    assert_eq!(
        got[3].status, NOT_FOUND,
        "a refused SET drops the old value"
    );
    assert_eq!(got[4].op, NOOP);
    // A large value that fits, delivered in pieces.
    let value = vec![b'y'; 900_000];
    let p = set(b"large", 0, 0, &value).bytes();
    for piece in p.chunks(65_536) {
        c.write_all(piece).unwrap();
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(read_responses(&mut c, 1)[0].status, 0);
    assert_eq!(
        one(&mut c, Req::new(GET).key(b"large")).value.len(),
        900_000
    );
}

fn binding_protocol_flag() {
    let srv = Server::start(&["-B", "binary"]);
    let mut c = srv.connect();
    let settings = stats(&mut c, b"settings");
    assert_eq!(stat(&settings, "binding_protocol"), "binary");
    drop(srv);
    // -B ascii reads a binary packet as (an incomplete) text line.
    let srv = Server::start(&["-B", "ascii"]);
    let mut c = srv.connect();
    c.write_all(&Req::new(VERSION).bytes()).unwrap();
    assert!(quiet_for_a_moment(&mut c));
    c.write_all(b"\r\nversion\r\n").unwrap();
    let mut got = Vec::new();
    let mut chunk = [0u8; 256];
    while !(String::from_utf8_lossy(&got).contains("VERSION ") && got.ends_with(b"\r\n")) {
        let k = c.read(&mut chunk).unwrap();
        assert!(k > 0);
        got.extend_from_slice(&chunk[..k]);
    }
    assert!(
        got.starts_with(b"ERROR\r\nVERSION "),
        "{:?}",
        String::from_utf8_lossy(&got)
    );
}
