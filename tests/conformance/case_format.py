"""Conformance case files: the byte templates, the binary-protocol
{bin ...} expressions, steps and cases, parsed from tests/conformance/cases
(the format is documented in README.md; keep the two in sync)."""

import glob
import os
import random
import re
import struct
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CASES_DIR = os.path.join(HERE, "cases")
# Every server is started with these unless the case passes its own -m / -t.
BASE_ARGS = {"-m": "64", "-t": "4"}


class CaseError(Exception):
    """The case file is malformed or the harness could not run it."""


# --------------------------------------------------------------------------
# Byte templates
# --------------------------------------------------------------------------

_ESCAPES = {"r": b"\r", "n": b"\n", "t": b"\t", "0": b"\0", "\\": b"\\",
            "s": b" ", "{": b"{", "}": b"}", '"': b'"', "'": b"'"}


def _unescape(s, where):
    """Process backslash escapes of a text with no {...} expressions."""
    out = bytearray()
    i = 0
    while i < len(s):
        c = s[i]
        if c == "\\":
            if i + 1 >= len(s):
                raise CaseError(f"{where}: dangling backslash")
            e = s[i + 1]
            if e == "x":
                hx = s[i + 2:i + 4]
                if not re.fullmatch(r"[0-9a-fA-F]{2}", hx):
                    raise CaseError(f"{where}: bad \\x escape {s[i:i + 4]!r}")
                out.append(int(hx, 16))
                i += 4
                continue
            if e not in _ESCAPES:
                raise CaseError(f"{where}: unknown escape \\{e}")
            out += _ESCAPES[e]
            i += 2
            continue
        out += c.encode("utf-8")
        i += 1
    return bytes(out)


_NOISE_RE = re.compile(r"^\s*noise\s+(?P<n>[0-9_]+)\s*$")
_REPEAT_RE = re.compile(r"""^\s*(?P<q>["'])(?P<s>(?:\\.|(?!(?P=q)).)*)(?P=q)\s*\*\s*(?P<n>[0-9_]+)\s*$""")
_NOW_RE = re.compile(r"^now\s*(?:(?P<sign>[+-])\s*(?P<n>[0-9]+))?$")
_CAS_RE = re.compile(r"^cas(?P<n>[1-9][0-9]*)$")


class Template:
    """A send text: a list of literal bytes and expressions evaluated per connection."""

    def __init__(self, text, where):
        self.text = text
        self.parts = []
        buf = []
        i = 0
        while i < len(text):
            c = text[i]
            if c == "\\":
                buf.append(text[i:i + 2])
                i += 2
                continue
            if c == "{":
                j = i + 1
                quote = None
                while j < len(text):
                    if quote:
                        if text[j] == "\\":
                            j += 2
                            continue
                        if text[j] == quote:
                            quote = None
                    elif text[j] in "\"'":
                        quote = text[j]
                    elif text[j] == "}":
                        break
                    elif text[j] == "{":
                        raise CaseError(f"{where}: expressions do not nest: {text[i:j + 1]!r}... "
                                        f"(inside {{bin}} write key=\"k\"*250)")
                    j += 1
                if j >= len(text):
                    raise CaseError(f"{where}: unclosed {{ in {text!r}")
                if buf:
                    self.parts.append(_unescape("".join(buf), where))
                    buf = []
                self.parts.append(self._expr(text[i + 1:j].strip(), where))
                i = j + 1
                continue
            buf.append(c)
            i += 1
        if buf:
            self.parts.append(_unescape("".join(buf), where))

    @staticmethod
    def _expr(e, where):
        m = _REPEAT_RE.match(e)
        if m:
            return _unescape(m.group("s"), where) * int(m.group("n").replace("_", ""))
        if e == "allbytes":
            return bytes(range(256))
        m = _NOISE_RE.match(e)
        if m:
            n = int(m.group("n").replace("_", ""))
            return random.Random(n).randbytes(n)
        m = _NOW_RE.match(e)
        if m:
            d = int(m.group("n") or 0) * (-1 if m.group("sign") == "-" else 1)
            return ("now", d)
        m = _CAS_RE.match(e)
        if m:
            return ("cas", int(m.group("n")))
        if e == "bin" or e.startswith("bin "):
            return ("bin", parse_bin_spec(e[3:], where))
        raise CaseError(f"{where}: unknown expression {{{e}}}")

    def expand(self, ctx):
        out = []
        for p in self.parts:
            if isinstance(p, bytes):
                out.append(p)
            elif p[0] == "now":
                # After a tick, the server's own clock (its `time` at the
                # tick plus whole seconds since), so that an absolute time
                # means the same to both servers whatever the phase of their
                # clocks; otherwise the wall clock.
                tick = ctx.get("tick")
                if tick:
                    now = tick[0] + int(time.monotonic() - tick[1])
                else:
                    now = int(time.time())
                out.append(str(now + p[1]).encode())
            elif p[0] == "cas":
                seen = ctx["cas"]
                if p[1] > len(seen):
                    # Not captured (e.g. the server returned no CAS): send an
                    # obviously bogus value so the exchange still happens.
                    out.append(b"<cas%d-not-captured>" % p[1])
                else:
                    out.append(seen[p[1] - 1])
            elif p[0] == "bin":
                out.append(build_bin(p[1], ctx))
        return b"".join(out)


