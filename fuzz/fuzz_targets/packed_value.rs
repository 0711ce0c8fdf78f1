//! Feeds arbitrary packed values to the decoder every GET of a packed item
//! runs (`osmium_store::ValueRef`): byte 0 is the codec byte, bytes 1-3
//! the raw length (little endian, at most 1 MiB), the rest the frame. Any
//! panic is a bug; so is a decode that is neither `Ok` with exactly the
//! raw length nor `Err(Corrupt)` with the reply buffer as it was, or one
//! that writes past the raw length of a slot.
//!
//! The table holds one dictionary (raw content, the shape of a cache's
//! JSON values): a codec byte with the top bit set is replaced by its
//! codec byte, so that damaged dictionary-coded frames (a frame made with
//! it, then corrupted) are decoded through it too.
#![no_main]
use libfuzzer_sys::fuzz_target;
use osmium_store::dict::DictTable;
use osmium_store::{Corrupt, ValueRef};

const RAW_MAX: usize = 1 << 20;

/// The table, with its dictionary, made once.
fn table() -> &'static (DictTable, u8) {
    static TABLE: std::sync::OnceLock<(DictTable, u8)> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        let mut content = Vec::new();
        for i in 0..200 {
            content.extend_from_slice(
                format!("{{\"id\":{i},\"user\":\"name{}\",\"score\":{},\"ok\":true}},", i % 37, i * 7)
                    .as_bytes(),
            );
        }
        let t = DictTable::new();
        let codec = t.install(0, content, 1).expect("a dictionary").codec();
        (t, codec)
    })
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 4 {
        return;
    }
    let (dicts, dict_codec) = table();
    let codec = if data[0] & 0x80 != 0 { *dict_codec } else { data[0] };
    let raw_len = (u32::from_le_bytes([data[1], data[2], data[3], 0]) as usize) % (RAW_MAX + 1);
    let frame = &data[4..];
    let v = ValueRef::Packed {
        frame,
        codec,
        raw_len: raw_len as u32,
        dicts,
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
