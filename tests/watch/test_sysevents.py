"""osmium's own lines in the `sysevents` stream (memcached has no flash
tier of this kind, no replication links and no memory file: these run
against osmium only): flash tier writes, replication links going up and
down, a stop and the memory file saved for a warm restart.
"""
import os
import re
import signal

from support import servers

from .test_watch import LINE, connect, command, watch

FLASH_WRITE = re.compile(r"type=flash_write page=\d+ offset=\d+ bytes=\d+ status=ok$")


def test_flash_tier_writes_are_one_line_per_write_buffer(tmp_path):
    flash = tmp_path / "flash"
    args = ["-m", "8", "-o", f"ext_path={flash}:64m", "-o", "ext_page_size=4"]
    with servers.Server("osmium", args) as server:
        w = watch(server, b"sysevents")
        # Values that do not compress: packed on their way to flash, 20 MB
        # of one byte would not fill three write buffers.
        with connect(server) as c:
            for i in range(1000):
                command(c, b"set key%d 0 0 20000\r\n" % i + os.urandom(20000) + b"\r\n")
        got = w.lines(3, timeout=20)
        for line in got:
            assert FLASH_WRITE.search(line), line
        # A line per buffer of about a megabyte, not per item.
        assert int(re.search(r"bytes=(\d+)", got[0]).group(1)) >= 64 * 1024


def test_a_graceful_stop_logs_the_stop_and_the_memory_file_saved(tmp_path):
    memfile = tmp_path / "mem"
    server = servers.Server("osmium", ["-m", "64", "-e", str(memfile)])
    try:
        w = watch(server, b"sysevents")
        with connect(server) as c:
            for i in range(10):
                command(c, b"set k%d 0 0 1\r\nx\r\n" % i)
        os.kill(server.pid, signal.SIGUSR1)
        stop, saved = w.lines(2, timeout=20)
        assert stop.endswith(" type=shutdown mode=graceful"), stop
        assert saved.endswith(" type=warm_restart state=saved items=10"), saved
        # The logger sends what it holds, then the watcher is closed.
        w.sock.settimeout(10)
        assert w.buf == b"" and w.sock.recv(100) == b""
        server.proc.wait(timeout=20)
    finally:
        server.stop()


def test_replication_links_going_up_and_down(tmp_path):
    secret = tmp_path / "secret"
    secret.write_bytes(os.urandom(32).hex().encode() + b"\n")
    secret.chmod(0o600)
    target_port = servers.free_port()
    auth = ["--replication-secret", str(secret)]
    with servers.Server("osmium", auth + ["--replicate-to", f"127.0.0.1:{target_port}"]) as src:
        w = watch(src, b"sysevents")
        target = servers.Server("osmium", auth, port=target_port)
        try:
            up = w.until("state=up", timeout=20)[-1]
            assert re.search(r" type=replication_link role=target peer=127\.0\.0\.1%3A"
                             + str(target_port) + " state=up$", up), up
        finally:
            target.stop()
        down = w.until("state=down", timeout=20)[-1]
        assert LINE.match(down.encode())
        assert f"role=target peer=127.0.0.1%3A{target_port} state=down reason=" in down, down
