//! The key hash functions of nutcracker's `src/hashkit`, bit for bit, as a
//! pool's `hash:` names them.
//!
//! nutcracker reads keys as C `char`s (signed on x86): wherever its code
//! casts one byte to a wider integer without going through `uint8_t`, a
//! byte ≥ 0x80 is sign-extended here too (`fnv*`, `one_at_a_time`, the
//! last byte of `hsieh`); `crc16`, `crc32a`, `murmur` and `jenkins` read
//! unsigned bytes. Words are read little endian (x86), as nutcracker's
//! unaligned reads do.

/// A pool's `hash:`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HashKind {
    /// `one_at_a_time`: [`one_at_a_time`].
    OneAtATime,
    /// `md5`: [`md5()`].
    Md5,
    /// `crc16`: [`crc16`].
    Crc16,
    /// `crc32`: [`crc32`].
    Crc32,
    /// `crc32a`: [`crc32a`].
    Crc32a,
    /// `fnv1_64`: [`fnv1_64`].
    Fnv1_64,
    /// `fnv1a_64`: [`fnv1a_64`], nutcracker's default.
    Fnv1a64,
    /// `fnv1_32`: [`fnv1_32`].
    Fnv1_32,
    /// `fnv1a_32`: [`fnv1a_32`].
    Fnv1a32,
    /// `hsieh`: [`hsieh`].
    Hsieh,
    /// `murmur`: [`murmur`].
    Murmur,
    /// `jenkins`: [`jenkins`].
    Jenkins,
}

impl HashKind {
    /// Every hash with its configuration name, in nutcracker's order.
    pub const ALL: [(&'static str, HashKind); 12] = [
        ("one_at_a_time", HashKind::OneAtATime),
        ("md5", HashKind::Md5),
        ("crc16", HashKind::Crc16),
        ("crc32", HashKind::Crc32),
        ("crc32a", HashKind::Crc32a),
        ("fnv1_64", HashKind::Fnv1_64),
        ("fnv1a_64", HashKind::Fnv1a64),
        ("fnv1_32", HashKind::Fnv1_32),
        ("fnv1a_32", HashKind::Fnv1a32),
        ("hsieh", HashKind::Hsieh),
        ("murmur", HashKind::Murmur),
        ("jenkins", HashKind::Jenkins),
    ];

    /// The hash a configuration names, if any.
    pub fn from_name(name: &str) -> Option<HashKind> {
        Self::ALL.iter().find(|(n, _)| *n == name).map(|&(_, h)| h)
    }

    /// Its configuration name.
    pub fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(_, h)| *h == self)
            .map(|&(n, _)| n)
            .unwrap()
    }

    /// The hash of `key`.
    pub fn hash(self, key: &[u8]) -> u32 {
        match self {
            HashKind::OneAtATime => one_at_a_time(key),
            HashKind::Md5 => md5(key),
            HashKind::Crc16 => crc16(key),
            HashKind::Crc32 => crc32(key),
            HashKind::Crc32a => crc32a(key),
            HashKind::Fnv1_64 => fnv1_64(key),
            HashKind::Fnv1a64 => fnv1a_64(key),
            HashKind::Fnv1_32 => fnv1_32(key),
            HashKind::Fnv1a32 => fnv1a_32(key),
            HashKind::Hsieh => hsieh(key),
            HashKind::Murmur => murmur(key),
            HashKind::Jenkins => jenkins(key),
        }
    }
}

/// The part of `key` a pool with hash tag `tag` hashes: what lies between
/// the tag's first opening character and the next closing one, when both
/// are there with something between them; else the whole key.
pub fn tagged(key: &[u8], tag: Option<[u8; 2]>) -> &[u8] {
    let Some([open, close]) = tag else {
        return key;
    };
    let Some(start) = key.iter().position(|&b| b == open) else {
        return key;
    };
    match key[start + 1..].iter().position(|&b| b == close) {
        Some(len) if len > 0 => &key[start + 1..start + 1 + len],
        _ => key,
    }
}

/// A C `char` widened to 32 bits (sign-extended).
fn sx(b: u8) -> u32 {
    b as i8 as i32 as u32
}

/// Jenkins' one-at-a-time (libhashkit's and nutcracker's).
pub fn one_at_a_time(key: &[u8]) -> u32 {
    let mut value: u32 = 0;
    for &b in key {
        value = value.wrapping_add(sx(b));
        value = value.wrapping_add(value << 10);
        value ^= value >> 6;
    }
    value = value.wrapping_add(value << 3);
    value ^= value >> 11;
    value.wrapping_add(value << 15)
}

