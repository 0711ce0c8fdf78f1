//! Packed values (`Compression::All`): every read gives the client's
//! bytes, every copy keeps the frame, and a frame that does not decode is
//! dropped, never served.

use super::*;

fn packing_store() -> Store {
    Store::new(StoreConfig {
        compression: Compression::All,
        ..StoreConfig::default()
    })
}

/// A value that compresses well, `len` bytes.
fn text(len: usize, seed: u32) -> Vec<u8> {
    let mut v = Vec::with_capacity(len + 64);
    let mut i = seed;
    while v.len() < len {
        v.extend_from_slice(
            format!("{{\"id\":{i},\"name\":\"user{}\",\"ok\":true}},", i % 97).as_bytes(),
        );
        i += 1;
    }
    v.truncate(len);
    v
}

fn packed(s: &Store, key: &[u8]) -> Option<bool> {
    match s.get(key, None, |it| it.is_packed()) {
        Lookup::Hit(p) => Some(p),
        _ => None,
    }
}

#[test]
fn values_are_packed_at_set_and_read_back_whole() {
    let s = packing_store();
    for (i, len) in [64usize, 100, 1000, 4096, 100_000, 1 << 20]
        .into_iter()
        .enumerate()
    {
        let key = format!("k{i}");
        let value = text(len, i as u32);
        let (status, cas) = put(&s, 0, StoreMode::Set, key.as_bytes(), 7, 0, &value, 0);
        let too_large = len == 1 << 20;
        if too_large {
            // -I counts the client's bytes, as memcached's limit does.
            assert_eq!(status, StoreStatus::TooLarge);
            continue;
        }
        assert_eq!(status, StoreStatus::Stored, "{len}");
        if len >= 1000 {
            assert_eq!(packed(&s, key.as_bytes()), Some(true), "{len}");
        }
        let (v, flags, got_cas) = get(&s, key.as_bytes()).unwrap();
        assert_eq!((v.len(), flags, got_cas), (len, 7, cas));
        assert_eq!(v, value, "{len}");
        let r = s.get(key.as_bytes(), None, |it| {
            (it.value_len(), it.value().len())
        });
        assert_eq!(r, Lookup::Hit((len, len)));
    }
    // Small and incompressible values stay raw.
    set(&s, StoreMode::Set, b"small", &text(63, 1), 0);
    assert_eq!(packed(&s, b"small"), Some(false));
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let noise: Vec<u8> = (0..5000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect();
    set(&s, StoreMode::Set, b"noise", &noise, 0);
    assert_eq!(packed(&s, b"noise"), Some(false));
    assert_eq!(get(&s, b"noise").unwrap().0, noise);
    // Off never packs.
    let off = store();
    set(&off, StoreMode::Set, b"k", &text(4096, 0), 0);
    assert_eq!(packed(&off, b"k"), Some(false));
}

#[test]
fn append_prepend_incr_and_touch_see_the_clients_bytes() {
    let s = packing_store();
    let value = text(500, 3);
    set(&s, StoreMode::Set, b"a", &value, 0);
    assert_eq!(packed(&s, b"a"), Some(true));
    assert_eq!(
        set(&s, StoreMode::Append, b"a", b"-tail", 0),
        StoreStatus::Stored
    );
    let mut want = value.clone();
    want.extend_from_slice(b"-tail");
    assert_eq!(get(&s, b"a").unwrap().0, want);
    set(&s, StoreMode::Set, b"p", &value, 0);
    assert_eq!(
        set(&s, StoreMode::Prepend, b"p", b"head-", 0),
        StoreStatus::Stored
    );
    assert_eq!(get(&s, b"p").unwrap().0, [&b"head-"[..], &value].concat());
    // A 100-byte number-like value: too long for a number, as memcached says.
    let digits = vec![b'1'; 100];
    set(&s, StoreMode::Set, b"n", &digits, 0);
    assert_eq!(packed(&s, b"n"), Some(true));
    assert_eq!(s.arith(0, b"n", true, 1), ArithResult::NonNumeric);
    assert_eq!(get(&s, b"n").unwrap().0, digits);
    // gat on an item without an expiry field copies it, frame and all.
    let (_, cas) = put(&s, 0, StoreMode::Set, b"t", 0, 0, &value, 0);
    let r = s.get(b"t", Some(1000), |it| {
        (it.value().to_vec().unwrap(), it.cas())
    });
    assert_eq!(r, Lookup::Hit((value.clone(), cas)));
    assert_eq!(packed(&s, b"t"), Some(true));
    assert_eq!(get(&s, b"t").unwrap(), (value, 0, cas));
}

#[test]
fn a_frame_that_does_not_decode_is_dropped_and_counted() {
    let s = packing_store();
    let value = text(3000, 5);
    set(&s, StoreMode::Set, b"bad", &value, 0);
    set(&s, StoreMode::Set, b"good", &value, 0);
    let frame = match s.get(b"bad", None, |it| {
        it.value().as_raw().is_none().then(|| it.ptr.stored_value())
    }) {
        Lookup::Hit(Some(f)) => f,
        _ => panic!("packed"),
    };
    // SAFETY: the test alone uses the store; the frame's bytes are in item
    // memory, which lives as long as `s`.
    unsafe { std::ptr::write_bytes(frame.as_ptr() as *mut u8, 0xff, frame.len()) };
    let r = s.get(b"bad", None, |it| {
        let mut out = b"VALUE".to_vec();
        (it.value().append_to(&mut out), out)
    });
    assert_eq!(r, Lookup::Hit((Err(Corrupt), b"VALUE".to_vec())));
    s.drop_corrupt(b"bad");
    assert_eq!(s.compress_errors(), 1);
    assert_eq!(s.stats().compress_errors, 1, "the stats row's figure");
    assert_eq!(get(&s, b"bad"), None);
    // A sound one is left alone.
    s.drop_corrupt(b"good");
    assert_eq!(s.compress_errors(), 1);
    assert_eq!(get(&s, b"good").unwrap().0, value);
}
