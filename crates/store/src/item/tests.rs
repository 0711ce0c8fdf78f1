//! The item layout's unit tests: every field combination written and
//! read back, the recovery's trust gate, sizes.
use super::header::OFF_VLEN;
use super::*;

fn buf() -> Vec<u64> {
    vec![0u64; 64]
}

#[test]
fn plain_item_has_a_five_byte_header() {
    assert_eq!(item_size(16, 64), 85);
    assert_eq!(item_size(1, 0), 6);
    assert_eq!(item_size(1, 1), 7);
    assert_eq!(item_size(1, 128), 4 + 2 + 1 + 128);
}

#[test]
fn layout_roundtrip() {
    let mut b = buf();
    let p = b.as_mut_ptr() as *mut u8;
    let spec = ItemSpec {
        key_len: 3,
        value_len: 5,
        flags: 7,
        exptime: 100,
        exptime_field: true,
        cas: Some(99),
        ..ItemSpec::default()
    };
    // SAFETY: the buffer is 512 bytes, 8-aligned and owned by the test.
    let it = unsafe { ItemPtr::from_raw(p) };
    // SAFETY: the test alone holds the buffer; the item takes 30 of its
    // 512 bytes, and the value parts are the 5 bytes of value_len.
    unsafe { it.init(&spec, b"key", &[b"he", b"llo"], 62, STATE_BINARY_KEY) };
    assert_eq!(it.key(), b"key");
    assert_eq!(it.stored_value(), b"hello");
    assert_eq!(
        (it.flags(), it.exptime(), it.atime(), it.stored_cas()),
        (7, 100, 62, Some(99))
    );
    assert_eq!(it.size(), spec.size());
    assert_eq!(it.size(), 4 + 1 + 1 + 16 + 3 + 5);
    assert!(it.has_state(STATE_BINARY_KEY) && !it.is_dead());
    // SAFETY: no other thread sees the item (the exclusion a shard
    // write lock gives), and `spec` gave it an exptime field.
    unsafe { it.set_exptime(5) };
    assert_eq!(it.exptime(), 5);
    assert_eq!(it.flags(), 7);
    it.mark_dead();
    it.bump(70);
    assert!(it.is_dead() && it.is_fetched());
    assert_eq!(it.freq(), 1);
    it.bump(71);
    it.bump(72);
    it.bump(73);
    assert_eq!((it.freq(), it.atime()), (FREQ_MAX, 73));
    assert_eq!(it.spec().cas, Some(99));
}

#[test]
fn key_is_compares_every_byte_of_every_length() {
    let mut b = buf();
    for len in 1..=40usize {
        let key: Vec<u8> = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
        let spec = ItemSpec {
            key_len: len,
            value_len: 3,
            ..Default::default()
        };
        // SAFETY: the buffer is 512 bytes and owned by the test.
        let it = unsafe { ItemPtr::from_raw((b.as_mut_ptr() as *mut u8).add(1)) };
        // SAFETY: the test alone holds the buffer; a key of at most
        // 40 bytes and a 3-byte value fit in the 511 bytes after the
        // start; the one part is the whole value.
        unsafe { it.init(&spec, &key, &[b"val"], 0, 0) };
        let m = it.meta();
        assert!(it.key_is(&m, &key), "{len}");
        for i in 0..len {
            let mut other = key.clone();
            other[i] ^= 0x20;
            assert!(!it.key_is(&m, &other), "{len} {i}");
        }
        assert!(!it.key_is(&m, &key[..len - 1]));
    }
}

#[test]
fn odd_addresses_swap_state_and_atime() {
    let mut b = buf();
    for start in [1usize, 2, 3] {
        // SAFETY: the buffer is 512 bytes and owned by the test.
        let it = unsafe { ItemPtr::from_raw((b.as_mut_ptr() as *mut u8).add(start)) };
        let spec = ItemSpec {
            key_len: 1,
            value_len: 2,
            ..ItemSpec::default()
        };
        // SAFETY: the test alone holds the buffer; the 8-byte item
        // fits after a start of at most 3; the one part is the value.
        unsafe { it.init(&spec, b"k", &[b"vv"], 300, STATE_FETCHED) };
        assert_eq!((it.atime(), it.is_fetched()), (300, true));
        it.bump(301);
        assert_eq!((it.atime(), it.freq()), (301, 1));
        assert_eq!((it.key(), it.stored_value()), (&b"k"[..], &b"vv"[..]));
    }
}

