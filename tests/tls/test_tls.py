"""TLS as memcached 1.6.45 does it, checked against memcached and osmium
with the same assertions (see README.md)."""
import os
import signal
import socket
import ssl
import struct
import subprocess
import time

import pytest

from support import servers


def connect(port, ctx, timeout=5):
    raw = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    return ctx.wrap_socket(raw, server_hostname="localhost")


def ask(sock, data, end=b"\r\n"):
    sock.sendall(data)
    buf = b""
    while not buf.endswith(end):
        chunk = sock.recv(1 << 16)
        if not chunk:
            break
        buf += chunk
    return buf


def stats(sock, sub=b""):
    reply = ask(sock, b"stats " + sub + b"\r\n" if sub else b"stats\r\n", b"END\r\n")
    out = {}
    for line in reply.split(b"\r\n"):
        parts = line.split(b" ", 2)
        if len(parts) == 3 and parts[0] == b"STAT":
            out[parts[1].decode()] = parts[2].decode()
    return out


def tls_errors(port, certs):
    with connect(port, certs.client_context()) as s:
        st = stats(s)
    return int(st["ssl_handshake_errors"]) + int(st["ssl_proto_errors"])


@pytest.fixture
def server(kind, certs):
    with servers.Server(kind, certs.server_args()) as s:
        yield s


@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3])
def test_text_meta_and_binary_requests_over_tls(server, certs, version):
    with connect(server.port, certs.client_context(version=version)) as s:
        assert s.version() == {ssl.TLSVersion.TLSv1_2: "TLSv1.2",
                               ssl.TLSVersion.TLSv1_3: "TLSv1.3"}[version]
        assert ask(s, b"set k 5 0 3\r\nabc\r\n") == b"STORED\r\n"
        assert ask(s, b"get k\r\n", b"END\r\n") == b"VALUE k 5 3\r\nabc\r\nEND\r\n"
        assert ask(s, b"mg k v f\r\n", b"abc\r\n") == b"VA 3 f5\r\nabc\r\n"
    # A binary GET of the same key (a new connection: the first byte picks
    # the protocol).
    with connect(server.port, certs.client_context(version=version)) as s:
        key = b"k"
        header = struct.pack(">BBHBBHIIQ", 0x80, 0x00, len(key), 0, 0, 0, len(key), 7, 0)
        s.sendall(header + key)
        resp = b""
        while len(resp) < 24 or len(resp) < 24 + struct.unpack(">I", resp[8:12])[0]:
            resp += s.recv(4096)
        magic, opcode, _, extlen, _, status, bodylen, opaque = struct.unpack(">BBHBBHII", resp[:16])
        assert (magic, opcode, status, opaque) == (0x81, 0x00, 0, 7)
        assert resp[24 + extlen:24 + bodylen] == b"abc"


def test_large_values_and_pipelines_over_tls(server, certs):
    with connect(server.port, certs.client_context()) as s:
        big = os.urandom(1000 * 1000)
        assert ask(s, b"set big 0 0 %d\r\n" % len(big) + big + b"\r\n") == b"STORED\r\n"
        reply = ask(s, b"get big big\r\n", b"END\r\n")
        one = b"VALUE big 0 %d\r\n" % len(big) + big + b"\r\n"
        assert reply == one + one + b"END\r\n"
        many = b"".join(b"set p%d 0 0 2\r\nv%d\r\n" % (i, i % 10) for i in range(500))
        assert ask(s, many, b"STORED\r\n" * 500) == b"STORED\r\n" * 500


@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3])
def test_sessions_resume_with_tickets(server, certs, version):
    ctx = certs.client_context(version=version)
    with connect(server.port, ctx) as s:
        assert ask(s, b"version\r\n").startswith(b"VERSION ")
        session = s.session
    raw = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    with ctx.wrap_socket(raw, server_hostname="localhost", session=session) as s2:
        assert ask(s2, b"version\r\n").startswith(b"VERSION ")
        assert s2.session_reused


