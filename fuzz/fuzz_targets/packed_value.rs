//! Feeds arbitrary packed values to the decoder every GET of a packed item
//! runs (`osmium_store::ValueRef`): byte 0 is the codec byte, bytes 1-3
//! the raw length (little endian, at most 1 MiB), the rest the frame. Any
//! panic is a bug; so is a decode that is neither `Ok` with exactly the
//! raw length nor `Err(Corrupt)` with the reply buffer as it was, or one
//! that writes past the raw length of a slot.
#![no_main]
use libfuzzer_sys::fuzz_target;
use osmium_store::dict::DictTable;
use osmium_store::{Corrupt, ValueRef};

const RAW_MAX: usize = 1 << 20;

fuzz_target!(|data: &[u8]| {
    if data.len() < 4 {
        return;
    }
    let codec = data[0];
    let raw_len = (u32::from_le_bytes([data[1], data[2], data[3], 0]) as usize) % (RAW_MAX + 1);
    let frame = &data[4..];
    let dicts = DictTable::new();
    let v = ValueRef::Packed {
        frame,
        codec,
        raw_len: raw_len as u32,
        dicts: &dicts,
    };
    assert_eq!(v.len(), raw_len);
    // A reply buffer with something composed before the value.
    let mut out = b"VALUE k 0 0\r\n".to_vec();
    match v.append_to(&mut out) {
        Ok(()) => assert_eq!(out.len(), 13 + raw_len),
        Err(Corrupt) => assert_eq!(out, b"VALUE k 0 0\r\n"),
    }
    // A slot of exactly raw_len bytes between guards.
    let mut slot = vec![0xa5u8; raw_len + 64];
    let r = v.write_into(&mut slot[32..32 + raw_len]);
    assert!(slot[..32].iter().chain(&slot[32 + raw_len..]).all(|&b| b == 0xa5));
    // Both decodes agree.
    if r.is_ok() {
        assert_eq!(&out[13..], &slot[32..32 + raw_len]);
    }
    // A slot of the wrong length is refused, whatever the frame.
    if raw_len > 0 {
        assert_eq!(v.write_into(&mut slot[..raw_len - 1]), Err(Corrupt));
    }
});