#[test]
fn long_values_and_no_ext() {
    for vlen in [0usize, 1, 127, 128, 16_383, 16_384, 2_097_152] {
        let spec = ItemSpec {
            key_len: 250,
            value_len: vlen,
            ..ItemSpec::default()
        };
        let mut b = vec![0u64; spec.size() / 8 + 1];
        let value = vec![b'x'; vlen];
        let key = [b'k'; 250];
        // SAFETY: the buffer holds spec.size() bytes, 8-aligned.
        let it = unsafe { ItemPtr::from_raw(b.as_mut_ptr() as *mut u8) };
        // SAFETY: the test alone holds the buffer, spec.size() bytes
        // or more; the one part is the whole value.
        unsafe { it.init(&spec, &key, &[&value], 0, 0) };
        assert_eq!(it.value_len(), vlen);
        assert_eq!(it.key(), &key[..]);
        assert_eq!(it.stored_value(), &value[..]);
        assert_eq!((it.flags(), it.exptime(), it.stored_cas()), (0, 0, None));
        assert!(!it.has_exptime_field());
        assert_eq!(it.size(), spec.size());
    }
}

/// Writes `spec`'s item (key `k...`, value bytes `v`) at offset
/// `start` of a fresh buffer and returns the buffer and the item.
fn written(spec: &ItemSpec, start: usize) -> (Vec<u64>, ItemPtr) {
    let mut b = vec![0u64; (spec.size() + start) / 8 + 2];
    let key = vec![b'k'; spec.key_len];
    let value: Vec<u8> = (0..spec.value_len).map(|i| i as u8).collect();
    // SAFETY: the buffer holds start + spec.size() bytes.
    let it = unsafe { ItemPtr::from_raw((b.as_mut_ptr() as *mut u8).add(start)) };
    // SAFETY: the test alone holds the buffer, large enough for the
    // item; the one part is the whole value.
    unsafe { it.init(spec, &key, &[&value], 9, 0) };
    (b, it)
}

#[test]
fn every_ext_combination_round_trips_packed_and_raw_tried_included() {
    // Raw lengths whose varint takes 1, 2 and 3 bytes.
    for raw_len in [100usize, 127, 128, 16_383, 16_384, 2_000_000] {
        for bits in 0u8..32 {
            if bits & (EXT_PACKED | EXT_RAW_TRIED) == EXT_PACKED | EXT_RAW_TRIED {
                continue;
            }
            let packed = bits & EXT_PACKED != 0;
            let spec = ItemSpec {
                key_len: 7,
                value_len: if packed { 40 } else { 90 },
                flags: if bits & EXT_FLAGS != 0 {
                    0xdead_beef
                } else {
                    0
                },
                exptime: if bits & EXT_EXPTIME != 0 { 1234 } else { 0 },
                exptime_field: bits & EXT_EXPTIME != 0,
                cas: (bits & EXT_CAS != 0).then_some(u64::MAX - 3),
                packed: packed.then_some((0x41, raw_len)),
                raw_tried: bits & EXT_RAW_TRIED != 0,
            };
            assert_eq!(spec.ext(), bits);
            for start in [0usize, 1] {
                let (_b, it) = written(&spec, start);
                let what = format!("bits {bits:#x} raw {raw_len} at {start}");
                assert_eq!(it.size(), spec.size(), "{what}");
                assert_eq!(it.checked_size(spec.size()), Some(spec.size()), "{what}");
                assert_eq!(it.checked_size(spec.size() - 1), None, "{what}");
                let back = it.spec();
                assert_eq!(
                    (back.flags, back.exptime, back.exptime_field, back.cas),
                    (spec.flags, spec.exptime, spec.exptime_field, spec.cas),
                    "{what}"
                );
                assert_eq!((back.packed, back.raw_tried), (spec.packed, spec.raw_tried));
                assert_eq!(back.value_len, spec.value_len);
                assert_eq!(it.key(), &[b'k'; 7][..], "{what}");
                let value: Vec<u8> = (0..spec.value_len).map(|i| i as u8).collect();
                assert_eq!(it.stored_value(), &value[..], "{what}");
                assert_eq!(it.stored_len(), spec.value_len);
                assert_eq!(it.value_len(), spec.raw_len(), "{what}");
                assert_eq!(it.packed(), spec.packed);
                assert_eq!(it.raw_tried(), spec.raw_tried);
                let m = it.meta();
                assert_eq!(
                    (m.value_len(), m.stored_len()),
                    (spec.raw_len(), spec.value_len)
                );
                assert_eq!(m.is_packed(), packed);
                assert_eq!(it.stored_value_at(&m), &value[..]);
                assert_eq!(it.key_at(&m), &[b'k'; 7][..]);
                assert_eq!(
                    (m.flags, m.exptime, m.stored_cas),
                    (spec.flags, spec.exptime, spec.cas)
                );
                let dicts = DictTable::new();
                match it.value_ref(&dicts) {
                    ValueRef::Raw(v) => assert!(!packed && v == &value[..]),
                    ValueRef::Packed {
                        frame,
                        codec,
                        raw_len: r,
                        ..
                    } => {
                        assert!(packed && frame == &value[..] && codec == 0x41);
                        assert_eq!(r as usize, raw_len);
                    }
                }
                // The expiry is still set in place after the packed fields.
                if bits & EXT_EXPTIME != 0 {
                    // SAFETY: the test alone holds the item, which has the field.
                    unsafe { it.set_exptime(77) };
                    assert_eq!((it.exptime(), it.value_len()), (77, spec.raw_len()));
                    assert_eq!(it.flags(), spec.flags);
                }
            }
        }
    }
}