def test_tls12_session_ids_resume_with_the_session_cache(kind, certs):
    args = certs.server_args("ssl_session_cache")
    with servers.Server(kind, args) as srv:
        ctx = certs.client_context(version=ssl.TLSVersion.TLSv1_2, tickets=False)
        with connect(srv.port, ctx) as s:
            assert ask(s, b"version\r\n").startswith(b"VERSION ")
            session = s.session
            before = int(stats(s)["ssl_new_sessions"])
            # A session ends with close_notify to stay resumable (OpenSSL
            # drops one whose connection ended without it).
            s.unwrap()
        raw = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
        with ctx.wrap_socket(raw, server_hostname="localhost", session=session) as s2:
            assert ask(s2, b"version\r\n").startswith(b"VERSION ")
            assert s2.session_reused
            assert int(stats(s2)["ssl_new_sessions"]) == before, "a resumed session is not new"


def test_a_plaintext_client_on_a_tls_port_is_refused_and_counted(server, certs):
    before = tls_errors(server.port, certs)
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as p:
        p.sendall(b"set x 0 0 1\r\nx\r\nversion\r\n")
        got = b""
        try:
            while True:
                chunk = p.recv(4096)
                if not chunk:
                    break
                got += chunk
        except (ConnectionResetError, socket.timeout):
            pass
        assert b"STORED" not in got and b"VERSION" not in got
    assert tls_errors(server.port, certs) > before
    with connect(server.port, certs.client_context()) as s:
        assert ask(s, b"get x\r\n", b"END\r\n") == b"END\r\n", "nothing the plaintext client sent ran"


def _handshake_refused(port, ctx):
    """Whether the server refuses this client: the handshake or the first
    reply fails (TLS 1.3 sends a client certificate after the client's
    handshake is done)."""
    try:
        with connect(port, ctx) as s:
            return not ask(s, b"version\r\n").startswith(b"VERSION ")
    except (ssl.SSLError, ConnectionResetError, BrokenPipeError, socket.timeout):
        return True


def test_mtls_listener_requires_a_client_certificate(kind, certs):
    port2 = servers.free_port()
    args = certs.server_args() + ["-l", f"mtls:127.0.0.1:{port2}"]
    with servers.Server(kind, args) as srv:
        before = tls_errors(srv.port, certs)
        assert _handshake_refused(port2, certs.client_context())
        assert _handshake_refused(port2, certs.client_context(cert="rogue"))
        with connect(port2, certs.client_context(cert="client")) as s:
            assert ask(s, b"version\r\n").startswith(b"VERSION ")
        assert tls_errors(srv.port, certs) >= before + 2
        # The default listener (verify mode 0) still takes clients without one.
        with connect(srv.port, certs.client_context()) as s:
            assert ask(s, b"version\r\n").startswith(b"VERSION ")


@pytest.mark.parametrize("mode,without,rogue", [("1", True, False), ("2", False, False),
                                                 ("3", False, False)])
def test_verify_modes(kind, certs, mode, without, rogue):
    with servers.Server(kind, certs.server_args(f"ssl_verify_mode={mode}")) as srv:
        assert (not _handshake_refused(srv.port, certs.client_context())) == without
        assert (not _handshake_refused(srv.port, certs.client_context(cert="rogue"))) == rogue
        assert not _handshake_refused(srv.port, certs.client_context(cert="client"))


def test_notls_and_btls_listeners(kind, certs):
    plain, basic = servers.free_port(), servers.free_port()
    args = certs.server_args("ssl_verify_mode=2") + [
        "-l", f"notls:127.0.0.1:{plain}", "-l", f"btls:127.0.0.1:{basic}"]
    with servers.Server(kind, args) as srv:
        with socket.create_connection(("127.0.0.1", plain), timeout=5) as p:
            assert ask(p, b"version\r\n").startswith(b"VERSION ")
        # btls: no client certificate asked for, whatever the verify mode.
        with connect(basic, certs.client_context()) as s:
            assert ask(s, b"version\r\n").startswith(b"VERSION ")
        assert _handshake_refused(srv.port, certs.client_context())


