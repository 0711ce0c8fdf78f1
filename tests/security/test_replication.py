"""Attacks on osmium's replication links (docs/SECURITY.md, "Replication
links"), each against the release binaries on loopback, each asserting the
attack fails:

- a fake target without the secret that relays the link to the connecting
  server's own listener (reflection) receives no item data, and the
  reflected handshakes are counted in `replica_auth_failures`;
- a fake target that relays to another ring member: the link comes up
  through it, but nothing it relays holds a key or a value in clear, and
  bytes it injects or flips kill the link, run nothing, store nothing;
- a recording of a real link's first messages, replayed, stores nothing
  and runs nothing;
- ordinary clients (no handshake), on a server without a secret (memcached
  1.6.45 too) and with one: every private command is `ERROR`, nothing
  changes;
- under -Z, an ordinary client certificate from `ssl_ca_cert` is no peer
  (`replica_follow` is `ERROR`, no data); one `replication_peers` names is;
- a weak secret is refused at start by osmium and osmium-proxy;
  `osmium --gen-secret` makes one both accept, mode 0600, never
  overwritten.

What a follow link this server pulled may run (a target holding the
secret that sends `replica_targets` or `shutdown` on it) needs a Noise
peer: it is attacked by the Rust test `a_follow_link_runs_only_what_a_feed_sends`
(crates/server/tests/server/replication_handshake.rs).
"""
import os
import socket
import stat as file_mode
import subprocess
import threading
import time

import pytest

from support import servers
from support.tls import Certs

PROXY_BIN = os.environ.get(
    "OSMIUM_PROXY_BIN", os.path.join(servers.ROOT, "target", "release", "osmium-proxy"))

DEADLINE = 10.0


def wait_for(what, ok, deadline=DEADLINE):
    end = time.time() + deadline
    while not ok():
        assert time.time() < end, f"timed out: {what}"
        time.sleep(0.02)


def secret_file(tmp_path, name="secret"):
    path = tmp_path / name
    path.write_bytes(os.urandom(32).hex().encode() + b"\n")
    path.chmod(0o600)
    return str(path)


class Conn:
    """A text-protocol client."""

    def __init__(self, port, ctx=None):
        s = socket.create_connection(("127.0.0.1", port), timeout=DEADLINE)
        self.s = ctx.wrap_socket(s, server_hostname="localhost") if ctx else s
        self.buf = b""

    def send(self, data):
        self.s.sendall(data)

    def line(self):
        while b"\r\n" not in self.buf:
            d = self.s.recv(65536)
            if not d:
                raise EOFError(self.buf)
            self.buf += d
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def call(self, data):
        self.send(data)
        return self.line()

    def stats(self, group=b""):
        self.send(b"stats" + (b" " + group if group else b"") + b"\r\n")
        out = {}
        while True:
            line = self.line()
            if line == b"END":
                return out
            _, name, value = (line.decode().split(" ", 2) + [""])[:3]
            out[name] = value

    def get(self, key):
        self.send(b"get " + key + b"\r\n")
        line = self.line()
        if line == b"END":
            return None
        n = int(line.split()[3])
        while len(self.buf) < n + 2:
            self.buf += self.s.recv(65536)
        value, self.buf = self.buf[:n], self.buf[n + 2:]
        assert self.line() == b"END"
        return value

    def close(self):
        self.s.close()


def stat(port, name, group=b""):
    c = Conn(port)
    try:
        return c.stats(group).get(name)
    finally:
        c.close()


def failures(port):
    return int(stat(port, "replica_auth_failures") or 0)


