#!/usr/bin/env python3
"""Where a replicated write's CPU goes, thread by thread: a writer
(`--replicate-to`, `--replication MODE`) and its replica of each build
given, 1 KiB SETs from `osmium-bench load` (8 connections, depth 16 by
default), and over a window of the load each server thread's CPU time
(`/proc/PID/task/TID/schedstat`, nanoseconds) and, with `--perf`, its
syscalls and context switches (`perf stat` on the syscall tracepoints),
per replicated write (the writer's `cmd_set`). The builds are run in
turn, the order reversed every other round; per thread the median.

    python3 scripts/replication-threads.py [--perf] [--rounds 3] [--mode sync] \
        [--depth 16] [--value-size 1024] OSMIUM_A [OSMIUM_B ...]

Needs `perf` for `--perf`; binds free loopback ports; stops its servers
by PID.
"""
import argparse, os, re, secrets, socket, subprocess, sys, tempfile, time
from collections import defaultdict
from statistics import median

SYSCALLS = ["sendto", "recvfrom", "write", "read", "epoll_wait", "futex"]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def stats(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(b"stats\r\n")
    buf = b""
    while not buf.endswith(b"END\r\n"):
        chunk = s.recv(65536)
        if not chunk:
            break
        buf += chunk
    s.close()
    return {l.split()[1]: l.split()[2] for l in buf.decode().splitlines() if l.startswith("STAT")}


def wait_for(cond, what, timeout=10.0):
    end = time.time() + timeout
    while time.time() < end:
        try:
            if cond():
                return
        except OSError:
            pass
        time.sleep(0.05)
    sys.exit(f"timed out waiting for {what}")


def threads(pid):
    """{tid: (name, cpu ns)} of a process."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                name = f.read().strip()
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                ns = int(f.read().split()[0])
        except OSError:
            continue
        out[tid] = (name, ns)
    return out


def role(name):
    # osmium-worker-0 and -1 alike; the sender is osmium-repl-N.
    return re.sub(r"-\d+$", "-N", name)


def perf_counts(text, names):
    """perf stat -x, --per-thread output: {(thread role, event): count}."""
    got = defaultdict(float)
    for line in text.splitlines():
        f = line.split(",")
        if len(f) < 4 or not f[1].replace(".", "").isdigit():
            continue
        comm_tid, value, event = f[0], float(f[1]), f[3]
        tid = comm_tid.rsplit("-", 1)[-1]
        name = names.get(tid, comm_tid.rsplit("-", 1)[0])
        event = event.replace("syscalls:sys_enter_", "")
        got[(role(name), event)] += value
    return got


def one_run(a, binary, secret):
    rp, wp = free_port(), free_port()
    common = ["-U", "0", "-l", "127.0.0.1", "-m", "256", "-t", "2", "-u", "root",
              "--replication-secret", secret]
    replica = subprocess.Popen([binary, "-p", str(rp)] + common, stderr=subprocess.DEVNULL)
    writer = None
    load = None
    try:
        wait_for(lambda: stats(rp), "the replica")
        writer = subprocess.Popen(
            [binary, "-p", str(wp)] + common
            + ["--replicate-to", f"127.0.0.1:{rp}", "--replication", a.mode],
            stderr=subprocess.DEVNULL)
        wait_for(lambda: stats(wp).get("replica_0_link") == "up", "the link")
        load = subprocess.Popen(
            [a.bench, "load", "--addr", f"127.0.0.1:{wp}", "--yes", "--conns", "8",
             "--depth", str(a.depth), "--get-ratio", "0", "--value-size", str(a.value_size),
             "--keys", "100000", "--preload", "false", "--warmup", "0",
             "--duration", str(a.seconds + 3)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.5)
        sets0 = int(stats(wp)["cmd_set"])
        t0 = {"writer": threads(writer.pid), "replica": threads(replica.pid)}
        perf = []
        if a.perf:
            events = ",".join([f"syscalls:sys_enter_{s}" for s in SYSCALLS] + ["context-switches"])
            for pid in (writer.pid, replica.pid):
                perf.append(subprocess.Popen(
                    ["perf", "stat", "-x", ",", "--per-thread", "-e", events, "-p", str(pid),
                     "--", "sleep", str(a.seconds)],
                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
            outs = [p.communicate()[1] for p in perf]
        else:
            time.sleep(a.seconds)
        t1 = {"writer": threads(writer.pid), "replica": threads(replica.pid)}
        sets = int(stats(wp)["cmd_set"]) - sets0
        load.wait(timeout=30)
        per = defaultdict(float)
        for side in ("writer", "replica"):
            for tid, (name, ns) in t1[side].items():
                before = t0[side].get(tid, (name, 0))[1]
                per[(side, role(name), "cpu us")] += (ns - before) / 1000
        if a.perf:
            for side, text, pid in zip(("writer", "replica"), outs, (writer.pid, replica.pid)):
                names = {tid: n for tid, (n, _) in t1[side].items()}
                for (r, ev), v in perf_counts(text, names).items():
                    per[(side, r, ev)] += v
        return sets / a.seconds, {k: v / max(sets, 1) for k, v in per.items()}
    finally:
        for p in (load, writer, replica):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("builds", nargs="+")
    ap.add_argument("--bench", default="target/release/osmium-bench")
    ap.add_argument("--mode", default="sync")
    ap.add_argument("--depth", type=int, default=16)
    ap.add_argument("--value-size", type=int, default=1024)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--perf", action="store_true")
    a = ap.parse_args()
    d = tempfile.mkdtemp()
    secret = os.path.join(d, "secret")
    fd = os.open(secret, os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, (secrets.token_hex(32) + "\n").encode())
    os.close(fd)
    rates = defaultdict(list)
    figures = defaultdict(lambda: defaultdict(list))
    for r in range(a.rounds):
        order = list(range(len(a.builds)))
        if r % 2:
            order.reverse()
        for i in order:
            load1 = os.getloadavg()[0]
            rate, per = one_run(a, a.builds[i], secret)
            print(f"round {r + 1} build {i}: {rate:,.0f} SETs/s, load average {load1:.2f}",
                  file=sys.stderr)
            rates[i].append(rate)
            for k, v in per.items():
                figures[k][i].append(v)
    print(f"{a.mode}, depth {a.depth}, {a.value_size} B values, {a.seconds} s windows, "
          f"medians of {a.rounds} rounds; per replicated write")
    head = "".join(f"{'build ' + str(i):>12}" for i in range(len(a.builds)))
    ratio = "".join(f"{str(i) + '/0':>8}" for i in range(1, len(a.builds)))
    print(f"{'SETs/s':<40}" + "".join(f"{median(rates[i]):>12,.0f}" for i in range(len(a.builds)))
          + "".join(f"{median(rates[i]) / median(rates[0]):>8.3f}" for i in range(1, len(a.builds))))
    print(f"{'side thread figure':<40}{head}{ratio}")
    totals = defaultdict(lambda: defaultdict(float))
    for key in sorted(figures):
        side, r, ev = key
        meds = [median(figures[key][i]) if figures[key][i] else 0.0 for i in range(len(a.builds))]
        if ev == "cpu us":
            for i, m in enumerate(meds):
                totals[side][i] += m
                totals["both"][i] += m
        if max(meds) < (0.005 if ev == "cpu us" else 0.002):
            continue
        print(f"{side + ' ' + r + ' ' + ev:<40}" + "".join(f"{m:>12.3f}" for m in meds)
              + "".join(f"{(m / meds[0] if meds[0] else float('nan')):>8.3f}" for m in meds[1:]))
    for side in ("writer", "replica", "both"):
        t = totals[side]
        print(f"{side + ' cpu us (sum of medians)':<40}"
              + "".join(f"{t[i]:>12.3f}" for i in range(len(a.builds)))
              + "".join(f"{t[i] / t[0]:>8.3f}" for i in range(1, len(a.builds))))


if __name__ == "__main__":
    main()
