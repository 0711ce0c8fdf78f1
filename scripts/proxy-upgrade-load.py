"""osmium-proxy's binary upgrade (SIGUSR2) under client traffic: starts
two osmium backends (OSMIUM, `-m 64`) and PROXY (copied to a directory of
its own, so that SIGUSR2 runs the same file) with one ketama pool over
them, then runs CLIENTS connections of 90/10 GET/SET traffic through the
proxy (each GET checked against the last value acknowledged for that
key; each client writes keys of its own) and a new connection every
50 ms (`version` asked on each), sends SIGUSR2 after 1 s, runs 2 s more,
stops the traffic and reads every acknowledged write back.

The clients, the connector and the counters are scripts/upgrade-load.py's
(imported, not copied).

Prints: requests answered, errors (a reset, an early close, a wrong
answer, a 10 s timeout), connections refused, acknowledged writes lost,
the PID before and after, SIGUSR2 to the `upgrade done:` line, and the
longest any request (or new connection's first answer) waited; then the
proxy's `upgrade` log lines.
FALLBACK=1: the upgrade is refused by the new image (OSMIUM_UPGRADE_REFUSE),
which hands everything back to the old one. BASELINE=1: no SIGUSR2 (the
same traffic for 3 s, for the longest wait without an upgrade).
Usage: python3 scripts/proxy-upgrade-load.py PROXY OSMIUM [CLIENTS]"""
import importlib.util, os, shutil, signal, subprocess, sys, tempfile, threading, time

_spec = importlib.util.spec_from_file_location(
    "upgrade_load", os.path.join(os.path.dirname(os.path.abspath(__file__)), "upgrade-load.py"))
load = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(load)


def wait_listening(port, what):
    deadline = time.time() + 30
    while True:
        try:
            c = load.Conn(port); c.s.close(); return
        except OSError:
            if time.time() > deadline: raise TimeoutError(f"{what} does not listen on {port}")
            time.sleep(0.01)


def main():
    proxy, osmium = sys.argv[1], sys.argv[2]
    clients = int(sys.argv[3]) if len(sys.argv) > 3 else 8
    fallback = bool(os.environ.get("FALLBACK"))
    baseline = bool(os.environ.get("BASELINE"))
    tmp = tempfile.mkdtemp(prefix="osmium-proxy-upgrade-load.")
    exe = os.path.join(tmp, "osmium-proxy")
    shutil.copy2(proxy, exe)
    root = ["-u", "root"] if os.geteuid() == 0 else []
    procs = []
    try:
        backends = []
        for i in range(2):
            port = load.free_port()
            out = open(os.path.join(tmp, f"backend{i}.log"), "wb")
            procs.append(subprocess.Popen([osmium, *root, "-l", "127.0.0.1", "-p", str(port),
                                           "-U", "0", "-t", "2", "-m", "64"],
                                          stdout=out, stderr=out))
            backends.append(port)
        for port in backends: wait_listening(port, "a backend")
        port, stats_port = load.free_port(), load.free_port()
        conf = os.path.join(tmp, "pool.yml")
        with open(conf, "w") as f:
            f.write(f"p:\n  listen: 127.0.0.1:{port}\n  hash: fnv1a_64\n  distribution: ketama\n"
                    f"  timeout: 1000\n  servers:\n")
            for b in backends: f.write(f"   - 127.0.0.1:{b}:1\n")
        log_path = os.path.join(tmp, "proxy.log")
        log = open(log_path, "wb")
        p = subprocess.Popen([exe, "-c", conf, "-s", str(stats_port), "-a", "127.0.0.1"],
                             stdout=log, stderr=log)
        procs.append(p)
        wait_listening(port, "the proxy")
        if fallback:
            # SIGUSR2 runs the file at the path the proxy started from: a
            # script there whose real run refuses the state.
            os.rename(load.refusing_script(proxy, tmp, "osmium-proxy"), exe)
        else:
            # A new inode at the path, as a package manager installs one.
            shutil.copy2(proxy, exe + ".new"); os.rename(exe + ".new", exe)
        pid = p.pid
        stop, stats = threading.Event(), load.Stats()
        written = [dict() for _ in range(clients)]
        threads = [threading.Thread(target=load.client, args=(port, i, stop, stats, written[i], 0))
                   for i in range(clients)]
        threads.append(threading.Thread(target=load.connector, args=(port, stop, stats)))
        for t in threads: t.start()
        time.sleep(1)
        before = stats.requests
        t_sig = time.time()
        if not baseline: os.kill(pid, signal.SIGUSR2)
        needle = "serving with osmium-proxy" if fallback else "upgrade done:"
        if not baseline: load.wait_for_line(log_path, needle, t_sig)
        t_done = time.time()
        time.sleep(2)
        stop.set()
        for t in threads: t.join()
        c = load.Conn(port)
        lost = sum(1 for w in written for k, v in w.items() if c.get(k) != v)
        text = open(log_path, "rb").read().decode(errors="replace")
        lines = [l for l in text.splitlines() if "upgrade" in l]
        print(f"{clients} clients through osmium-proxy to 2 osmium backends"
              f"{' (refused upgrade)' if fallback else ''}{' (no upgrade)' if baseline else ''}: "
              f"{stats.requests} requests "
              f"({stats.requests - before} from the signal on), {stats.errors} errors, "
              f"{stats.refused} refused, {stats.connections} new connections, "
              f"{lost} acknowledged writes lost; pid {pid} -> "
              f"{'same' if p.poll() is None else 'gone'}; SIGUSR2 -> done {t_done - t_sig:.3f} s; "
              f"longest wait {stats.longest * 1000:.0f} ms")
        for l in lines: print("  " + l)
    finally:
        for q in procs:
            q.send_signal(signal.SIGTERM); q.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
