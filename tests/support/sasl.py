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
* memcached (the oracle built by scripts/build-memcached.sh with
  --enable-sasl-pwdb; Cyrus libsasl2 checks the password through memcached's
  own password file): a directory holding
      memcached.conf   mech_list: plain
      sasl-pwdb        user:password
                       user@HOST:password   (HOST: this host's name and FQDN)
  and `memcached -S ...` started with SASL_CONF_PATH=DIR and
  MEMCACHED_SASL_PWDB=DIR/sasl-pwdb in its environment. PLAIN hands
  memcached's check the user name with the default realm appended (the
  host's name, which memcached passes to libsasl2), hence the second line.
  Without a config file memcached refuses to start with -S; the PLAIN
  mechanism is the Debian package libsasl2-modules. A memcached built without
  --enable-sasl-pwdb ignores MEMCACHED_SASL_PWDB and refuses every login.

With -S, memcached speaks only the binary protocol (ASCII is never answered:
once 24 bytes have arrived they are read as a binary header with a bad magic
byte and the connection is closed) and answers every command of an
unauthenticated connection except SASL_LIST_MECHS / SASL_AUTH / SASL_STEP /
VERSION with status 0x20 (authentication error), NOOP included.
"""
import os
import shutil
import socket
import tempfile

from . import servers


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
        with open(os.path.join(self.tmpdir, "memcached.conf"), "w") as f:
            f.write("mech_list: plain\n")
        pwdb = os.path.join(self.tmpdir, "sasl-pwdb")
        users = [self.user]
        if "@" not in self.user:
            for host in (socket.gethostname(), socket.getfqdn()):
                if host and f"{self.user}@{host}" not in users:
                    users.append(f"{self.user}@{host}")
        with open(pwdb, "w") as f:
            f.writelines(f"{u}:{self.password}\n" for u in users)
        os.chmod(pwdb, 0o600)
        env = dict(os.environ, SASL_CONF_PATH=self.tmpdir, MEMCACHED_SASL_PWDB=pwdb)
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
