"""Makes the seed corpora of the fuzz targets packed_value and item_header
(fuzz/seeds/packed_value/, fuzz/seeds/item_header/) from text every machine
that runs the project's Python suites has: the Python standard library's
sources and the Debian packages' copyright files (the corpus's local
sources), cut into values of 64 B to 64 KiB.

Each value is packed as osmium packs it (zstd level 1, magicless frame, no
content size, checksum or dictionary id; Python's `zstandard`, the same
libzstd format) and written in each target's input format:

    packed_value: codec u8 | raw length u24 LE | frame
    item_header:  odd u8 | -I u24 LE | item bytes (osmium's item layout)

plus truncated and bit-flipped frames, a frame with the wrong raw length,
an unknown codec byte, frames coded with the target's dictionary (whole,
truncated, bit-flipped), and items with every ext field, a RAW_TRIED item and
headers cut short.

    python3 fuzz/seeds/make_packed_value_seeds.py
"""
import glob
import os
import random
import struct

import zstandard

HERE = os.path.dirname(os.path.abspath(__file__))
SIZES = [64, 100, 300, 1000, 4096, 16384, 65536]


def sources():
    files = sorted(glob.glob("/usr/lib/python3*/*.py"))[:40]
    files += sorted(glob.glob("/usr/share/doc/*/copyright"))[:40]
    for f in files:
        try:
            with open(f, "rb") as fh:
                data = fh.read()
        except OSError:
            continue
        if len(data) >= 64:
            yield data


def values():
    rng = random.Random(7)
    texts = list(sources())
    if not texts:
        texts = [b"".join(b"line %d of a cached value\n" % i for i in range(5000))]
    out = []
    for i, size in enumerate(SIZES):
        t = texts[(i * 7) % len(texts)]
        while len(t) < size:
            t += t
        at = rng.randrange(0, len(t) - size + 1)
        out.append(t[at:at + size])
    return out


def pack(value):
    params = zstandard.ZstdCompressionParameters.from_level(
        1, format=zstandard.FORMAT_ZSTD1_MAGICLESS,
        write_content_size=False, write_checksum=False, write_dict_id=False)
    return zstandard.ZstdCompressor(compression_params=params).compress(value)


def fuzz_dict():
    """The raw-content dictionary the packed_value target's table holds
    (byte for byte the text fuzz_targets/packed_value.rs makes)."""
    return b"".join(
        b'{"id":%d,"user":"name%d","score":%d,"ok":true},' % (i, i % 37, i * 7)
        for i in range(200))


def pack_with_dict(value):
    params = zstandard.ZstdCompressionParameters.from_level(
        1, format=zstandard.FORMAT_ZSTD1_MAGICLESS,
        write_content_size=False, write_checksum=False, write_dict_id=False)
    d = zstandard.ZstdCompressionDict(fuzz_dict(), dict_type=zstandard.DICT_TYPE_RAWCONTENT)
    return zstandard.ZstdCompressor(dict_data=d, compression_params=params).compress(value)


def varint(n):
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def item(key, stored, flags=0, exptime=None, cas=None, packed=None, raw_tried=False):
    """osmium's item layout at an even address (see crates/store/src/item.rs)."""
    ext = 0
    fields = b""
    if flags:
        ext |= 1
        fields += struct.pack("<I", flags)
    if exptime is not None:
        ext |= 2
        fields += struct.pack("<I", exptime)
    if cas is not None:
        ext |= 4
        fields += struct.pack("<Q", cas)
    if packed is not None:
        ext |= 8
        codec, raw_len = packed
        fields += bytes([codec]) + varint(raw_len)
    elif raw_tried:
        ext |= 16
    state = 0x20 if ext else 0
    head = struct.pack("<H", 0) + bytes([state, len(key)]) + varint(len(stored))
    if ext:
        head += bytes([ext]) + fields
    return head + key + stored


def write(target, name, data):
    d = os.path.join(HERE, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def main():
    rng = random.Random(11)
    drng = random.Random(13)
    max_i = struct.pack("<I", 1 << 20)[:3]
    for v in values():
        frame = pack(v)
        n = len(v)
        raw = struct.pack("<I", n)[:3]
        write("packed_value", f"plain_{n}", b"\0" + raw + frame)
        write("packed_value", f"cut_{n}", b"\0" + raw + frame[:len(frame) // 2])
        flipped = bytearray(frame)
        flipped[rng.randrange(len(flipped))] ^= 1 << rng.randrange(8)
        write("packed_value", f"flip_{n}", b"\0" + raw + bytes(flipped))
        write("packed_value", f"short_{n}", b"\0" + struct.pack("<I", n - 1)[:3] + frame)
        write("packed_value", f"dict_{n}", b"\x41" + raw + frame)
        # Coded with the target's dictionary (codec byte 0x80: "the
        # table's dictionary"), whole, cut short and bit-flipped.
        coded = pack_with_dict(v)
        write("packed_value", f"dict_coded_{n}", b"\x80" + raw + coded)
        write("packed_value", f"dict_cut_{n}", b"\x80" + raw + coded[:len(coded) // 2])
        flipped = bytearray(coded)
        flipped[drng.randrange(len(flipped))] ^= 1 << drng.randrange(8)
        write("packed_value", f"dict_flip_{n}", b"\x80" + raw + bytes(flipped))
        if len(frame) < n:
            key = b"key:%d" % n
            full = item(key, frame, flags=7, exptime=100, cas=99, packed=(0, n))
            write("item_header", f"packed_all_{n}", b"\0" + max_i + full)
            write("item_header", f"packed_{n}", b"\1" + max_i + item(key, frame, packed=(0, n)))
            write("item_header", f"cut_{n}", b"\0" + max_i + full[:12])
            write("item_header", f"small_limit_{n}", b"\0" + struct.pack("<I", n - 1)[:3] + full)
        write("item_header", f"raw_tried_{n}", b"\0" + max_i + item(b"k", v[:200], raw_tried=True))
    write("item_header", "plain", b"\0" + max_i + item(b"key", b"value"))


if __name__ == "__main__":
    main()