# --------------------------------------------------------------------------
# Binary protocol packets: the {bin ...} expression and reply parsing
# --------------------------------------------------------------------------

BIN_OPCODES = {
    "get": 0x00, "set": 0x01, "add": 0x02, "replace": 0x03, "delete": 0x04,
    "incr": 0x05, "decr": 0x06, "quit": 0x07, "flush": 0x08, "getq": 0x09,
    "noop": 0x0a, "version": 0x0b, "getk": 0x0c, "getkq": 0x0d, "append": 0x0e,
    "prepend": 0x0f, "stat": 0x10, "setq": 0x11, "addq": 0x12, "replaceq": 0x13,
    "deleteq": 0x14, "incrq": 0x15, "decrq": 0x16, "quitq": 0x17, "flushq": 0x18,
    "appendq": 0x19, "prependq": 0x1a, "verbosity": 0x1b, "touch": 0x1c,
    "gat": 0x1d, "gatq": 0x1e, "sasl_list_mechs": 0x20, "sasl_auth": 0x21,
    "sasl_step": 0x22, "gatk": 0x23, "gatkq": 0x24,
}
_BIN_STORE = {0x01, 0x02, 0x03, 0x11, 0x12, 0x13}          # extras: flags, exp
_BIN_ARITH = {0x05, 0x06, 0x15, 0x16}                      # extras: delta, initial, exp
_BIN_TOUCH = {0x1c, 0x1d, 0x1e, 0x23, 0x24}                # extras: exp
_BIN_FLUSH = {0x08, 0x18}                                  # extras: exp, only if given
_BIN_VERBOSITY = {0x1b}                                    # extras: level
_BIN_FIELDS = {"key", "value", "extras", "opaque", "cas", "magic", "dt", "vbucket",
               "keylen", "extlen", "bodylen", "trunc", "flags", "exp", "delta",
               "initial", "level"}

# The sentinel of a binary connection: a NOOP with this opaque ("SENT").
BIN_SENTINEL_OPAQUE = 0x53454E54
BIN_SENTINEL = struct.pack(">BBHBBHIIQ", 0x80, 0x0a, 0, 0, 0, 0, 0, BIN_SENTINEL_OPAQUE, 0)
BIN_SENTINEL_REPLY = struct.pack(">BBHBBHIIQ", 0x81, 0x0a, 0, 0, 0, 0, 0, BIN_SENTINEL_OPAQUE, 0)


def _spec_value(text, i, where):
    """Read one field value at text[i:]: a quoted string (escapes, optional *N) or a bare word."""
    if i < len(text) and text[i] in "\"'":
        q = text[i]
        j = i + 1
        while j < len(text) and text[j] != q:
            j += 2 if text[j] == "\\" else 1
        if j >= len(text):
            raise CaseError(f"{where}: unclosed quote in {{bin{text}}}")
        raw = _unescape(text[i + 1:j], where)
        j += 1
        m = re.match(r"\s*\*\s*([0-9_]+)", text[j:])
        if m:
            raw *= int(m.group(1).replace("_", ""))
            j += m.end()
        return ("str", raw), j
    j = i
    while j < len(text) and not text[j].isspace():
        j += 1
    return ("word", text[i:j]), j


