//! Property tests: the text parser never panics, frames any split of a
//! request stream the same way, and reads back what a client would write.
use osmium_protocol::numbers::{safe_strtol, safe_strtoul, safe_strtoull};
use osmium_protocol::text::{parse_command, scan_line, Command, LineScan, StoreMode};
use proptest::prelude::*;

fn key() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(0x21u8..0x7f, 1..250)
}

proptest! {
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