#[test]
fn checked_size_refuses_unknown_bits_and_impossible_raw_lengths() {
    let spec = ItemSpec {
        key_len: 3,
        value_len: 50,
        packed: Some((0, 1000)),
        ..ItemSpec::default()
    };
    let (_b, it) = written(&spec, 0);
    let size = spec.size();
    assert_eq!(it.checked_size_within(size, 1000), Some(size));
    assert_eq!(it.checked_size_within(size, 999), None, "rawlen over -I");
    // The ext byte is right after the one-byte vlen.
    let ext = it.0.wrapping_add(OFF_VLEN + 1);
    for bit in [32u8, 64, 128, EXT_RAW_TRIED] {
        // SAFETY: the test alone holds the buffer; the byte is inside it.
        unsafe { ext.write(EXT_PACKED | bit) };
        assert_eq!(it.checked_size(size + 64), None, "bit {bit:#x}");
    }
    // SAFETY: as above.
    unsafe { ext.write(EXT_PACKED) };
    assert_eq!(it.checked_size(size), Some(size));
    let small = ItemSpec {
        packed: Some((0, 63)),
        value_len: 10,
        ..spec
    };
    let (_b, it) = written(&small, 0);
    assert_eq!(
        it.checked_size(small.size()),
        None,
        "rawlen under the minimum"
    );
    let not_smaller = ItemSpec {
        packed: Some((0, 100)),
        value_len: 100,
        ..spec
    };
    let (_b, it) = written(&not_smaller, 0);
    assert_eq!(
        it.checked_size(not_smaller.size()),
        None,
        "frame not shorter"
    );
    // A raw length that runs past the room is refused, not read.
    let (_b, it) = written(&spec, 0);
    for room in HEADER_SIZE..spec.size() {
        assert_eq!(it.checked_size(room), None, "room {room}");
    }
}

#[test]
fn a_packed_header_costs_the_codec_byte_and_the_raw_length() {
    let raw = ItemSpec {
        key_len: 16,
        value_len: 200,
        ..ItemSpec::default()
    };
    let packed = ItemSpec {
        value_len: 100,
        packed: Some((0, 200)),
        ..raw
    };
    // ext byte + codec + 2-byte rawlen; vlen of 100 takes 1 byte, not 2.
    assert_eq!(packed.size(), raw.size() - 100 + 1 + 1 + 2 - 1);
    let tried = ItemSpec {
        raw_tried: true,
        ..raw
    };
    assert_eq!(tried.size(), raw.size() + 1);
    assert_eq!(packed.with_raw_value(5).size(), item_size(16, 5));
}
