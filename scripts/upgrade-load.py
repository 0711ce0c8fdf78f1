"""A binary upgrade (SIGUSR2) under client traffic, as an operator would
accept it: starts BINARY (copied to a directory of its own) with `-m MB`,
fills about 3/4 of it with 4000-byte values (with --flash: twice -m, so
that about half of them are on flash), then runs CLIENTS connections of
90/10 GET/SET traffic (every other GET reads one of the client's own keys,
checked against the last value the server acknowledged for it; the others
read a filled key, checked against its value: with --flash about half of
those are served from flash) and a new connection every 50 ms (`version`
asked on each); after 1 s it replaces the binary (a new copy renamed over
it, a new inode) and sends SIGUSR2, runs 2 s more, stops the traffic and
reads every acknowledged write and every filled key back.

Prints: requests answered, connection errors (a reset, an early close,
a wrong answer, a 10 s timeout), connections refused, acknowledged
writes lost, misses of filled keys during the traffic and filled keys
lost at the end, the PID before and after and whether the new binary
runs, and the longest any request (or new connection's first answer)
waited, a client's reconnection included.

--flash: a flash tier (`-o ext_path=DIR/flash:4*MB m`, in the script's
directory under $TMPDIR) and twice -m of filled values.
-e: item memory in a memory file (in the script's directory).
FALLBACK=1: the upgrade is refused by the new image (OSMIUM_UPGRADE_REFUSE),
which hands everything back to the old one.
--memcached BIN: the same traffic against memcached's warm restart instead
(BIN with `-e /dev/shm/FILE`): SIGUSR1 (memcached saves its memory and
exits), then BIN started again with the same command line (at the next
whole second: memcached refuses a restart in the second of its stop); clients
reconnect on an error, as real clients do (counted), and connections made
while no server listens are refused (counted).

Usage: python3 scripts/upgrade-load.py BINARY MB [CLIENTS] [-e] [--flash]
       python3 scripts/upgrade-load.py --memcached BIN MB [CLIENTS]"""
import os, random, shutil, signal, socket, subprocess, sys, tempfile, threading, time

VALUE = 4000


def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p


def value_of(i):
    # Bytes that do not compress (a compressible value would be packed in
    # RAM and never reach flash).
    return b"%08d" % i + random.Random(i).randbytes(VALUE - 8)


class Conn:
    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def until(self, end, count=1):
        while self.buf.count(end) < count:
            chunk = self.s.recv(1 << 20)
            if not chunk: raise EOFError
            self.buf += chunk
        at = 0
        for _ in range(count):
            at = self.buf.index(end, at) + len(end)
        out, self.buf = self.buf[:at], self.buf[at:]
        return out

    def set(self, key, value):
        self.s.sendall(b"set %s 0 0 %d\r\n%s\r\n" % (key, len(value), value))
        return self.until(b"\r\n") == b"STORED\r\n"

    def get(self, key):
        self.s.sendall(b"get %s\r\n" % key)
        got = self.until(b"END\r\n")
        if got == b"END\r\n": return None
        head, rest = got.split(b"\r\n", 1)
        n = int(head.split()[-1])
        return rest[:n]


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.requests = self.errors = self.refused = self.connections = 0
        self.misses = self.reconnects = 0
        self.longest = 0.0

    def add(self, requests=0, errors=0, refused=0, connections=0, waited=0.0, misses=0,
            reconnects=0):
        with self.lock:
            self.requests += requests; self.errors += errors; self.refused += refused
            self.connections += connections; self.longest = max(self.longest, waited)
            self.misses += misses; self.reconnects += reconnects


def reconnect(port, stop, stats):
    """A new connection, tried every 10 ms until one is made (or stop)."""
    while not stop.is_set():
        try:
            conn = Conn(port)
            stats.add(reconnects=1)
            return conn
        except OSError:
            time.sleep(0.01)
    return None


def client(port, cid, stop, stats, written, filled):
    conn = Conn(port)
    rng = random.Random(cid)
    n = 0
    while not stop.is_set():
        n += 1
        key = b"load%d-%d" % (cid, n % 500)
        t = time.monotonic()
        try:
            if n % 10 == 0 or key not in written:
                value = b"v%d-%d" % (cid, n)
                ok = conn.set(key, value)
                if ok: written[key] = value
                miss = 0
            elif n % 2 == 0 and filled > 0:
                i = rng.randrange(filled)
                got = conn.get(b"k%08d" % i)
                miss = 1 if got is None else 0
                ok = got is None or got == value_of(i)
            else:
                ok = conn.get(key) == written[key]
                miss = 0
            stats.add(requests=1, errors=0 if ok else 1, waited=time.monotonic() - t,
                      misses=miss)
        except (OSError, EOFError, ValueError):
            # The write in flight may or may not have happened.
            written.pop(key, None)
            conn = reconnect(port, stop, stats)
            stats.add(errors=1, waited=time.monotonic() - t)
            if conn is None: return


