"""Start genuine memcached or osmium with SASL authentication (-S).

    from support.sasl import start_sasl_server
    srv = start_sasl_server("memcached", "alice", "s3cret")
    ... connect to 127.0.0.1:srv.port with the binary protocol, PLAIN auth ...
    srv.stop()

`start_sasl_server(kind, user, password, extra_args=())` returns a started
`SaslServer`, a `servers.Server` (same `.kind`, `.port`, `.pid`, `.address`,
`.cmd`, `.stop()`, context manager) that also owns a temporary directory with
its credentials and removes it on `.stop()`. `extra_args` are appended to the
server's command line. The server binds 127.0.0.1 on a free port and is
stopped by PID, like every `servers.Server`.

How each kind is set up (one user, password `password`):

* osmium: a password file `user:password` (one `user:password` per line:
  memcached's sasl-pwdb format) and
  `osmium -S --sasl-pwdb FILE -p PORT -U 0 -l 127.0.0.1`.
* memcached (Debian's build, Cyrus libsasl2; it has no built-in pwdb
  support): a directory holding
      memcached.conf   mech_list: plain
                       pwcheck_method: auxprop
                       auxprop_plugin: sasldb
                       sasldb_path: DIR/sasldb2
      sasldb2          made by `saslpasswd2 -a memcached -c -f DIR/sasldb2 -p USER`
                       (password on stdin)
  and `memcached -S ...` started with SASL_CONF_PATH=DIR in its environment.
  Needs the Debian packages sasl2-bin (saslpasswd2), libsasl2-modules (PLAIN)
  and libsasl2-modules-db (the sasldb auxprop plugin). The user is created in
  the default realm (this host's name), which is the realm memcached's PLAIN
  check uses on the same host.

With -S, memcached speaks only the binary protocol (ASCII is never answered:
once 24 bytes have arrived they are read as a binary header with a bad magic
byte and the connection is closed) and answers every command of an
unauthenticated connection except SASL_LIST_MECHS / SASL_AUTH / SASL_STEP /
VERSION with status 0x20 (authentication error), NOOP included.
"""
import os
import shutil
import subprocess
import tempfile

from . import servers

SASLPASSWD2 = shutil.which("saslpasswd2") or "/usr/sbin/saslpasswd2"


class SaslServer(servers.Server):
    """A `servers.Server` started with -S and credentials for one user."""

    def __init__(self, kind, user, password, extra_args=()):
        if ":" in user or "\n" in user or "\n" in password:
            raise ValueError("user must not contain ':' or newlines, password no newlines")
        self.user = user
        self.password = password
        self.tmpdir = tempfile.mkdtemp(prefix=f"osmium-sasl-{kind}-")
        try:
            if kind == "memcached":
                args, env = self._memcached_setup()
            elif kind == "osmium":
                args, env = self._osmium_setup()
            else:
                raise ValueError(f"unknown server kind {kind!r}")
            super().__init__(kind, args + list(extra_args), env=env)
        except BaseException:
            shutil.rmtree(self.tmpdir, ignore_errors=True)
            raise

    def _osmium_setup(self):
        pwdb = os.path.join(self.tmpdir, "sasl-pwdb")
        with open(pwdb, "w") as f:
            f.write(f"{self.user}:{self.password}\n")
        os.chmod(pwdb, 0o600)
        return ["-S", "--sasl-pwdb", pwdb], None

    def _memcached_setup(self):
        if not os.access(SASLPASSWD2, os.X_OK):
            raise RuntimeError(
                f"{SASLPASSWD2} not found: apt-get install sasl2-bin libsasl2-modules "
                "libsasl2-modules-db")
        sasldb = os.path.join(self.tmpdir, "sasldb2")
        with open(os.path.join(self.tmpdir, "memcached.conf"), "w") as f:
            f.write("mech_list: plain\n"
                    "pwcheck_method: auxprop\n"
                    "auxprop_plugin: sasldb\n"
                    f"sasldb_path: {sasldb}\n")
        proc = subprocess.run([SASLPASSWD2, "-a", "memcached", "-c", "-f", sasldb, "-p", self.user],
                              input=self.password.encode(), capture_output=True, timeout=30)
        if proc.returncode != 0 or not os.path.exists(sasldb):
            raise RuntimeError(f"saslpasswd2 failed ({proc.returncode}): "
                               f"{proc.stderr.decode(errors='replace')}")
        env = dict(os.environ, SASL_CONF_PATH=self.tmpdir)
        return ["-S"], env

    def stop(self):
        try:
            super().stop()
        finally:
            shutil.rmtree(self.tmpdir, ignore_errors=True)


def start_sasl_server(kind, user, password, extra_args=()):
    """Start `kind` ('memcached' or 'osmium') with SASL on, one user
    `user`/`password`; returns the started SaslServer."""
    return SaslServer(kind, user, password, extra_args)