def _peer_cert(port, certs):
    with connect(port, certs.client_context()) as s:
        return s.getpeercert(binary_form=True)


def _swap_files(certs, chain, key, into):
    for src, dst in ((chain, "live.pem"), (key, "live.key")):
        with open(certs.path(src), "rb") as f:
            data = f.read()
        with open(os.path.join(into, dst), "wb") as f:
            f.write(data)


def test_refresh_certs_and_sighup_reload(kind, certs, tmp_path):
    _swap_files(certs, "server.pem", "server.key", tmp_path)
    live = str(tmp_path / "live.pem")
    args = ["-Z", "-o", f"ssl_chain_cert={live},ssl_key={tmp_path / 'live.key'}"]
    first = open(certs.path("server.pem")).read()
    with servers.Server(kind, args) as srv:
        old = connect(srv.port, certs.client_context())
        assert ask(old, b"set k 0 0 1\r\nA\r\n") == b"STORED\r\n"
        cert1 = _peer_cert(srv.port, certs)
        _swap_files(certs, "server2.pem", "server2.key", tmp_path)
        with connect(srv.port, certs.client_context()) as s:
            assert ask(s, b"refresh_certs\r\n") == b"OK\r\n"
            assert stats(s)["time_since_server_cert_refresh"] in ("0", "1")
        cert2 = _peer_cert(srv.port, certs)
        assert cert2 != cert1
        # The connection made before keeps working.
        assert ask(old, b"get k\r\n", b"END\r\n") == b"VALUE k 0 1\r\nA\r\nEND\r\n"
        # A certificate that does not load: memcached's error line.
        with open(live, "w") as f:
            f.write("not a certificate\n")
        with connect(srv.port, certs.client_context()) as s:
            reply = ask(s, b"refresh_certs\r\n")
        assert reply.startswith(b"Error loading the certificate chain: " + live.encode() + b" : ")
        assert reply.endswith(b"\r\n")
        # SIGHUP loads the first certificate again.
        with open(live, "w") as f:
            f.write(first)
        _swap_files(certs, "server.pem", "server.key", tmp_path)
        os.kill(srv.pid, signal.SIGHUP)
        deadline = time.time() + 5
        while _peer_cert(srv.port, certs) != cert1 and time.time() < deadline:
            time.sleep(0.05)
        assert _peer_cert(srv.port, certs) == cert1
        assert ask(old, b"get k\r\n", b"END\r\n") == b"VALUE k 0 1\r\nA\r\nEND\r\n"
        old.close()


def test_a_bad_certificate_leaves_the_old_one_serving(certs, tmp_path):
    # osmium's reload is atomic: a new chain with a key that does not match
    # is refused whole, and new connections still get the old certificate.
    _swap_files(certs, "server.pem", "server.key", tmp_path)
    args = ["-Z", "-o", f"ssl_chain_cert={tmp_path / 'live.pem'},ssl_key={tmp_path / 'live.key'}"]
    with servers.Server("osmium", args) as srv:
        cert1 = _peer_cert(srv.port, certs)
        with open(certs.path("server2.pem"), "rb") as f:
            (tmp_path / "live.pem").write_bytes(f.read())
        with connect(srv.port, certs.client_context()) as s:
            reply = ask(s, b"refresh_certs\r\n")
            assert reply.startswith(b"Error validating the certificate"), reply
        assert _peer_cert(srv.port, certs) == cert1


