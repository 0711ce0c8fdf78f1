#!/usr/bin/env python3
"""Items a cache holds at the same -m when its values are real files.

Values of 64 B to 16 KiB (log-normal, mean about 5 KiB) are cut out of the
files of this machine: man pages (gunzipped), /usr/share/doc, Python
sources, and JSON, XML and HTML under /usr/share (about 85 %), and already
compressed files as they are (*.gz, *.png: about 15 %). Each server under
test (osmium with `-o compression=cold`, the same with `-o
compress_dicts=off` (no dictionaries), with `off`, memcached 1.6.45) is
filled with the same values, keys `k0`, `k1`, ... in batches of 100
pipelined sets, until FACTOR times -m of values were stored; then every key is read
back with `mg KEY s v`, each held value checked byte for byte, and the
items held and their bytes printed with the server's packing stats.

usage: density-corpus.py OSMIUM [--memcached BIN] [-m MB] [--factor F]
       [--threads T] [--seed S] [--rate MIB_PER_S]

The fill is paced (--rate, 40 MiB/s of values by default): osmium packs
cold items in a background thread, which a fill at full speed outruns
(see --rate 0).

Servers listen on 127.0.0.1 on a free port and are stopped by PID.
"""

import argparse
import gzip
import math
import os
import random
import socket
import subprocess
import sys
import time


def gather_files(seed):
    """(text files, compressed files): paths, shuffled with `seed`."""
    text, packed = [], []
    for root in ("/usr/share/man", "/usr/share/doc", "/usr/share"):
        for dirpath, _, names in os.walk(root):
            if root == "/usr/share" and dirpath.startswith(("/usr/share/man", "/usr/share/doc")):
                continue
            for n in names:
                p = os.path.join(dirpath, n)
                if root == "/usr/share" and not n.endswith((".json", ".xml", ".html", ".png", ".gz")):
                    continue
                if n.endswith(".png"):
                    packed.append(p)
                elif n.endswith(".gz"):
                    (text if root != "/usr/share" else packed).append(p)
                    if root == "/usr/share/doc":
                        packed.append(p)
                else:
                    text.append(p)
    for base in ("/usr/lib",):
        for dirpath, _, names in os.walk(base):
            if "/python3" in dirpath:
                text.extend(os.path.join(dirpath, n) for n in names if n.endswith(".py"))
    rng = random.Random(seed)
    rng.shuffle(text)
    rng.shuffle(packed)
    return text, packed


def load(paths, limit_bytes, unzip):
    """The contents of `paths` (gunzipped when `unzip`), up to `limit_bytes`
    in all, each at least 256 bytes."""
    out, total = [], 0
    for p in paths:
        try:
            with open(p, "rb") as f:
                data = f.read(1 << 20)
            if unzip and p.endswith(".gz"):
                data = gzip.decompress(data)[: 1 << 20]
        except (OSError, EOFError, gzip.BadGzipFile, ValueError):
            continue
        if len(data) < 256:
            continue
        out.append(data)
        total += len(data)
        if total >= limit_bytes:
            break
    return out


class Corpus:
    def __init__(self, seed):
        text_paths, packed_paths = gather_files(seed)
        self.text = load(text_paths, 160 << 20, unzip=True)
        self.packed = load(packed_paths, 40 << 20, unzip=False)
        self.seed = seed

    def value(self, i):
        rng = random.Random(self.seed * 1_000_003 + i)
        n = int(math.exp(rng.gauss(math.log(3600), 0.85)))
        n = max(64, min(16384, n))
        pool = self.packed if rng.random() < 0.15 else self.text
        out = bytearray()
        while len(out) < n:
            src = pool[rng.randrange(len(pool))]
            at = rng.randrange(max(1, len(src) - (n - len(out))))
            out += src[at : at + n - len(out)]
        return bytes(out)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def start(cmd, port):
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(200):
        try:
            return p, socket.create_connection(("127.0.0.1", port))
        except OSError:
            time.sleep(0.05)
    p.kill()
    sys.exit(f"{cmd[0]} did not start")


def read_until(c, buf, end):
    while not buf.endswith(end):
        chunk = c.recv(1 << 20)
        if not chunk:
            sys.exit("connection closed")
        buf += chunk
    return buf


def stats(c):
    c.sendall(b"stats\r\n")
    text = read_until(c, bytearray(), b"END\r\n").decode()
    return {l.split()[1]: l.split()[2] for l in text.splitlines() if l.startswith("STAT ")}