def _spec_int(v, name, where):
    try:
        return int(v, 0)
    except ValueError:
        raise CaseError(f"{where}: {{bin}} field {name}={v!r} is not a number") from None


def parse_bin_spec(text, where):
    """Parse the inside of {bin OPCODE field=value ...} (see README.md)."""
    m = re.match(r"\s*(\S+)", text)
    if not m:
        raise CaseError(f"{where}: {{bin}} needs an opcode")
    name = m.group(1)
    if name.lower() in BIN_OPCODES:
        op = BIN_OPCODES[name.lower()]
    else:
        op = _spec_int(name, "opcode", where)
    spec = {"op": op}
    i = m.end()
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        if i >= len(text):
            break
        m = re.match(r"([a-z]+)=", text[i:])
        if not m or m.group(1) not in _BIN_FIELDS:
            raise CaseError(f"{where}: bad {{bin}} field at {text[i:]!r}; fields: {sorted(_BIN_FIELDS)}")
        f = m.group(1)
        (kind, v), i = _spec_value(text, i + m.end(), where)
        if f in ("key", "value"):
            spec[f] = v if kind == "str" else v.encode()
        elif f == "extras":
            if kind == "str":
                spec[f] = v
            else:
                out = b""
                for item in filter(None, v.split(",")):
                    t, _, n = item.partition(":")
                    fmt = {"u8": ">B", "u16": ">H", "u32": ">I", "u64": ">Q"}.get(t)
                    if not fmt:
                        raise CaseError(f"{where}: {{bin}} extras item {item!r}: use u8:/u16:/u32:/u64:N")
                    out += struct.pack(fmt, _spec_int(n, "extras", where))
                spec[f] = out
        elif f == "cas":
            if kind == "word" and _CAS_RE.match(v):
                spec[f] = ("cas", int(_CAS_RE.match(v).group("n")))
            else:
                spec[f] = _spec_int(v.decode() if kind == "str" else v, f, where)
        else:
            spec[f] = _spec_int(v.decode() if kind == "str" else v, f, where)
    return spec


def build_bin(spec, ctx):
    op = spec["op"]
    key = spec.get("key", b"")
    value = spec.get("value", b"")
    if "extras" in spec:
        extras = spec["extras"]
    elif op in _BIN_STORE:
        extras = struct.pack(">II", spec.get("flags", 0), spec.get("exp", 0))
    elif op in _BIN_ARITH:
        extras = struct.pack(">QQI", spec.get("delta", 1), spec.get("initial", 0), spec.get("exp", 0))
    elif op in _BIN_TOUCH:
        extras = struct.pack(">I", spec.get("exp", 0))
    elif op in _BIN_FLUSH and "exp" in spec:
        extras = struct.pack(">I", spec["exp"])
    elif op in _BIN_VERBOSITY:
        extras = struct.pack(">I", spec.get("level", 0))
    else:
        extras = b""
    cas = spec.get("cas", 0)
    if isinstance(cas, tuple):
        seen = ctx["cas"]
        # Not captured: an obviously bogus value so the exchange still happens.
        cas = int(seen[cas[1] - 1]) if cas[1] <= len(seen) else 0xBAD0CA5
    header = struct.pack(
        ">BBHBBHIIQ", spec.get("magic", 0x80), op, spec.get("keylen", len(key)),
        spec.get("extlen", len(extras)), spec.get("dt", 0), spec.get("vbucket", 0),
        spec.get("bodylen", len(extras) + len(key) + len(value)), spec.get("opaque", 0), cas)
    pkt = header + extras + key + value
    if "trunc" in spec:
        pkt = pkt[:spec["trunc"]]
    return pkt


def bin_packets(data):
    """Split binary-protocol bytes into complete packets; returns (packets, trailing bytes)."""
    pkts = []
    pos = 0
    while pos + 24 <= len(data):
        bodylen = struct.unpack(">I", data[pos + 8:pos + 12])[0]
        end = pos + 24 + bodylen
        if end > len(data):
            break
        pkts.append(data[pos:end])
        pos = end
    return pkts, data[pos:]


def bin_sentinel_done(data):
    """True when data is a whole number of packets ending with the sentinel's reply."""
    if not data.endswith(BIN_SENTINEL_REPLY):
        return False
    pkts, rest = bin_packets(data)
    return not rest and bool(pkts) and pkts[-1] == BIN_SENTINEL_REPLY


