"""Fixtures for the TLS suite: certificates made with the `openssl` command
(a CA, a server certificate for 127.0.0.1/localhost, a client certificate
signed by the CA, and a second server certificate for reload tests), and
servers started with `-Z` the same way for memcached 1.6.45 and osmium.

Every test runs against both servers unless it tests what only osmium
promises (an atomic reload, the kernel-TLS refusal); see README.md.
"""
import os
import ssl
import subprocess

import pytest

from support import servers

KINDS = [k.strip() for k in os.environ.get("TLS_TEST_SERVERS", "memcached,osmium").split(",")
         if k.strip()]


def _openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _signed(cwd, name, cn, san=None):
    """An X.509 v3 certificate signed by the test CA: a server's (with
    subjectAltName) or a client's."""
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key",
             "-out", f"{name}.csr", "-subj", f"/CN={cn}", cwd=cwd)
    with open(os.path.join(cwd, f"{name}.ext"), "w") as f:
        f.write("basicConstraints=CA:FALSE\n")
        if san:
            f.write(f"subjectAltName={san}\nextendedKeyUsage=serverAuth\n")
        else:
            f.write("extendedKeyUsage=clientAuth\n")
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


@pytest.fixture(scope="session")
def certs(tmp_path_factory):
    return Certs(tmp_path_factory.mktemp("tls-certs"))


@pytest.fixture(params=KINDS)
def kind(request):
    if request.param == "memcached":
        servers.require_memcached()
    return request.param