/// Word `n` (0..4) of the MD5 digest of `data`, little endian
/// (`ketama_hash` with alignment `n`).
pub fn md5_word(data: &[u8], n: usize) -> u32 {
    let d = md5::compute(data).0;
    u32::from_le_bytes([d[4 * n], d[4 * n + 1], d[4 * n + 2], d[4 * n + 3]])
}

/// `hash_md5`: the digest's first four bytes, little endian.
pub fn md5(key: &[u8]) -> u32 {
    md5_word(key, 0)
}

/// nutcracker 0.5.0's `crc16`: the CRC-16/XMODEM table (0x1021, MSB
/// first, initial 0), but kept in a `uint32_t` that is never masked, so
/// the bits shifted past 16 stay in the hash.
pub fn crc16(key: &[u8]) -> u32 {
    let mut crc: u32 = 0;
    for &b in key {
        crc = (crc << 8) ^ XMODEM[(((crc >> 8) ^ b as u32) & 0xff) as usize] as u32;
    }
    crc
}

/// The CRC-16/XMODEM table.
const XMODEM: [u16; 256] = {
    let mut t = [0u16; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = (i as u16) << 8;
        let mut k = 0;
        while k < 8 {
            c = if c & 0x8000 != 0 {
                (c << 1) ^ 0x1021
            } else {
                c << 1
            };
            k += 1;
        }
        t[i] = c;
        i += 1;
    }
    t
};