def test_stats_settings_rows(kind, certs):
    args = certs.server_args("ssl_verify_mode=1", "ssl_wbuf_size=32", "ssl_session_cache",
                             "ssl_min_version=3", "ssl_ciphers=ECDHE-RSA-AES128-GCM-SHA256")
    with servers.Server(kind, args) as srv:
        with connect(srv.port, certs.client_context()) as s:
            st = stats(s, b"settings")
            general = stats(s)
    assert {k: v for k, v in st.items() if k.startswith("ssl_")} == {
        "ssl_enabled": "yes",
        "ssl_chain_cert": certs.path("server.pem"),
        "ssl_key": certs.path("server.key"),
        "ssl_verify_mode": "1",
        "ssl_keyformat": "1",
        "ssl_ciphers": "ECDHE-RSA-AES128-GCM-SHA256",
        "ssl_ca_cert": certs.path("ca.pem"),
        "ssl_wbuf_size": "32768",
        "ssl_session_cache": "yes",
        "ssl_kernel_tls": "no",
        "ssl_min_version": "tlsv1.3",
    }
    for name in ("ssl_new_sessions", "ssl_handshake_errors", "ssl_proto_errors",
                 "time_since_server_cert_refresh"):
        assert name in general


def test_without_tls_the_rows_say_so(kind):
    with servers.Server(kind, []) as srv:
        with socket.create_connection(srv.address, timeout=5) as p:
            assert ask(p, b"refresh_certs\r\n") == b"Error TLS not enabled\r\n"
            st = stats(p, b"settings")
            general = stats(p)
    assert st["ssl_enabled"] == "no" and st["ssl_verify_mode"] == "0"
    assert st["ssl_min_version"] == "tlsv1.2" and st["ssl_wbuf_size"] == "16384"
    assert "ssl_handshake_errors" not in general


def _start_fails(kind, args):
    binary = servers.require_memcached() if kind == "memcached" else servers.OSMIUM_BIN
    cmd = [binary, "-l", "127.0.0.1", "-U", "0", "-p", str(servers.free_port())] + args
    if os.geteuid() == 0:
        cmd += ["-u", "root"]
    p = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, timeout=10)
    return p.returncode, p.stderr.decode(errors="replace")


@pytest.mark.parametrize("args,code,message", [
    (["-Z", "-p", "0"], 64, "ERROR: You cannot enable SSL without a TCP port."),
    (["-l", "notls:127.0.0.1"], 71, "'notls' option is valid only when SSL is enabled"),
    (["-l", "btls:127.0.0.1"], 71, "'btls' option is valid only when SSL is enabled"),
    (["-l", "mtls:127.0.0.1"], 71, "'otls' option is valid only when SSL is enabled"),
    (["-o", "ssl_verify_mode=4"], 1, "Invalid ssl_verify_mode. Use help to see valid options."),
    (["-o", "ssl_min_version=7"], 1, "Invalid ssl_min_version. Use help to see valid options."),
    (["-Z", "-o", "ssl_chain_cert=/nonexistent/cert.pem"], 64,
     "Error loading the certificate chain: /nonexistent/cert.pem : "),
])
def test_start_refusals(kind, args, code, message):
    if args[:2] == ["-Z", "-p"]:
        args = args  # the port given last wins
    rc, err = _start_fails(kind, args)
    assert rc == code, err
    assert message in err


def test_kernel_tls_is_refused_where_the_kernel_has_none(certs):
    with open("/proc/sys/net/ipv4/tcp_available_ulp") as f:
        if "tls" in f.read().split():
            pytest.skip("this kernel offers TLS offload")
    rc, err = _start_fails("osmium", certs.server_args("ssl_kernel_tls"))
    assert rc == 64 and "Kernel TLS offload is not available" in err


def test_pymemcache_over_tls(server, certs):
    from pymemcache.client.base import Client
    c = Client(("127.0.0.1", server.port), tls_context=certs.client_context(), connect_timeout=5,
               timeout=5)
    try:
        assert c.set("pm", b"value", noreply=False)
        assert c.get("pm") == b"value"
        assert c.get_many(["pm", "nope"]) == {"pm": b"value"}
        assert c.incr("n", 1) is None
        c.set("n", b"41", noreply=False)
        assert c.incr("n", 1) == 42
        assert c.delete("pm", noreply=False)
    finally:
        c.close()