class Relay:
    """A fake replication target: a listener that relays each connection
    it accepts to `upstream` (a port, or a function of nothing that gives
    one), recording everything it receives both ways. `inject_down` and
    `inject_up` write bytes of its own into the live connections; `flip`
    flips one bit of the next chunk it forwards upstream."""

    def __init__(self, upstream):
        self.upstream = upstream
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.port = self.listener.getsockname()[1]
        self.lock = threading.Lock()
        self.received = bytearray()
        self.first_up = []  # each connection's bytes towards upstream
        self.pairs = []
        self.flip = False
        self.stopped = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.stopped:
            try:
                down, _ = self.listener.accept()
            except OSError:
                return
            try:
                up = socket.create_connection(("127.0.0.1", self.upstream), timeout=DEADLINE)
            except OSError:
                down.close()
                continue
            record = bytearray()
            with self.lock:
                self.pairs.append((down, up))
                self.first_up.append(record)
            threading.Thread(target=self._pipe, args=(down, up, record, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(up, down, None, False), daemon=True).start()

    def _pipe(self, src, dst, record, upward):
        src.settimeout(None)
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                data = b""
            if not data:
                break
            with self.lock:
                self.received += data
                if record is not None:
                    record += data
                if upward and self.flip and len(data) > 8:
                    self.flip = False
                    data = data[:-5] + bytes([data[-5] ^ 0x01]) + data[-4:]
            try:
                dst.sendall(data)
            except OSError:
                break
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def inject(self, data, upward):
        with self.lock:
            pairs = list(self.pairs)
        for down, up in pairs:
            try:
                (up if upward else down).sendall(data)
            except OSError:
                pass

    def links(self):
        """Connections relayed so far."""
        with self.lock:
            return len(self.pairs)

    def heard(self, needle):
        with self.lock:
            return bytes(needle) in self.received

    def close(self):
        self.stopped = True
        self.listener.close()
        with self.lock:
            for down, up in self.pairs:
                down.close()
                up.close()


def osmium(args):
    return servers.Server("osmium", args)


# Values stored on the servers under attack: none of their bytes may
# reach an attacker.
VALUES = {b"acct:%d" % i: b"SECRET-VALUE-%d-" % i + os.urandom(8).hex().encode()
          for i in range(20)}


def store_values(port):
    c = Conn(port)
    for k, v in VALUES.items():
        assert c.call(b"set %s 0 0 %d\r\n%s\r\n" % (k, len(v), v)) == b"STORED"
    c.close()


def test_a_fake_target_reflecting_to_the_servers_own_listener_gets_no_item_data(tmp_path):
    secret = secret_file(tmp_path)
    # The fake target's port is chosen before the server: it relays each
    # connection back to the server that opened it.
    holder = {}
    relay = Relay(0)
    try:
        with osmium(["--replication-secret", secret,
                     "--replicate-to", f"127.0.0.1:{relay.port}"]) as a:
            relay.upstream = a.port
            holder["a"] = a
            store_values(a.port)
            # Its target link and its catch-up pull each reach its own
            # listener: both refused there (its own instance id), and
            # counted.
            wait_for("reflected handshakes counted", lambda: failures(a.port) >= 4)
            store_values(a.port)
            time.sleep(0.5)
            st = Conn(a.port).stats()
            assert st["replica_0_link"] == "down"
            assert st["replication_catchup"] == "pulling"
            assert st["replica_follow_links"] == "0"
            for k, v in VALUES.items():
                assert not relay.heard(v), "a value reached the fake target"
                assert not relay.heard(k), "a key reached the fake target"
            assert relay.heard(b"replica_hello target ")
            assert relay.heard(b"replica_hello follow ")
            assert not relay.heard(b"replica_link")
            assert not relay.heard(b"REPLICA_HELLO"), "the listener answered a reflection"
    finally:
        relay.close()


def test_a_fake_target_relaying_to_a_ring_member_sees_no_plaintext_and_cannot_inject(tmp_path):
    secret = secret_file(tmp_path)
    with osmium(["--replication-secret", secret]) as b:
        relay = Relay(b.port)
        try:
            with osmium(["--replication-secret", secret,
                         "--replicate-to", f"127.0.0.1:{relay.port}"]) as a:
                store_values(a.port)
                # The link comes up through the relay: B gets every value.
                cb = Conn(b.port)
                wait_for("replicated through the relay",
                         lambda: all(cb.get(k) == v for k, v in VALUES.items()))
                for k, v in VALUES.items():
                    assert not relay.heard(k) and not relay.heard(v), "in clear on the path"
                assert not relay.heard(b"replica_link")
                assert not relay.heard(b"\r\nmn\r\n") and not relay.heard(b"replica_synced")
                before = failures(b.port)

                # Commands injected towards B as a frame (the framing is
                # public, the keys are not): the link dies there, nothing of
                # it runs.
                forged = (b"ms injected 8 T0 q\r\nINJECTED\r\n"
                          b"replica_targets 127.0.0.1:1\r\nmn\r\n")
                links_before = relay.links()
                relay.inject(len(forged).to_bytes(2, "big") + forged, upward=True)
                wait_for("B refused the injection", lambda: failures(b.port) > before)
                assert cb.get(b"injected") is None
                # A forged acknowledgement towards A: A's link dies too,
                # counted there. (A's link reads "up" until A notices the
                # old one died: the new one is a new relayed connection.)
                wait_for("A reconnected", lambda: relay.links() > links_before
                         and stat(a.port, "replica_0_link") == "up")
                a_before = failures(a.port)
                forged = b"MN\r\n" * 8
                relay.inject(len(forged).to_bytes(2, "big") + forged, upward=False)
                wait_for("A refused the injection", lambda: failures(a.port) > a_before)

                # A bit flipped in what A sends: B refuses that frame.
                wait_for("A reconnected", lambda: stat(a.port, "replica_0_link") == "up")
                before = failures(b.port)
                relay.flip = True
                ca = Conn(a.port)
                for i in range(50):
                    assert ca.call(b"set flip%d 0 0 3\r\nabc\r\n" % i) == b"STORED"
                    if not relay.flip:
                        break
                wait_for("B refused the flipped frame", lambda: failures(b.port) > before)
                assert cb.get(b"injected") is None
                st = cb.stats()
                assert "replica_0_addr" not in st, "B was given a target"
                # The ring goes on once the relay behaves: A reconnects.
                wait_for("A's link back up", lambda: stat(a.port, "replica_0_link") == "up")
                assert ca.call(b"set after 0 0 2\r\nok\r\n") == b"STORED"
                wait_for("after the attack", lambda: cb.get(b"after") == b"ok")
        finally:
            relay.close()


def test_a_replayed_recording_of_a_real_link_stores_nothing_and_runs_nothing(tmp_path):
    secret = secret_file(tmp_path)
    with osmium(["--replication-secret", secret]) as b:
        relay = Relay(b.port)
        try:
            with osmium(["--replication-secret", secret,
                         "--replicate-to", f"127.0.0.1:{relay.port}"]) as a:
                store_values(a.port)
                cb = Conn(b.port)
                wait_for("replicated", lambda: all(cb.get(k) == v for k, v in VALUES.items()))
            # A is gone. B forgets what the recording carried.
            for k in VALUES:
                assert cb.call(b"delete %s\r\n" % k) == b"DELETED"
            sets_before = int(cb.stats()["cmd_set"])
            fails_before = failures(b.port)
            recordings = [bytes(r) for r in relay.first_up if r.startswith(b"replica_hello")]
            assert recordings, "no link recorded"
            for rec in recordings:
                hello, rest = rec.split(b"\r\n", 1)
                r = Conn(b.port)
                # Message 1 is genuine: B answers it (a new answer) ...
                answer = r.call(hello + b"\r\n")
                assert answer.startswith(b"REPLICA_HELLO "), answer
                # ... but the recorded frames are under the old link's keys.
                r.send(rest)
                with pytest.raises((EOFError, ConnectionResetError)):
                    r.line()
                r.close()
            # And the whole recording at once, the hello with its frames.
            r = socket.create_connection(("127.0.0.1", b.port), timeout=DEADLINE)
            r.sendall(recordings[0])
            got = b""
            try:
                while True:
                    d = r.recv(65536)
                    if not d:
                        break
                    got += d
            except OSError:
                pass
            r.close()
            assert b"MN" not in got and b"HD" not in got
            wait_for("the replays counted",
                     lambda: failures(b.port) >= fails_before + len(recordings))
            st = cb.stats()
            assert int(st["cmd_set"]) == sets_before, "a replayed write ran"
            for k in VALUES:
                assert cb.get(k) is None, "a replayed write stored"
        finally:
            relay.close()


PRIVATE = [
    b"replica_follow 2\r\n",
    b"replica_link intruder\r\n",
    b"replica_targets 127.0.0.1:1\r\n",
    b"replica_synced\r\n",
    b"replica_hello\r\n",
    b"replica_hello target\r\n",
    b"replica_hello target zz\r\n",
    b"replica_hello leader " + b"00" * 64 + b"\r\n",
    b"replica_hello follow 0011\r\n",
]


def ordinary_client_is_refused(port, settings_before):
    c = Conn(port)
    assert c.call(b"set owned 0 0 5\r\nvalue\r\n") == b"STORED"
    for cmd in PRIVATE:
        assert c.call(cmd) == b"ERROR", cmd
    # Nothing was streamed, nothing changed: the next answer is the get's.
    assert c.get(b"owned") == b"value"
    assert c.stats(b"settings") == settings_before
    c.close()


def test_ordinary_clients_get_error_for_the_private_commands_without_a_secret(kind):
    with servers.Server(kind) as srv:
        before = Conn(srv.port).stats(b"settings")
        ordinary_client_is_refused(srv.port, before)
        st = Conn(srv.port).stats()
        assert not [k for k in st if k.startswith("replica")]


def test_ordinary_clients_get_error_for_the_private_commands_with_a_secret(tmp_path):
    secret = secret_file(tmp_path)
    with osmium(["--replication-secret", secret]) as b:
        with osmium(["--replication-secret", secret,
                     "--replicate-to", f"127.0.0.1:{b.port}"]) as a:
            wait_for("link up", lambda: stat(a.port, "replica_0_link") == "up")
            before = Conn(a.port).stats(b"settings")
            ordinary_client_is_refused(a.port, before)
            st = Conn(a.port).stats()
            assert st["replica_0_addr"] == f"127.0.0.1:{b.port}"
            assert st["replica_follow_links"] == "0"
            assert st["replica_auth_failures"] == "0"


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return Certs(tmp_path_factory.mktemp("replication-certs"))


def tls_conn(port, certs, cert):
    return Conn(port, certs.client_context(cert=cert))


def test_an_ordinary_client_certificate_is_no_replication_peer(certs):
    # -Z with client certificates verified against ssl_ca_cert: a
    # certificate alone is a client's, with or without replication_peers.
    for named in ([], ["replication_peers=replica-peer.test"]):
        args = certs.server_args("ssl_verify_mode=1", *named)
        with osmium(args) as srv:
            c = tls_conn(srv.port, certs, "client")
            assert c.call(b"set acct:1 0 0 12\r\nSECRET-VALUE\r\n") == b"STORED"
            assert c.call(b"replica_follow 2\r\n") == b"ERROR"
            assert c.call(b"replica_link x\r\n") == b"ERROR"
            c.send(b"mn\r\n")
            assert c.line() == b"MN", "data came after the refusal"
            assert b"SECRET-VALUE" not in c.buf
            c.close()
            p = tls_conn(srv.port, certs, "peer")
            answer = p.call(b"replica_follow 2\r\n")
            if not named:
                assert answer == b"ERROR", "a certificate no setting names made a peer"
                continue
            # Named by replication_peers: a peer, which gets the copy.
            assert answer == b"OK"
            copy = b""
            while b"replica_synced" not in copy:
                copy += p.line() + b"\n"
            assert b"SECRET-VALUE" in copy


def run(argv, timeout=10):
    if os.geteuid() == 0 and argv[0].endswith("/osmium") and "--gen-secret" not in argv:
        argv = argv + ["-u", "root"]
    return subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True,
                          timeout=timeout)


