"""Makes the seed corpus of the fuzz target tls_records (fuzz/seeds/tls_records/):
what real TLS clients send a server, captured on the wire, and truncations.

Python's ssl module (OpenSSL) talks to osmium -Z (target/release/osmium, or
OSMIUM_BIN; the certificates of fuzz/tls/) through a loopback relay that
records the client's bytes: the ClientHello alone (what the client sent
before the server's first byte) and the whole client side of the session
(handshake, a `version` request, close_notify), for TLS 1.2 and 1.3; a
resumed session (TLS 1.3 PSK, TLS 1.2 ticket); a client certificate on an
`mtls:` listener (a self-signed one: its Certificate and CertificateVerify
are sent, then refused). Then the ClientHellos cut short at the record
header and mid-record, an over-long record, an SSLv2-style hello and a
plaintext request.

    python3 fuzz/seeds/make_tls_records_seeds.py
"""
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests"))
from support import servers  # noqa: E402

TLS_DIR = os.path.join(ROOT, "fuzz", "tls")
OUT = os.path.join(HERE, "tls_records")


class Relay:
    """Forwards one connection to the server; `first` is what the client sent
    before the server's first byte, `sent` all it sent."""

    def __init__(self, port):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.target = port
        self.first, self.sent = b"", b""
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        client, _ = self.listener.accept()
        upstream = socket.create_connection(("127.0.0.1", self.target))
        replied = threading.Event()

        def down():
            while data := upstream.recv(65536):
                replied.set()
                client.sendall(data)
            client.close()

        threading.Thread(target=down, daemon=True).start()
        try:
            while data := client.recv(65536):
                self.sent += data
                if not replied.is_set():
                    self.first += data
                upstream.sendall(data)
        except OSError:
            pass
        upstream.close()

    def done(self):
        self.thread.join(5)
        self.listener.close()
        return self.first, self.sent


def session(port, ctx, resume=None):
    """One session through a relay: the client's bytes, and its session."""
    relay = Relay(port)
    raw = socket.create_connection(("127.0.0.1", relay.port), timeout=5)
    out = None
    try:
        with ctx.wrap_socket(raw, server_hostname="localhost", session=resume) as s:
            s.sendall(b"version\r\n")
            s.recv(100)
            out = s.session
            s.unwrap()
    except (ssl.SSLError, OSError):
        pass  # a refused client certificate
    return relay.done(), out


def client_context(version):
    ctx = ssl.create_default_context(cafile=os.path.join(TLS_DIR, "ca.pem"))
    ctx.minimum_version = ctx.maximum_version = version
    return ctx


def main():
    os.makedirs(OUT, exist_ok=True)
    seeds = {}
    mtls = servers.free_port()
    args = ["-Z", "-o", ",".join([f"ssl_chain_cert={TLS_DIR}/server.pem",
                                  f"ssl_key={TLS_DIR}/server.key",
                                  f"ssl_ca_cert={TLS_DIR}/ca.pem"]),
            "-l", f"mtls:127.0.0.1:{mtls}"]
    with servers.Server("osmium", args) as srv, tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", "c.key", "-out",
                        "c.pem", "-days", "1", "-subj", "/CN=fuzz-client"],
                       cwd=tmp, check=True, capture_output=True)
        for name, version in (("tls12", ssl.TLSVersion.TLSv1_2),
                              ("tls13", ssl.TLSVersion.TLSv1_3)):
            ctx = client_context(version)
            (hello, whole), sess = session(srv.port, ctx)
            seeds[f"{name}_client_hello"] = hello
            seeds[f"{name}_session"] = whole
            (hello, whole), _ = session(srv.port, ctx, resume=sess)
            seeds[f"{name}_resume_client_hello"] = hello
            seeds[f"{name}_resume_session"] = whole
            ctx = client_context(version)
            ctx.load_cert_chain(os.path.join(tmp, "c.pem"), os.path.join(tmp, "c.key"))
            (_, whole), _ = session(mtls, ctx)
            seeds[f"{name}_client_certificate"] = whole
    for name in ("tls12_client_hello", "tls13_client_hello"):
        hello = seeds[name]
        seeds[f"{name}_header_only"] = hello[:5]
        seeds[f"{name}_cut_4"] = hello[:4]
        seeds[f"{name}_half"] = hello[:len(hello) // 2]
        seeds[f"{name}_less_1"] = hello[:-1]
    seeds["record_too_long"] = b"\x16\x03\x01\xff\xff" + b"\x01" * 64
    seeds["sslv2_hello"] = bytes.fromhex("802e0103010015000000100100800300800700c0060040020080"
                                         "0400800000390000380000350000330000320000")
    seeds["plaintext_request"] = b"set x 0 0 1\r\nx\r\nget x\r\n"
    for name, data in seeds.items():
        assert data, f"{name}: nothing captured"
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)
        print(f"{name}: {len(data)} bytes")


if __name__ == "__main__":
    main()