def connector(port, stop, stats):
    while not stop.is_set():
        t = time.monotonic()
        try:
            c = Conn(port)
            c.s.sendall(b"version\r\n")
            ok = c.until(b"\r\n").startswith(b"VERSION ")
            c.s.close()
            stats.add(connections=1, errors=0 if ok else 1, waited=time.monotonic() - t)
        except ConnectionRefusedError:
            stats.add(refused=1)
        except (OSError, EOFError):
            stats.add(errors=1, waited=time.monotonic() - t)
        time.sleep(0.05)


def connect_within(port, seconds):
    deadline = time.time() + seconds
    while True:
        try:
            return Conn(port)
        except OSError:
            if time.time() > deadline: raise
            time.sleep(0.01)


def fill(port, keys):
    c = connect_within(port, 60)
    for first in range(0, keys, 100):
        batch = range(first, min(first + 100, keys))
        c.s.sendall(b"".join(b"set k%08d 0 0 %d\r\n%s\r\n" % (i, VALUE, value_of(i)) for i in batch))
        c.until(b"STORED\r\n", len(batch))
    c.s.close()


def refusing_script(binary, tmp, name):
    """A script in TMP that runs a copy of BINARY: its check as it is, its
    real run with OSMIUM_UPGRADE_REFUSE=1 (the state refused, handed back
    to the old image). Its path, for renaming over the running file."""
    real = os.path.join(tmp, name + ".real"); shutil.copy2(binary, real)
    script = os.path.join(tmp, name + ".script")
    with open(script, "w") as f:
        f.write(f'#!/bin/sh\ncase "$1" in --upgrade-check) exec {real} "$@";; esac\n'
                f'OSMIUM_UPGRADE_REFUSE=1 exec {real} "$@"\n')
    os.chmod(script, 0o755)
    return script


def wait_for_line(log_path, needle, since):
    """Waits until the log at LOG_PATH holds NEEDLE (the upgrade's end),
    at most 60 s after SINCE."""
    while needle not in open(log_path, "rb").read().decode(errors="replace"):
        if time.time() - since > 60: raise TimeoutError("no upgrade")
        time.sleep(0.01)


def stat_of(port, names):
    c = Conn(port)
    c.s.sendall(b"stats\r\n")
    text = c.until(b"END\r\n").decode()
    c.s.close()
    out = {}
    for line in text.splitlines():
        f = line.split()
        if len(f) == 3 and f[1] in names: out[f[1]] = f[2]
    return out


def run_traffic(port, clients, keys):
    stop, stats = threading.Event(), Stats()
    written = [dict() for _ in range(clients)]
    threads = [threading.Thread(target=client, args=(port, i, stop, stats, written[i], keys))
               for i in range(clients)]
    threads.append(threading.Thread(target=connector, args=(port, stop, stats)))
    for t in threads: t.start()
    return stop, stats, written, threads


def check_after(port, written, keys):
    c = Conn(port)
    lost = sum(1 for w in written for k, v in w.items() if c.get(k) != v)
    filled_lost = sum(1 for i in range(keys) if c.get(b"k%08d" % i) != value_of(i))
    c.s.close()
    return lost, filled_lost


def memcached_main(binary, mb, clients):
    keys = mb * (1 << 20) * 3 // 4 // (VALUE + 100)
    port = free_port()
    memfile = f"/dev/shm/memcached-upgrade-load-{os.getpid()}.mem"
    root = ["-u", "root"] if os.geteuid() == 0 else []
    cmd = [binary, *root, "-l", "127.0.0.1", "-p", str(port), "-U", "0", "-t", "4",
           "-m", str(mb), "-e", memfile]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        fill(port, keys)
        stop, stats, written, threads = run_traffic(port, clients, keys)
        time.sleep(1)
        before, misses_before = stats.requests, stats.misses
        evicted = stat_of(port, ["evictions"]).get("evictions")
        pid = p.pid
        t_sig = time.time()
        p.send_signal(signal.SIGUSR1)
        p.wait(60)
        t_exit = time.time()
        # memcached refuses a restart in the second of its stop ("restart
        # incompatible due to setting for [stop_time]": it starts with a
        # clean cache): it is started again at the next whole second.
        time.sleep(int(t_exit) + 1.01 - t_exit)
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        connect_within(port, 60).s.close()
        t_up = time.time()
        time.sleep(2)
        stop.set()
        for t in threads: t.join()
        lost, filled_lost = check_after(port, written, keys)
        items = stat_of(port, ["curr_items"]).get("curr_items")
        print(f"memcached -e (warm restart) {mb} MB ({keys} keys of {VALUE} B), {clients} clients: "
              f"{stats.requests} requests ({stats.requests - before} from the signal on), "
              f"{stats.errors} errors, {stats.reconnects} reconnects, {stats.refused} refused, "
              f"{stats.connections} new connections, {lost} acknowledged writes lost, "
              f"{stats.misses} misses of filled keys ({misses_before} before the signal; "
              f"{evicted} evictions before it), {filled_lost} filled keys lost "
              f"({items} items after); pid {pid} -> {p.pid}; SIGUSR1 -> exited "
              f"{t_exit - t_sig:.3f} s, serving again {t_up - t_sig:.3f} s; "
              f"longest wait {stats.longest * 1000:.0f} ms")
    finally:
        p.send_signal(signal.SIGTERM); p.wait()
        try: os.unlink(memfile)
        except OSError: pass