def fill(c, corpus, n, rate):
    """Sets keys 0..n, at most `rate` MiB of values a second (0: as fast as
    the server takes them)."""
    stored, sent, t0 = 0, 0, time.time()
    for start_i in range(0, n, 100):
        if rate:
            ahead = sent / (rate * 2**20) - (time.time() - t0)
            if ahead > 0:
                time.sleep(ahead)
        req = bytearray()
        batch = range(start_i, min(n, start_i + 100))
        for i in batch:
            v = corpus.value(i)
            req += b"set k%d 0 0 %d\r\n" % (i, len(v)) + v + b"\r\n"
            sent += len(v)
        c.sendall(req)
        buf = bytearray()
        while buf.count(b"\r\n") < len(batch):
            buf += c.recv(1 << 16)
        stored += buf.count(b"STORED\r\n")
    return stored


def held(c, corpus, n):
    items, value_bytes = 0, 0
    for start_i in range(0, n, 200):
        batch = range(start_i, min(n, start_i + 200))
        c.sendall(b"".join(b"mg k%d s v\r\n" % i for i in batch) + b"mn\r\n")
        buf = bytes(read_until(c, bytearray(), b"MN\r\n"))
        at = 0
        for i in batch:
            end = buf.index(b"\r\n", at)
            line = buf[at:end].split()
            at = end + 2
            if line[0] == b"EN":
                continue
            size = int(line[1])
            got = buf[at : at + size]
            at += size + 2
            want = corpus.value(i)
            if got != want or line[2] != b"s%d" % len(want):
                sys.exit(f"k{i}: the value read back differs")
            items += 1
            value_bytes += size
    return items, value_bytes


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("osmium")
    ap.add_argument("--memcached", default=os.environ.get("MEMCACHED_BIN"))
    ap.add_argument("-m", type=int, default=256)
    ap.add_argument("--factor", type=float, default=3.0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rate", type=float, default=40,
                    help="MiB of values a second the fill sends at most (0: no limit)")
    ap.add_argument("--only", help="comma-separated: cold,nodicts,off,memcached")
    a = ap.parse_args()
    t0 = time.time()
    corpus = Corpus(a.seed)
    sample = [corpus.value(i) for i in range(2000)]
    mean = sum(map(len, sample)) / len(sample)
    n = int(a.factor * a.m * 1024 * 1024 / mean)
    print(f"corpus: {len(corpus.text)} text files, {len(corpus.packed)} compressed files "
          f"({time.time() - t0:.1f} s); values: mean {mean:.0f} B, {n} values "
          f"({n * mean / 2**20:.0f} MiB, {a.factor}x -m {a.m})")
    runs = [("cold", [a.osmium, "-o", "compression=cold"]),
            ("nodicts", [a.osmium, "-o", "compression=cold", "-o", "compress_dicts=off"]),
            ("off", [a.osmium, "-o", "compression=off"])]
    if a.memcached:
        runs.append(("memcached", [a.memcached]))
    if a.only:
        runs = [r for r in runs if r[0] in a.only.split(",")]
    print(f"{'server':<10} {'held':>8} {'held MiB':>9} {'evictions':>10} {'fill s':>7} "
          f"{'pack_items':>10} {'packed_items':>12} {'raw/packed':>10} {'pack_cpu_s':>10} "
          f"{'dicts':>5} {'dict_items':>10} {'train_s':>7}")
    for name, cmd in runs:
        port = free_port()
        root = ["-u", "root"] if os.geteuid() == 0 else []
        p, c = start(cmd + root + ["-p", str(port), "-U", "0", "-l", "127.0.0.1",
                                   "-m", str(a.m), "-t", str(a.threads)], port)
        try:
            t = time.time()
            fill(c, corpus, n, a.rate)
            fill_s = time.time() - t
            time.sleep(1.0)
            items, value_bytes = held(c, corpus, n)
            st = stats(c)
        finally:
            c.close()
            p.terminate()
            p.wait()
        raw, packed = int(st.get("packed_raw_bytes", 0)), int(st.get("packed_bytes", 0))
        print(f"{name:<10} {items:>8} {value_bytes / 2**20:>9.1f} {st.get('evictions', '?'):>10} "
              f"{fill_s:>7.1f} {st.get('pack_items', '-'):>10} {st.get('packed_items', '-'):>12} "
              f"{(raw / packed if packed else 0):>10.2f} "
              f"{int(st.get('pack_cpu_us', 0)) / 1e6:>10.2f} "
              f"{st.get('pack_dicts', '-'):>5} {st.get('packed_dict_items', '-'):>10} "
              f"{int(st.get('pack_dict_train_us', 0)) / 1e6:>7.2f}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