# --------------------------------------------------------------------------
# Case files
# --------------------------------------------------------------------------

class Step:
    def __init__(self, kind, where, template=None, opts=None, seconds=0.0):
        self.kind = kind          # 'send', 'sleep', 'tick' or 'reconnect'
        self.where = where
        self.template = template
        self.opts = opts or {}
        self.seconds = seconds
        self.texts = [template.text] if template else []

    def describe(self):
        if self.kind == "sleep":
            return f"sleep {self.seconds}"
        if self.kind == "tick":
            return "tick"
        if self.kind == "reconnect":
            n = self.opts.get("conn", 1)
            return "reconnect" + (f" {n}" if n != 1 else "")
        o = self.opts_text()
        t = "".join(self.texts)
        if len(t) > 160:
            t = t[:150] + f"...({len(t)} chars)"
        return (f">[{o}] " if o else "> ") + t

    def opts_text(self):
        parts = []
        for k, v in self.opts.items():
            if isinstance(v, list):
                v = ";".join(str(x) for x in v)
            parts.append(k if v is True else f"{k}={v}")
        return ",".join(parts)


class Case:
    def __init__(self, name, path, line):
        self.name = name
        self.path = path
        self.line = line
        self.doc = ""
        self.server = []
        self.group = ""
        self.prelude = True
        self.skip = None
        self.skip_both = None
        self.stats = None          # None | ('names',) | ('values', pats) | ('except', pats)
        self.order = 0
        self.steps = []

    @property
    def has_sleep(self):
        """Cases that wait on the clock (a sleep or a tick) run concurrently, see README.md."""
        return any(s.kind in ("sleep", "tick") for s in self.steps)

    @property
    def uses_udp(self):
        return any(s.kind == "send" and "udp" in s.opts for s in self.steps)

    def server_args(self):
        args = list(self.server)
        base = []
        for flag, val in BASE_ARGS.items():
            if flag not in args:
                base += [flag, val]
        return base + args

    def binding_protocol(self):
        """'text' or 'binary' when the server's -B fixes the protocol, else None."""
        args = self.server_args()
        for flag, val in zip(args, args[1:]):
            if flag == "-B":
                return {"ascii": "text", "binary": "binary"}.get(val)
        return None

    def server_key(self):
        group = self.group
        if group == "fresh":
            group = "fresh:" + self.name
        elif not group and self.has_sleep:
            group = "expiry"
        if self.uses_udp:
            group += "+udp"
        return (tuple(self.server_args()), group)

    def __repr__(self):
        return f"Case({self.name})"


_OPT_KEYS = {"idle", "noread", "split", "at", "pause", "wait", "conn",
             "udp", "rid", "seq", "total", "rsv", "noframe"}
_UDP_ONLY = {"rid", "seq", "total", "rsv", "noframe"}


def _parse_opts(s, where):
    opts = {}
    for item in filter(None, (x.strip() for x in s.split(","))):
        k, _, v = item.partition("=")
        k = k.strip()
        if k not in _OPT_KEYS:
            raise CaseError(f"{where}: unknown step option {k!r}")
        opts[k] = v.strip() if v else True
    if "split" in opts:
        opts["split"] = int(opts["split"])
    if "at" in opts:
        opts["at"] = [int(x) for x in str(opts["at"]).split(";") if x]
    if "pause" in opts:
        opts["pause"] = int(opts["pause"])
    if "wait" in opts:
        opts["wait"] = int(opts["wait"])
    if "conn" in opts:
        opts["conn"] = int(opts["conn"])
    if opts.get("idle") not in (None, True):
        opts["idle"] = int(opts["idle"])
    for k in ("udp", "rid", "seq", "total", "rsv"):
        if opts.get(k) not in (None, True):
            opts[k] = int(str(opts[k]), 0)
    if "udp" not in opts and _UDP_ONLY & set(opts):
        raise CaseError(f"{where}: options {sorted(_UDP_ONLY & set(opts))} need 'udp'")
    if "udp" in opts and {"split", "at", "conn"} & set(opts):
        raise CaseError(f"{where}: split/at/conn do not apply to udp steps")
    return opts


