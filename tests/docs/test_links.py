"""Every link between the repository's Markdown documents resolves: each
`[text](path)` names a file or directory that exists, and each `#anchor`
(in the same file or another) names a heading there, slugged as GitHub
slugs it. Covers README.md, BENCHMARKS.md, docs/, and the crates' and test
suites' READMEs (vendored trees left out). Needs nothing but Python;
also runs alone: `python3 tests/docs/test_links.py`.
"""
import os
import re
import sys
import unicodedata

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SKIP_DIRS = {".git", "target", "node_modules", "memcached_exporter", ".oracle", "fuzz"}
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")  # text may span lines
FENCE = re.compile(r"^\s*(```|~~~)")


def documents():
    for top, dirs, files in os.walk(ROOT):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith(".oracle"))
        for f in sorted(files):
            if f.endswith(".md"):
                yield os.path.join(top, f)


def prose(text):
    """The text with fenced code blocks and inline code blanked (line
    breaks kept, so offsets still give line numbers)."""
    out = []
    fenced = False
    for line in text.split("\n"):
        if FENCE.match(line):
            fenced = not fenced
            out.append("")
        elif fenced:
            out.append("")
        else:
            out.append(re.sub(r"`[^`]*`", lambda m: " " * len(m.group(0)), line))
    return "\n".join(out)


def slug(heading):
    """GitHub's anchor for a heading: the rendered text lower-cased, every
    character but letters, digits, spaces, '-' and '_' dropped, spaces
    made '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links: their text
    text = text.replace("`", "").replace("*", "").strip().lower()
    kept = []
    for ch in text:
        cat = unicodedata.category(ch)
        if ch in "-_" or ch == " " or cat[0] in "LN" or cat == "Mn":
            kept.append(ch)
    return "".join(kept).replace(" ", "-")


def anchors(path, cache={}):
    if path not in cache:
        seen = {}
        found = set()
        with open(path, encoding="utf-8") as f:
            text = f.read()
        fenced = False
        for line in text.split("\n"):
            if FENCE.match(line):
                fenced = not fenced
                continue
            m = None if fenced else re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
            if m:
                s = slug(m.group(2))
                n = seen.get(s, 0)
                seen[s] = n + 1
                found.add(s if n == 0 else f"{s}-{n}")
        cache[path] = found
    return cache[path]


def broken_links():
    broken = []
    for doc in documents():
        with open(doc, encoding="utf-8") as f:
            text = f.read()
        body = prose(text)
        for m in LINK.finditer(body):
            target = m.group(1)
            n = body.count("\n", 0, m.start(1)) + 1
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            where = os.path.normpath(os.path.join(os.path.dirname(doc), path)) if path else doc
            rel = os.path.relpath(doc, ROOT)
            if not os.path.exists(where):
                broken.append(f"{rel}:{n}: {target}: no such file")
            elif anchor and os.path.isfile(where) and where.endswith(".md"):
                if anchor not in anchors(where):
                    broken.append(f"{rel}:{n}: {target}: no heading with that anchor")
    return broken


def test_every_link_between_documents_resolves():
    broken = broken_links()
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_the_checker_sees_links_and_anchors():
    # The checker itself: a heading's slug as GitHub makes it.
    assert slug("Warm restart and crash recovery (`-e FILE`)") == \
        "warm-restart-and-crash-recovery--e-file"
    assert slug("The flash tier against memcached 1.6.45 extstore (2026-11-26)") == \
        "the-flash-tier-against-memcached-1645-extstore-2026-11-26"
    assert LINK.findall("see [a](docs/x.md#y) and ![img](p.svg)") == ["docs/x.md#y"]
    assert LINK.findall("[a link's\ntext](x.md)") == ["x.md"]
    assert LINK.findall(prose("`[not](a-link)`\n```\n[nor](this)\n```")) == []


if __name__ == "__main__":
    problems = broken_links()
    print("\n".join(problems) or "every link resolves")
    sys.exit(1 if problems else 0)