@pytest.mark.parametrize("flag", ["-tls1_2", "-tls1_3"])
def test_openssl_s_client(server, certs, flag):
    # The request, then a pause for the reply before stdin ends (s_client
    # closes at once on end of input).
    cmd = ["openssl", "s_client", "-connect", f"127.0.0.1:{server.port}", flag, "-quiet",
           "-no_ign_eof", "-CAfile", certs.path("ca.pem"), "-verify_return_error",
           "-servername", "localhost"]
    p = subprocess.run(["bash", "-c", "(printf 'version\\r\\n'; sleep 1) | \"$@\"", "s_client", *cmd],
                       capture_output=True, timeout=10)
    assert b"VERSION " in p.stdout, p.stderr.decode(errors="replace")


def test_the_server_survives_garbage_and_truncated_records(server, certs):
    before = tls_errors(server.port, certs)
    payloads = [
        b"\x16\x03\x01\x00\x05hello",                 # a handshake record with junk
        b"\x16\x03\x01\xff\xff" + b"\x00" * 100,      # a record longer than sent
        b"\x17\x03\x03\x00\x10" + os.urandom(16),     # application data before a handshake
        os.urandom(3000),
        b"\x16\x03",                                  # a truncated header
    ]
    for data in payloads:
        with socket.create_connection(("127.0.0.1", server.port), timeout=2) as p:
            p.sendall(data)
            try:
                p.shutdown(socket.SHUT_WR)
                while p.recv(4096):
                    pass
            except (OSError, socket.timeout):
                pass  # memcached resets some of them
    assert tls_errors(server.port, certs) >= before + 3
    with connect(server.port, certs.client_context()) as s:
        assert ask(s, b"version\r\n").startswith(b"VERSION ")


def test_a_named_client_certificate_proves_a_replication_peer(certs):
    # osmium's private replication commands: refused (ERROR, connection
    # unchanged) on every connection but one that proved it is a peer, here
    # by a client certificate verified against ssl_ca_cert whose SAN
    # -o replication_peers names. An ordinary client certificate is a client.
    port2 = servers.free_port()
    args = (certs.server_args("ssl_verify_mode=1", "replication_peers=replica-peer.test")
            + ["-l", f"mtls:127.0.0.1:{port2}"])
    with servers.Server("osmium", args) as srv:
        for cert in (None, "client"):
            with connect(srv.port, certs.client_context(cert=cert)) as s:
                assert ask(s, b"set secret 0 0 6\r\nhunter\r\n") == b"STORED\r\n"
                for cmd in (b"replica_link x\r\n", b"replica_follow 2\r\n",
                            b"replica_synced\r\n", b"replica_hello target 00\r\n"):
                    assert ask(s, cmd) == b"ERROR\r\n", cmd
                assert ask(s, b"version\r\n").startswith(b"VERSION "), "still works"
        for port in (srv.port, port2):
            with connect(port, certs.client_context(cert="peer")) as s:
                assert ask(s, b"replica_link peer\r\n") == b"OK\r\n"
        assert _handshake_refused(port2, certs.client_context(cert="rogue"))
        with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as p:
            p.sendall(b"replica_follow 2\r\n")
            try:
                assert b"hunter" not in p.recv(4096)
            except (ConnectionResetError, socket.timeout):
                pass


def test_dumps_disabled_refuse_replica_follow_even_to_a_peer(certs):
    args = certs.server_args("ssl_verify_mode=1", "replication_peers=replica-peer.test") + ["-X"]
    with servers.Server("osmium", args) as srv:
        with connect(srv.port, certs.client_context(cert="peer")) as s:
            assert ask(s, b"set secret 0 0 6\r\nhunter\r\n") == b"STORED\r\n"
            assert ask(s, b"replica_follow 2\r\n") == b"ERROR metadump not allowed\r\n"
            assert ask(s, b"version\r\n").startswith(b"VERSION ")
