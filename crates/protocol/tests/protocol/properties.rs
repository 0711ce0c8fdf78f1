//! Property tests of the peek (the keys of waiting requests, found without
//! parsing) and of memcached's base64 codec. (The text and meta parser's
//! own properties are in `ascii_properties.rs`.)
use osmium_protocol::ascii::parse_line;
use osmium_protocol::base64::{base64_decode, base64_encode};
use osmium_protocol::peek::first_key;
use osmium_protocol::request::{Command, KeyBuffer};
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
        let end = line.iter().position(|&b| b == b'\n').unwrap();
        let mut keys_buf = KeyBuffer::new();
        match parse_line(&line[..=end], &mut keys_buf).command {
            Command::Get { mut keys, .. } => prop_assert_eq!(keys.next(), Some(&k[..])),
            other => prop_assert!(false, "{:?}", other),
        }
    }


    #[test]
    fn base64_roundtrips(data in proptest::collection::vec(any::<u8>(), 1..200)) {
        let mut enc = Vec::new();
        base64_encode(&data, &mut enc);
        let mut out = vec![0u8; data.len() + 3];
        let n = base64_decode(&enc, &mut out).unwrap();
        prop_assert_eq!(&out[..n], &data[..]);
    }
}
