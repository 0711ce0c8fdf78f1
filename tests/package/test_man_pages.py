"""Every binary's man page, as `scripts/build-deb.sh` generates it for the
Debian package (`<binary> --generate-man DIR`, from target/release): it is
written, `man` renders it without a warning, and it says what `-h` cannot:
FILES, SIGNALS and EXAMPLES sections (osmium-proxy's page, owned with
crates/proxy, has its options only so far: it is checked to generate and
render). osmium's says the truth about `-P` (written with or without `-d`).
"""
import gzip
import os
import re
import shutil
import subprocess

import pytest

from support.servers import ROOT

RELEASE = os.path.join(ROOT, "target", "release")
WITH_SECTIONS = ("osmium", "osmium-bench", "osmium-tool")
BINARIES = WITH_SECTIONS + ("osmium-proxy",)


def _generate(binary, tmp_path):
    path = os.path.join(RELEASE, binary)
    if not os.access(path, os.X_OK):
        if os.environ.get("CI") == "true":
            pytest.fail(f"{path} missing (CI=true: a failure)")
        pytest.skip(f"{path} missing: cargo build --release --workspace")
    r = subprocess.run([path, "--generate-man", str(tmp_path)], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 0, r.stderr
    page = tmp_path / f"{binary}.1"
    assert page.is_file(), os.listdir(tmp_path)
    return page


def _render(page):
    """The page as `man` shows it, and what it warned about."""
    if shutil.which("man") is None:
        return None, ""
    env = dict(os.environ, MANPAGER="cat", PAGER="cat", MANWIDTH="80", MAN_KEEP_STDERR="1")
    r = subprocess.run(["man", "--warnings", "-l", str(page)], capture_output=True, text=True,
                       env=env, timeout=30)
    assert r.returncode == 0, r.stderr
    return r.stdout, r.stderr


@pytest.mark.parametrize("binary", BINARIES)
def test_the_man_page_generates_and_renders(binary, tmp_path):
    page = _generate(binary, tmp_path)
    text = page.read_text()
    assert text.startswith(".ie") or ".TH" in text, text[:200]
    # roff text and requests only: no control characters.
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f]", text), repr(text)
    shown, warnings = _render(page)
    assert not warnings.strip(), warnings
    if shown is not None:
        assert binary in shown


@pytest.mark.parametrize("binary", WITH_SECTIONS)
def test_the_man_page_has_files_signals_and_examples(binary, tmp_path):
    text = _generate(binary, tmp_path).read_text()
    for section in ("FILES", "SIGNALS", "EXAMPLES", "SEE ALSO"):
        assert f"\n.SH {section}\n" in text or f'\n.SH "{section}"\n' in text, section
    shown, _ = _render(_generate(binary, tmp_path))
    if shown is not None:
        for section in ("FILES", "SIGNALS", "EXAMPLES"):
            assert f"\n{section}\n" in shown, section


def test_osmiums_page_and_help_say_what_is_true_of_the_pid_file(tmp_path):
    text = _generate("osmium", tmp_path).read_text()
    helped = subprocess.run([os.path.join(RELEASE, "osmium"), "-h"], capture_output=True,
                            text=True, timeout=30).stdout
    for said in (text, helped):
        assert "only used with" not in said
    assert "with or without \\-d" in text
    assert "with or without -d" in helped
