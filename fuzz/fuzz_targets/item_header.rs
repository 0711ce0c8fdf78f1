//! Feeds arbitrary bytes as an item header to the recovery's trust gate
//! (`ItemPtr::checked_size_within`, packed values' fields included): byte 0
//! picks an even or odd address (atime and state swap) and bytes 1-3 the
//! `-I` (at most 2 MiB); the rest is the item memory. Any panic is a bug;
//! so is an item it accepts whose key or value is not inside the size it
//! gave, or whose packed value's raw length breaks the gate's bounds.
#![no_main]
use libfuzzer_sys::fuzz_target;
use osmium_store::dict::DictTable;
use osmium_store::item::ItemPtr;

fuzz_target!(|data: &[u8]| {
    if data.len() < 4 {
        return;
    }
    let odd = usize::from(data[0] & 1);
    let raw_max = (u32::from_le_bytes([data[1], data[2], data[3], 0]) as usize) % (2 << 20) + 1;
    let bytes = &data[4..];
    // Item memory: 8-aligned, the item at offset `odd`, nothing after it
    // that the gate may count on.
    let mut mem = vec![0u64; (bytes.len() + odd) / 8 + 1];
    let base = mem.as_mut_ptr() as *mut u8;
    // SAFETY: `mem` holds bytes.len() + odd bytes or more; the copy stays
    // inside it.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), base.add(odd), bytes.len()) };
    let room = bytes.len();
    // SAFETY: the address is inside `mem`, which lives to the end of this
    // call; the gate reads no further than `room` bytes from it.
    let it = unsafe { ItemPtr::from_raw(base.add(odd)) };
    let Some(size) = it.checked_size_within(room, raw_max) else {
        return;
    };
    assert!(size <= room);
    let start = base as usize + odd;
    let inside = |s: &[u8]| {
        let p = s.as_ptr() as usize;
        s.is_empty() || (p >= start && p + s.len() <= start + size)
    };
    let m = it.meta();
    assert!(inside(it.key_at(&m)));
    assert!(inside(it.stored_value_at(&m)));
    assert_eq!(it.size(), size);
    assert_eq!(m.stored_len(), it.stored_len());
    if let Some((_, raw_len)) = it.packed() {
        assert!((64..=raw_max).contains(&raw_len) && m.stored_len() < raw_len);
        assert_eq!(m.value_len(), raw_len);
        // Whatever the frame holds, the decoder answers in kind.
        let dicts = DictTable::new();
        let mut out = Vec::new();
        match it.value_ref(&dicts).append_to(&mut out) {
            Ok(()) => assert_eq!(out.len(), raw_len),
            Err(_) => assert!(out.is_empty()),
        }
    } else {
        assert_eq!(m.value_len(), m.stored_len());
    }
    let _ = (it.flags(), it.exptime(), it.stored_cas(), it.spec());
});
