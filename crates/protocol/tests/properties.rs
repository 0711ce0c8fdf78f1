//! Property tests: the text parser never panics, frames any split of a
//! request stream the same way, and reads back what a client would write.
use osmium_protocol::numbers::{safe_strtol, safe_strtoul, safe_strtoull};
use osmium_protocol::peek::first_key;
use osmium_protocol::text::{parse_command, scan_line, Command, LineScan, StoreMode};
use proptest::prelude::*;

fn key() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(0x21u8..0x7f, 1..250)
}

proptest! {
    #[test]
    fn first_key_is_a_piece_of_the_input(input in proptest::collection::vec(any::<u8>(), 0..600)) {
        if let Some(k) = first_key(&input) {
            let start = k.as_ptr() as usize - input.as_ptr() as usize;
            prop_assert!(start + k.len() <= input.len());
            prop_assert!(!k.is_empty());
        }
    }

    #[test]
    fn keys_are_pieces_of_the_input(input in proptest::collection::vec(any::<u8>(), 0..600)) {
        for k in osmium_protocol::peek::keys(&input) {
            let start = k.as_ptr() as usize - input.as_ptr() as usize;
            prop_assert!(start + k.len() <= input.len());
        }
    }

    #[test]
    fn first_key_is_the_parsed_key(k in key(), more in proptest::collection::vec(key(), 0..3), tail in proptest::collection::vec(any::<u8>(), 0..40)) {
        let mut line = b"get ".to_vec();
        line.extend_from_slice(&k);
        for m in &more { line.push(b' '); line.extend_from_slice(m); }
        line.extend_from_slice(b"\r\n");
        line.extend_from_slice(&tail);
        prop_assert_eq!(first_key(&line), Some(&k[..]));
        match parse_command(&line[..line.iter().position(|&b| b == b'\r').unwrap()]) {
            Command::Get { mut keys, .. } => prop_assert_eq!(keys.next(), Some(&k[..])),
            other => prop_assert!(false, "{:?}", other),
        }
    }

    #[test]
    fn arbitrary_lines_never_panic(line in proptest::collection::vec(any::<u8>(), 0..600)) {
        let _ = scan_line(&line);
        if let Command::Get { keys, .. } = parse_command(&line) {
            for k in keys { prop_assert!(!k.is_empty()); }
        }
    }

    #[test]
    fn set_lines_roundtrip(k in key(), flags in any::<u32>(), exptime in any::<i32>(), len in 0u32..(i32::MAX as u32 - 2), noreply in any::<bool>()) {
        let line = format!("set {} {flags} {exptime} {len}{}", String::from_utf8(k.clone()).unwrap(), if noreply { " noreply" } else { "" });
        match parse_command(line.as_bytes()) {
            Command::Store(r) => {
                prop_assert_eq!(r.mode, StoreMode::Set);
                prop_assert_eq!(r.key, &k[..]);
                prop_assert_eq!((r.flags, r.exptime, r.value_len, r.noreply), (flags, exptime, len, noreply));
            }
            other => prop_assert!(false, "{:?}", other),
        }
    }

    #[test]
    fn multiget_keys_roundtrip(keys in proptest::collection::vec(key(), 1..60), gap in 1usize..4) {
        let sep = " ".repeat(gap);
        let line = format!("get{sep}{}", keys.iter().map(|k| String::from_utf8(k.clone()).unwrap()).collect::<Vec<_>>().join(&sep));
        match parse_command(line.as_bytes()) {
            Command::Get { keys: got, .. } => prop_assert_eq!(got.map(|k| k.to_vec()).collect::<Vec<_>>(), keys),
            other => prop_assert!(false, "{:?}", other),
        }
    }

    #[test]
    fn framing_is_split_independent(cmds in proptest::collection::vec(key(), 1..20), cut in any::<prop::sample::Index>()) {
        let stream: Vec<u8> = cmds.iter().flat_map(|k| [b"get ".to_vec(), k.clone(), b"\r\n".to_vec()].concat()).collect();
        let cut = cut.index(stream.len() + 1);
        // Whatever prefix arrived, every complete line found is one of the requests.
        let mut buf = &stream[..cut];
        let mut n = 0;
        while let LineScan::Line { line_len, consumed } = scan_line(buf) {
            prop_assert_eq!(&buf[4..line_len], &cmds[n][..]);
            buf = &buf[consumed..];
            n += 1;
        }
        prop_assert!(n <= cmds.len());
    }

    #[test]
    fn numbers_agree_with_decimal(v in any::<u64>(), w in any::<u32>(), i in any::<i32>()) {
        prop_assert_eq!(safe_strtoull(v.to_string().as_bytes()), Some(v));
        prop_assert_eq!(safe_strtoul(w.to_string().as_bytes()), Some(w));
        prop_assert_eq!(safe_strtol(i.to_string().as_bytes()), Some(i));
    }
}

mod meta {
    use osmium_protocol::meta::{base64_decode, base64_encode, parse_meta, MetaCommand, MetaParse};
    use osmium_protocol::text::Tokens;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn arbitrary_meta_lines_never_panic(cmd in "m[gsdaenx]", rest in proptest::collection::vec(any::<u8>(), 0..300)) {
            let mut line = cmd.into_bytes();
            line.push(b' ');
            line.extend_from_slice(&rest);
            let _ = parse_meta(Tokens::new(&line));
        }

        #[test]
        fn base64_roundtrips(data in proptest::collection::vec(any::<u8>(), 1..200)) {
            let mut enc = Vec::new();
            base64_encode(&data, &mut enc);
            let mut out = vec![0u8; data.len() + 3];
            let n = base64_decode(&enc, &mut out).unwrap();
            prop_assert_eq!(&out[..n], &data[..]);
        }

        #[test]
        fn ms_lines_roundtrip(key in "[a-zA-Z0-9_]{1,250}", len in 0usize..100000, ttl in any::<i32>(), flags in any::<u32>(), opaque in "[a-z0-9]{0,30}") {
            let line = format!("ms {key} {len} T{ttl} F{flags} O{opaque} q");
            match parse_meta(Tokens::new(line.as_bytes())) {
                MetaParse::Request(r) => {
                    prop_assert_eq!(r.command, MetaCommand::Set);
                    prop_assert_eq!(r.key(), key.as_bytes());
                    prop_assert_eq!(r.data_len, len);
                    prop_assert_eq!((r.flags.ttl, r.flags.client_flags, r.flags.no_reply), (Some(ttl), flags, true));
                }
                _ => prop_assert!(false, "{line} did not parse"),
            }
        }
    }
}
