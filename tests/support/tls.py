"""Test certificates made with the `openssl` command: a CA, a server
certificate for 127.0.0.1/localhost, a second one (reload tests), a client
certificate signed by the CA (no SAN: an ordinary mTLS client), one with
the SAN `DNS:replica-peer.test` (a replication peer's, where
`-o replication_peers=replica-peer.test` names it), and a self-signed
client certificate the server does not trust. Used by tests/tls and by the conformance suite over
TLS."""
import os
import ssl
import subprocess
import threading


def _openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _signed(cwd, name, cn, san=None, client=False):
    """An X.509 v3 certificate signed by the test CA: a server's (with
    subjectAltName) or a client's (with one when `san` is given)."""
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key",
             "-out", f"{name}.csr", "-subj", f"/CN={cn}", cwd=cwd)
    with open(os.path.join(cwd, f"{name}.ext"), "w") as f:
        f.write("basicConstraints=CA:FALSE\n")
        if san:
            f.write(f"subjectAltName={san}\n")
        f.write("extendedKeyUsage=clientAuth\n" if client or not san
                else "extendedKeyUsage=serverAuth\n")
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-CAcreateserial", "-out", f"{name}.pem", "-days", "30", "-extfile", f"{name}.ext",
             cwd=cwd)


class Certs:
    def __init__(self, d):
        self.dir = str(d)
        _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key",
                 "-out", "ca.pem", "-days", "30", "-subj", "/CN=osmium-test-ca", cwd=self.dir)
        _signed(self.dir, "server", "localhost", "DNS:localhost,IP:127.0.0.1")
        _signed(self.dir, "server2", "localhost", "DNS:localhost,IP:127.0.0.1")
        _signed(self.dir, "client", "replica-peer")
        _signed(self.dir, "peer", "replica-peer", "DNS:replica-peer.test", client=True)
        # A client certificate from a CA the server does not trust.
        _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "rogue.key",
                 "-out", "rogue.pem", "-days", "30", "-subj", "/CN=rogue", cwd=self.dir)

    def path(self, name):
        return os.path.join(self.dir, name)

    def server_args(self, *extra_opts, ca=True):
        opts = [f"ssl_chain_cert={self.path('server.pem')}", f"ssl_key={self.path('server.key')}"]
        if ca:
            opts.append(f"ssl_ca_cert={self.path('ca.pem')}")
        opts += list(extra_opts)
        return ["-Z", "-o", ",".join(opts)]

    def client_context(self, cert=None, version=None, tickets=True):
        ctx = ssl.create_default_context(cafile=self.path("ca.pem"))
        if cert:
            ctx.load_cert_chain(self.path(f"{cert}.pem"), self.path(f"{cert}.key"))
        if version is not None:
            ctx.minimum_version = version
            ctx.maximum_version = version
        if not tickets:
            ctx.options |= ssl.OP_NO_TICKET
        return ctx


class ThreadSafeTlsSocket:
    """A TLS client over a plain socket that one thread may send on while
    another receives (an `ssl.SSLSocket` may not: two threads in one
    OpenSSL session corrupt its records). TLS runs on memory buffers under
    a lock; the socket's own send and recv, which the kernel makes safe,
    happen outside it."""

    def __init__(self, sock, ctx, server_hostname="localhost"):
        self.sock = sock
        self.lock = threading.Lock()
        self.incoming = ssl.MemoryBIO()
        self.outgoing = ssl.MemoryBIO()
        self.tls = ctx.wrap_bio(self.incoming, self.outgoing, server_hostname=server_hostname)
        while True:
            try:
                self.tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                self._flush()
                data = self.sock.recv(65536)
                if not data:
                    raise ConnectionResetError("closed during the TLS handshake")
                self.incoming.write(data)
        self._flush()

    def _flush(self):
        with self.lock:
            data = self.outgoing.read()
        if data:
            self.sock.sendall(data)

    def sendall(self, data):
        view = memoryview(data)
        for i in range(0, len(view), 16384):
            with self.lock:
                self.tls.write(view[i:i + 16384])
                out = self.outgoing.read()
            self.sock.sendall(out)

    def recv(self, n):
        while True:
            with self.lock:
                try:
                    data = self.tls.read(n)
                except ssl.SSLWantReadError:
                    data = None
                except ssl.SSLZeroReturnError:
                    data = b""
            if data is not None:
                self._flush()
                return data
            raw = self.sock.recv(65536)
            if not raw:
                return b""
            with self.lock:
                self.incoming.write(raw)

    def settimeout(self, t):
        self.sock.settimeout(t)

    def setsockopt(self, *args):
        self.sock.setsockopt(*args)

    def shutdown(self, how):
        self.sock.shutdown(how)

    def close(self):
        self.sock.close()

    def fileno(self):
        return self.sock.fileno()