/// The standard CRC-32 (reflected 0x04c11db7) of `key`.
fn crc32_ieee(key: &[u8]) -> u32 {
    let mut crc: u32 = !0;
    for &b in key {
        crc ^= b as u32;
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// libmemcached's `crc32`: bits 16..31 of the CRC-32, top bit cleared.
pub fn crc32(key: &[u8]) -> u32 {
    (crc32_ieee(key) >> 16) & 0x7fff
}

/// `crc32a`: the CRC-32 as the standard defines it.
pub fn crc32a(key: &[u8]) -> u32 {
    crc32_ieee(key)
}

const FNV_64_INIT: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_64_PRIME: u64 = 0x0000_0100_0000_01b3;
const FNV_32_INIT: u32 = 2_166_136_261;
const FNV_32_PRIME: u32 = 16_777_619;

/// `fnv1_64`: 64-bit FNV-1, truncated to its low 32 bits.
pub fn fnv1_64(key: &[u8]) -> u32 {
    let mut hash = FNV_64_INIT;
    for &b in key {
        hash = hash.wrapping_mul(FNV_64_PRIME);
        hash ^= b as i8 as i64 as u64;
    }
    hash as u32
}

/// `fnv1a_64` as nutcracker has it: FNV-1a computed in 32 bits with the
/// 64-bit constants truncated (nutcracker's default hash).
pub fn fnv1a_64(key: &[u8]) -> u32 {
    let mut hash = FNV_64_INIT as u32;
    for &b in key {
        hash ^= sx(b);
        hash = hash.wrapping_mul(FNV_64_PRIME as u32);
    }
    hash
}

/// `fnv1_32`.
pub fn fnv1_32(key: &[u8]) -> u32 {
    let mut hash = FNV_32_INIT;
    for &b in key {
        hash = hash.wrapping_mul(FNV_32_PRIME);
        hash ^= sx(b);
    }
    hash
}

/// `fnv1a_32`.
pub fn fnv1a_32(key: &[u8]) -> u32 {
    let mut hash = FNV_32_INIT;
    for &b in key {
        hash ^= sx(b);
        hash = hash.wrapping_mul(FNV_32_PRIME);
    }
    hash
}

/// Paul Hsieh's SuperFastHash as nutcracker has it (0 for an empty key).
pub fn hsieh(key: &[u8]) -> u32 {
    if key.is_empty() {
        return 0;
    }
    let get16 = |d: &[u8]| (d[0] as u32) | ((d[1] as u32) << 8);
    let mut hash: u32 = 0;
    let mut chunks = key.chunks_exact(4);
    for c in &mut chunks {
        hash = hash.wrapping_add(get16(c));
        let tmp = (get16(&c[2..]) << 11) ^ hash;
        hash = (hash << 16) ^ tmp;
        hash = hash.wrapping_add(hash >> 11);
    }
    let rest = chunks.remainder();
    match rest.len() {
        3 => {
            hash = hash.wrapping_add(get16(rest));
            hash ^= hash << 16;
            hash ^= sx(rest[2]) << 18;
            hash = hash.wrapping_add(hash >> 11);
        }
        2 => {
            hash = hash.wrapping_add(get16(rest));
            hash ^= hash << 11;
            hash = hash.wrapping_add(hash >> 17);
        }
        1 => {
            hash = hash.wrapping_add(rest[0] as u32);
            hash ^= hash << 10;
            hash = hash.wrapping_add(hash >> 1);
        }
        _ => {}
    }
    hash ^= hash << 3;
    hash = hash.wrapping_add(hash >> 5);
    hash ^= hash << 4;
    hash = hash.wrapping_add(hash >> 17);
    hash ^= hash << 25;
    hash.wrapping_add(hash >> 6)
}

/// MurmurHash2 with nutcracker's seed (`0xdeadbeef * length`).
pub fn murmur(key: &[u8]) -> u32 {
    const M: u32 = 0x5bd1_e995;
    let len = key.len() as u32;
    let seed = 0xdead_beef_u32.wrapping_mul(len);
    let mut h = seed ^ len;
    let mut chunks = key.chunks_exact(4);
    for c in &mut chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> 24;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let rest = chunks.remainder();
    if rest.len() >= 3 {
        h ^= (rest[2] as u32) << 16;
    }
    if rest.len() >= 2 {
        h ^= (rest[1] as u32) << 8;
    }
    if !rest.is_empty() {
        h ^= rest[0] as u32;
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^ (h >> 15)
}

/// Bob Jenkins' lookup3 `hashlittle` with initial value 13, as
/// libmemcached and nutcracker have it.
pub fn jenkins(key: &[u8]) -> u32 {
    let init = 0xdead_beef_u32
        .wrapping_add(key.len() as u32)
        .wrapping_add(13);
    let (mut a, mut b, mut c) = (init, init, init);
    let word = |d: &[u8]| {
        let mut w = [0u8; 4];
        w[..d.len()].copy_from_slice(d);
        u32::from_le_bytes(w)
    };
    let mut k = key;
    while k.len() > 12 {
        a = a.wrapping_add(word(&k[0..4]));
        b = b.wrapping_add(word(&k[4..8]));
        c = c.wrapping_add(word(&k[8..12]));
        mix(&mut a, &mut b, &mut c);
        k = &k[12..];
    }
    if k.is_empty() {
        return c;
    }
    a = a.wrapping_add(word(&k[..k.len().min(4)]));
    if k.len() > 4 {
        b = b.wrapping_add(word(&k[4..k.len().min(8)]));
    }
    if k.len() > 8 {
        c = c.wrapping_add(word(&k[8..]));
    }
    final_mix(&mut a, &mut b, &mut c);
    c
}

fn mix(a: &mut u32, b: &mut u32, c: &mut u32) {
    *a = a.wrapping_sub(*c);
    *a ^= c.rotate_left(4);
    *c = c.wrapping_add(*b);
    *b = b.wrapping_sub(*a);
    *b ^= a.rotate_left(6);
    *a = a.wrapping_add(*c);
    *c = c.wrapping_sub(*b);
    *c ^= b.rotate_left(8);
    *b = b.wrapping_add(*a);
    *a = a.wrapping_sub(*c);
    *a ^= c.rotate_left(16);
    *c = c.wrapping_add(*b);
    *b = b.wrapping_sub(*a);
    *b ^= a.rotate_left(19);
    *a = a.wrapping_add(*c);
    *c = c.wrapping_sub(*b);
    *c ^= b.rotate_left(4);
    *b = b.wrapping_add(*a);
}

fn final_mix(a: &mut u32, b: &mut u32, c: &mut u32) {
    *c ^= *b;
    *c = c.wrapping_sub(b.rotate_left(14));
    *a ^= *c;
    *a = a.wrapping_sub(c.rotate_left(11));
    *b ^= *a;
    *b = b.wrapping_sub(a.rotate_left(25));
    *c ^= *b;
    *c = c.wrapping_sub(b.rotate_left(16));
    *a ^= *c;
    *a = a.wrapping_sub(c.rotate_left(4));
    *b ^= *a;
    *b = b.wrapping_sub(a.rotate_left(14));
    *c ^= *b;
    *c = c.wrapping_sub(b.rotate_left(24));
}