def parse_file(path):
    stem = os.path.splitext(os.path.basename(path))[0]
    cases = []
    cur = None
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    for lineno, raw in enumerate(lines, 1):
        where = f"{os.path.basename(path)}:{lineno}"
        line = raw.rstrip()
        s = line.lstrip()
        if not s or s.startswith("#"):
            continue
        if s.startswith("case "):
            name = s[5:].strip()
            if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
                raise CaseError(f"{where}: bad case name {name!r}")
            cur = Case(f"{stem}.{name}", path, lineno)
            cases.append(cur)
            continue
        if cur is None:
            raise CaseError(f"{where}: text before the first 'case' line")
        if s.startswith(">"):
            rest = s[1:]
            opts = {}
            if rest.startswith("["):
                end = rest.find("]")
                if end < 0:
                    raise CaseError(f"{where}: unclosed [options]")
                opts = _parse_opts(rest[1:end], where)
                rest = rest[end + 1:]
            if rest.startswith(" "):
                rest = rest[1:]
            cur.steps.append(Step("send", where, Template(rest, where), opts))
            continue
        if s.startswith("+"):
            rest = s[1:]
            if rest.startswith(" "):
                rest = rest[1:]
            if not cur.steps or cur.steps[-1].kind != "send":
                raise CaseError(f"{where}: '+' continuation without a preceding '>' step")
            st = cur.steps[-1]
            more = Template(rest, where)
            st.template.parts += more.parts
            st.texts.append(rest)
            continue
        m = re.match(r"^reconnect(?:\s+([0-9]+))?$", s)
        if m:
            cur.steps.append(Step("reconnect", where, opts={"conn": int(m.group(1) or 1)}))
            continue
        m = re.match(r"^sleep\s+([0-9.]+)$", s)
        if m:
            cur.steps.append(Step("sleep", where, seconds=float(m.group(1))))
            continue
        if s == "tick":
            cur.steps.append(Step("tick", where))
            continue
        m = re.match(r"^([a-z-]+):\s*(.*)$", s)
        if not m:
            raise CaseError(f"{where}: cannot parse line {s!r}")
        key, val = m.group(1), m.group(2).strip()
        if key == "doc":
            cur.doc = (cur.doc + " " + val).strip()
        elif key == "server":
            cur.server += val.split()
        elif key == "group":
            cur.group = val
        elif key == "prelude":
            if val not in ("none", "flush_all"):
                raise CaseError(f"{where}: prelude must be 'none' or 'flush_all'")
            cur.prelude = val == "flush_all"
        elif key == "skip":
            cur.skip = val or "no reason given"
        elif key == "skip-both":
            cur.skip_both = val or "no reason given"
        elif key == "stats":
            words = val.split()
            if not words or words[0] not in ("names", "values", "except"):
                raise CaseError(f"{where}: stats: names | values PAT... | except PAT...")
            cur.stats = (words[0], words[1:])
        elif key == "order":
            cur.order = {"first": -1, "last": 1}.get(val)
            if cur.order is None:
                raise CaseError(f"{where}: order must be first or last")
        else:
            raise CaseError(f"{where}: unknown key {key!r}")
    return cases


def load_cases(pattern="*.txt"):
    cases = []
    for path in sorted(glob.glob(os.path.join(CASES_DIR, pattern))):
        cases += parse_file(path)
    names = set()
    for c in cases:
        if c.name in names:
            raise CaseError(f"duplicate case name {c.name}")
        names.add(c.name)
        if not c.steps and not c.skip:
            raise CaseError(f"{c.name}: no steps")
        if c.prelude and "-F" in c.server:
            raise CaseError(f"{c.name}: with -F (flush_all disabled) the case needs 'prelude: none' "
                            f"and unique keys")
        if c.has_sleep:
            # Cases with sleeps run concurrently with each other (see
            # run_cases_concurrently), so they must not flush the shared server.
            c.prelude = False
            uses_flush = any(b"flush_all" in b"".join(p for p in s.template.parts if isinstance(p, bytes))
                             for s in c.steps if s.kind == "send")
            if uses_flush and c.group != "fresh":
                raise CaseError(f"{c.name}: a sleeping case that sends flush_all needs 'group: fresh'")
    cases.sort(key=lambda c: c.order)  # stable: file order otherwise
    return cases