def proxy_check(tmp_path, secret_path):
    conf = tmp_path / f"proxy-{os.path.basename(secret_path)}.yml"
    conf.write_text(
        "ring:\n  listen: 127.0.0.1:%d\n  failover: replica\n"
        "  replication_secret: %s\n  servers:\n   - 127.0.0.1:1:1\n   - 127.0.0.1:2:1\n"
        % (servers.free_port(), secret_path))
    return run([PROXY_BIN, "-t", "-c", str(conf)])


def test_weak_secrets_are_refused_and_gen_secret_makes_a_good_one(tmp_path):
    if not os.path.exists(PROXY_BIN):
        pytest.skip(f"{PROXY_BIN} is not built")
    for weak in (b"winter2024\n", b"0123456789abcdef0123456789abcde\n",
                 b"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n", b"password1234\n"):
        path = tmp_path / "weak"
        path.write_bytes(weak)
        path.chmod(0o600)
        r = run([servers.OSMIUM_BIN, "-p", str(servers.free_port()), "-U", "0",
                 "--replication-secret", str(path)])
        err = r.stderr.decode()
        assert r.returncode == 64, err
        assert "at least 128 random bits" in err and "--gen-secret" in err, err
        r = proxy_check(tmp_path, str(path))
        err = r.stderr.decode() + r.stdout.decode()
        assert r.returncode != 0, err
        assert "at least 128 random bits" in err, err

    made = tmp_path / "made"
    r = run([servers.OSMIUM_BIN, "--gen-secret", str(made)])
    assert r.returncode == 0, r.stderr
    assert file_mode.S_IMODE(os.stat(made).st_mode) == 0o600
    text = made.read_bytes()
    assert len(text) == 65 and text.endswith(b"\n")
    int(text.strip(), 16)
    # Never overwritten.
    r = run([servers.OSMIUM_BIN, "--gen-secret", str(made)])
    assert r.returncode != 0 and b"never overwritten" in r.stderr
    assert made.read_bytes() == text
    # Accepted by both.
    with osmium(["--replication-secret", str(made)]) as srv:
        assert stat(srv.port, "replica_auth_failures") == "0"
    r = proxy_check(tmp_path, str(made))
    assert r.returncode == 0, r.stderr.decode() + r.stdout.decode()