def main():
    argv = sys.argv[1:]
    if argv and argv[0] == "--memcached":
        args = argv[1:]
        return memcached_main(args[0], int(args[1]), int(args[2]) if len(args) > 2 else 16)
    args = [a for a in argv if a not in ("-e", "--flash")]
    memfile = "-e" in argv
    flash = "--flash" in argv
    binary, mb = args[0], int(args[1])
    clients = int(args[2]) if len(args) > 2 else 16
    fallback = bool(os.environ.get("FALLBACK"))
    share = 2 if flash else 3 / 4
    keys = int(mb * (1 << 20) * share) // (VALUE + 100)
    tmp = tempfile.mkdtemp(prefix="osmium-upgrade-load.")
    exe = os.path.join(tmp, "osmium")
    shutil.copy2(binary, exe)
    log_path = os.path.join(tmp, "log")
    port = free_port()
    log = open(log_path, "wb")
    root = ["-u", "root"] if os.geteuid() == 0 else []
    extra = ["-e", os.path.join(tmp, "cache.mem")] if memfile else []
    if flash:
        extra += ["-o", f"ext_path={os.path.join(tmp, 'flash')}:{4 * mb}m"]
    p = subprocess.Popen([exe, *root, "-l", "127.0.0.1", "-p", str(port), "-U", "0", "-t", "4",
                          "-m", str(mb), *extra], stdout=log, stderr=log)
    try:
        t_fill = time.time()
        fill(port, keys)
        t_fill = time.time() - t_fill
        on_flash = stat_of(port, ["extstore_objects_used"]).get("extstore_objects_used", "0")
        # SIGUSR2 runs the file at the path the server started from: a new
        # copy renamed over it (a new inode), or with FALLBACK a script
        # there whose real run refuses the state.
        if fallback:
            script = refusing_script(binary, tmp, "osmium")
        else:
            script = os.path.join(tmp, "osmium.new")
            shutil.copy2(binary, script)
        pid = p.pid
        old_inode = os.stat(f"/proc/{pid}/exe").st_ino
        stop, stats, written, threads = run_traffic(port, clients, keys)
        time.sleep(1)
        os.rename(script, exe)
        new_inode = os.stat(exe).st_ino
        before, misses_before = stats.requests, stats.misses
        t_sig = time.time()
        os.kill(pid, signal.SIGUSR2)
        needle = "upgrade failed" if fallback else "upgrade done:"
        wait_for_line(log_path, needle, t_sig)
        t_done = time.time()
        time.sleep(2)
        stop.set()
        for t in threads: t.join()
        lost, filled_lost = check_after(port, written, keys)
        running = os.stat(f"/proc/{pid}/exe").st_ino if p.poll() is None else None
        runs = {old_inode: "old", new_inode: "new"}.get(running, "?") if running else "gone"
        text = open(log_path, "rb").read().decode(errors="replace")
        carried = [l for l in text.splitlines() if "carried over" in l or "threads stopped" in l
                   or "items back" in l or "flash reads" in l or "closed" in l]
        print(f"{'-e ' if memfile else ''}{'--flash ' if flash else ''}{mb} MB ({keys} keys of "
              f"{VALUE} B{f', {on_flash} on flash' if flash else ''}, filled in {t_fill:.1f} s), "
              f"{clients} clients{' (refused upgrade)' if fallback else ''}: {stats.requests} "
              f"requests ({stats.requests - before} from the signal on), {stats.errors} errors, "
              f"{stats.reconnects} reconnects, {stats.refused} refused, "
              f"{stats.connections} new connections, {lost} acknowledged writes lost, "
              f"{stats.misses} misses of filled keys ({misses_before} before the signal), "
              f"{filled_lost} filled keys lost; pid {pid} -> "
              f"{'same' if p.poll() is None else 'gone'}, {runs} binary running; "
              f"SIGUSR2 -> done {t_done - t_sig:.3f} s; longest wait {stats.longest * 1000:.0f} ms")
        for l in carried: print("  " + l)
    finally:
        p.send_signal(signal.SIGTERM); p.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
