"""Conformance harness: parse case files, replay them over TCP and UDP, normalise, compare.

Everything the suite does lives here; test_conformance.py, conftest.py and
run.py are thin wrappers.  The case-file format and the normalisations are
documented in README.md (keep the two in sync).
"""
import fnmatch
import glob
import os
import re
import socket
import struct
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # tests/ -> import support.servers
from support import servers  # noqa: E402
from support.tls import ThreadSafeTlsSocket  # noqa: E402

CASES_DIR = os.path.join(HERE, "cases")

# Every server is started with these unless the case passes its own -m / -t.
BASE_ARGS = {"-m": "64", "-t": "4"}

SENTINEL = b"version\r\n"
SENTINEL_RE = re.compile(rb"(?:\A|(?<=\n))VERSION [^\r\n]*\r\n\Z")
CLOSED = b"<closed>"
NO_SENTINEL = b"<no-sentinel>"

IDLE_S = 0.15           # idle read: reply is complete after this long without new bytes
IDLE_CAP_S = 3.0        # idle read: overall cap
SENTINEL_IDLE_S = 1.0   # sentinel read: give up after this long without new bytes
SENTINEL_CAP_S = 10.0   # sentinel read: overall cap (multi-megabyte values)
DEFAULT_PAUSE_MS = 10   # pause between the writes of a split send

TARGETS = ("both", "memcached-self", "memcached", "osmium")


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


# --------------------------------------------------------------------------
# Talking to a server
# --------------------------------------------------------------------------

class Reply:
    """One step's reply. kind: 'text' or 'binary' (the connection's protocol),
    'udp' (dgrams holds the datagrams; data is their raw rendering) or 'norm'."""
    __slots__ = ("data", "closed", "no_sentinel", "kind", "dgrams")

    def __init__(self, data=b"", closed=False, no_sentinel=False, kind="text", dgrams=None):
        self.data = data
        self.closed = closed
        self.no_sentinel = no_sentinel
        self.kind = kind
        self.dgrams = dgrams

    def raw(self):
        return self.data + (CLOSED if self.closed else b"") + (NO_SENTINEL if self.no_sentinel else b"")


def _chunks(payload, opts):
    if "at" in opts:
        cuts = [0] + [a for a in opts["at"] if 0 < a < len(payload)] + [len(payload)]
        return [payload[a:b] for a, b in zip(cuts, cuts[1:]) if b > a]
    if "split" in opts:
        n = max(1, opts["split"])
        return [payload[i:i + n] for i in range(0, len(payload), n)]
    return [payload] if payload else []


# Servers of a TLS pool: their port and the client context to reach them.
TLS_PORTS = {}


def _connect(address, timeout):
    """A client socket to a server: TLS when the server is one of a TLS
    pool's (the conformance suite run over TLS)."""
    sock = socket.create_connection(address, timeout=timeout)
    ctx = TLS_PORTS.get(address[1])
    if ctx is not None:
        # The exchange sends from one thread while it reads in another.
        sock = ThreadSafeTlsSocket(sock, ctx)
    return sock


class Connection:
    def __init__(self, address, proto=None):
        self.sock = _connect(address, timeout=5)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.closed = False
        # 'text' or 'binary': fixed by the server's -B, else decided by the
        # first byte sent (0x80 = binary), as memcached negotiates.
        self.proto = proto

    @classmethod
    def dead(cls):
        c = cls.__new__(cls)
        c.sock = socket.socket()
        c.closed = True
        c.proto = None
        return c

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def exchange(self, payload, opts):
        """Send payload (maybe in pieces), then read the reply per opts."""
        if self.proto is None and payload:
            self.proto = "binary" if payload[0] == 0x80 else "text"
        kind = self.proto or "text"
        binary = kind == "binary"
        sentinel = BIN_SENTINEL if binary else SENTINEL
        if self.closed:
            return Reply(b"", closed=True, kind=kind)
        idle = "idle" in opts
        noread = "noread" in opts
        pieces = _chunks(payload, opts)
        pause = opts.get("pause", DEFAULT_PAUSE_MS) / 1000.0
        use_sentinel = not idle and not noread
        done = threading.Event()
        send_err = []

        def writer():
            try:
                for i, p in enumerate(pieces):
                    if i:
                        time.sleep(pause)
                    self.sock.sendall(p)
                if "wait" in opts:
                    time.sleep(opts["wait"] / 1000.0)
                if use_sentinel:
                    self.sock.sendall(sentinel)
            except OSError as e:
                send_err.append(e)
            finally:
                done.set()

        self.sock.settimeout(None)
        t = threading.Thread(target=writer, daemon=True)
        t.start()
        if noread:
            t.join()
            return None
        buf = bytearray()
        closed = False
        # If the payload itself may contain a version command, the first
        # "VERSION x" at the end of the buffer may be its reply rather than the
        # sentinel's: then read on until the line is followed by nothing for
        # IDLE_S and strip only the last one.
        sentinel_fast = use_sentinel and (binary or b"version" not in payload)
        if sentinel_fast:
            idle_s, cap_s = SENTINEL_IDLE_S, SENTINEL_CAP_S
        elif use_sentinel:
            idle_s, cap_s = IDLE_S, SENTINEL_CAP_S
        else:
            idle_s = (opts["idle"] / 1000.0) if opts.get("idle") not in (None, True) else IDLE_S
            cap_s = IDLE_CAP_S
        start = None
        last_rx = None
        while True:
            now = time.monotonic()
            if sentinel_fast and done.is_set() and (
                    bin_sentinel_done(buf) if binary else SENTINEL_RE.search(buf[-300:])):
                break
            if done.is_set():
                if start is None:
                    start = now
                ref = max(start, last_rx or start)
                remaining = min(ref + idle_s - now, start + cap_s - now)
                if remaining <= 0:
                    break
                timeout = remaining
            else:
                timeout = 0.02
            self.sock.settimeout(timeout)
            try:
                d = self.sock.recv(1 << 20)
            except socket.timeout:
                continue
            except (ConnectionResetError, BrokenPipeError, ConnectionAbortedError):
                closed = True
                break
            if not d:
                closed = True
                break
            buf += d
            last_rx = time.monotonic()
        t.join()
        if closed:
            self.closed = True
        data = bytes(buf)
        no_sentinel = False
        if use_sentinel and not closed:
            if binary:
                if bin_sentinel_done(data):
                    data = data[:-len(BIN_SENTINEL_REPLY)]
                else:
                    no_sentinel = True
            else:
                m = SENTINEL_RE.search(data[-300:])
                if m:
                    data = data[:len(data) - (len(m.group(0)))]
                else:
                    no_sentinel = True
        return Reply(data, closed=closed, no_sentinel=no_sentinel, kind=kind)


UDP_GRACE_S = 0.03      # udp read: after a complete message, wait this long for more datagrams
UDP_HEADER = struct.Struct(">HHHH")   # request id, sequence number, datagram count, reserved


def render_dgram(d, payload=None):
    """A datagram as bytes for comparison: its 8-byte frame header spelled out, then the payload."""
    if len(d) < 8:
        return b"<udp short " + d.hex().encode() + b">"
    rid, seq, total, rsv = UDP_HEADER.unpack(d[:8])
    return (b"<udp id=%d seq=%d total=%d rsv=%d>" % (rid, seq, total, rsv)
            + (d[8:] if payload is None else payload))


class UdpClient:
    """One client UDP socket, connected to the server's UDP port."""

    def __init__(self, address):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.connect(address)
        self.next_rid = 1

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def _recv_pending(self, dgrams):
        """Add datagrams that are already queued (no waiting)."""
        self.sock.setblocking(False)
        try:
            while True:
                dgrams.append(self.sock.recv(1 << 17))
        except (BlockingIOError, ConnectionRefusedError):
            pass
        finally:
            self.sock.setblocking(True)

    def exchange(self, payload, opts):
        rid = opts.get("rid")
        if rid is None:
            rid = self.next_rid
        self.next_rid = (rid + 1) & 0xFFFF
        if "noframe" not in opts:
            payload = UDP_HEADER.pack(rid, opts.get("seq", 0), opts.get("total", 1),
                                      opts.get("rsv", 0)) + payload
        refused = False
        try:
            self.sock.send(payload)
        except ConnectionRefusedError:
            refused = True
        if "wait" in opts:
            time.sleep(opts["wait"] / 1000.0)
        if "noread" in opts:
            return None
        dgrams = []
        idle_s = (opts["idle"] / 1000.0) if opts.get("idle") not in (None, True) else IDLE_S
        use_idle = "idle" in opts
        start = time.monotonic()
        last = start
        complete_at = None
        while not refused:
            now = time.monotonic()
            if complete_at is None and not use_idle and _udp_complete(dgrams, rid):
                complete_at = now
            if complete_at is not None:
                deadline = complete_at + UDP_GRACE_S
            else:
                deadline = last + idle_s
            deadline = min(deadline, start + IDLE_CAP_S)
            if now >= deadline:
                break
            self.sock.settimeout(deadline - now)
            try:
                dgrams.append(self.sock.recv(1 << 17))
                last = time.monotonic()
            except socket.timeout:
                continue
            except ConnectionRefusedError:
                refused = True
        data = b"".join(render_dgram(d) for d in dgrams) + (b"<udp-refused>" if refused else b"")
        return Reply(data, kind="udp", dgrams=dgrams)


def _udp_complete(dgrams, rid):
    """True when every datagram of the (first) reply message to request rid is in."""
    seqs = set()
    total = None
    for d in dgrams:
        if len(d) >= 8:
            r, seq, tot, _ = UDP_HEADER.unpack(d[:8])
            if r == rid:
                seqs.add(seq)
                total = tot if total is None else total
    return total is not None and len(seqs) >= total


class TickWatcher:
    """Watches one server's clock (the `time` stat) from a private connection
    while somebody waits for the clock to advance; see the `tick` step."""

    POLL_S = 0.004

    def __init__(self, address):
        self.address = address
        self.cond = threading.Condition()
        self.ticks = 0
        # The server's `time` when the last tick was seen, and when (monotonic).
        self.tick_time = None
        self.waiting = 0
        self.stopped = False
        self.thread = None

    def _stat_time(self, sock):
        sock.sendall(b"stats\r\n")
        buf = b""
        while not buf.endswith(b"END\r\n"):
            d = sock.recv(65536)
            if not d:
                raise OSError("connection closed")
            buf += d
        m = re.search(rb"\r\nSTAT time (\d+)\r\n", buf)
        return int(m.group(1)) if m else None

    def _run(self):
        sock = None
        last = None
        while True:
            with self.cond:
                while not self.waiting and not self.stopped:
                    last = None  # the clock may advance unseen while nobody waits
                    self.cond.wait()
                if self.stopped:
                    break
            try:
                if sock is None:
                    sock = _connect(self.address, timeout=3)
                t = self._stat_time(sock)
            except OSError:
                if sock:
                    sock.close()
                sock = None
                time.sleep(0.05)
                continue
            if last is not None and t != last:
                with self.cond:
                    self.ticks += 1
                    self.tick_time = (t, time.monotonic())
                    self.cond.notify_all()
            last = t
            time.sleep(self.POLL_S)
        if sock:
            sock.close()

    def wait(self, timeout=2.5):
        """Block until the server's clock advances (at most timeout seconds)."""
        with self.cond:
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, daemon=True)
                self.thread.start()
            # The watcher only counts changes it saw from a reading taken
            # while this waiter was registered, so a tick is a fresh one.
            self.waiting += 1
            self.cond.notify_all()
            target = self.ticks + 1
            deadline = time.monotonic() + timeout
            try:
                while self.ticks < target and not self.stopped:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return False
                    self.cond.wait(left)
                return True
            finally:
                self.waiting -= 1

    def stop(self):
        with self.cond:
            self.stopped = True
            self.cond.notify_all()


def _read_exact_line(sock, expect, timeout=3.0):
    sock.settimeout(timeout)
    buf = b""
    deadline = time.monotonic() + timeout
    while len(buf) < len(expect) and time.monotonic() < deadline:
        try:
            d = sock.recv(4096)
        except socket.timeout:
            break
        if not d:
            break
        buf += d
    return buf


BIN_FLUSH = struct.pack(">BBHBBHIIQ", 0x80, 0x08, 0, 0, 0, 0, 0, 0, 0)
BIN_FLUSH_OK = struct.pack(">BBHBBHIIQ", 0x81, 0x08, 0, 0, 0, 0, 0, 0, 0)


def _prelude(case, conn, address):
    """flush_all before the case: in text on connection 1, or in binary when
    the server only speaks binary (-B binary), or on a separate text
    connection when connection 1 is going to speak binary."""
    if case.binding_protocol() == "binary":
        conn.sock.sendall(BIN_FLUSH)
        got = _read_exact_line(conn.sock, BIN_FLUSH_OK)
        if got != BIN_FLUSH_OK:
            raise CaseError(f"{case.name}: binary prelude flush got {got!r} from {address}")
        return
    first = next((s for s in case.steps if s.kind == "send" and "udp" not in s.opts
                  and s.opts.get("conn", 1) == 1), None)
    side = None
    if first is not None and case.binding_protocol() is None and first.template.parts:
        p0 = first.template.parts[0]
        if (isinstance(p0, tuple) and p0[0] == "bin") or (isinstance(p0, bytes) and p0[:1] == b"\x80"):
            side = Connection(address)
    sock = (side or conn).sock
    try:
        sock.sendall(b"flush_all\r\n")
        got = _read_exact_line(sock, b"OK\r\n")
    finally:
        if side:
            side.close()
    if got != b"OK\r\n":
        raise CaseError(f"{case.name}: prelude 'flush_all' got {got!r} from {address}")


def run_case_on(case, server):
    """Replay one case on one server; returns a list of (step_index, Reply)."""
    address = server.address
    proto = case.binding_protocol()
    conns = {1: Connection(address, proto)}
    udps = {}
    out = []
    ctx = {"cas": []}
    try:
        if case.prelude:
            _prelude(case, conns[1], address)
        for i, step in enumerate(case.steps):
            if step.kind == "sleep":
                time.sleep(step.seconds)
                continue
            if step.kind == "tick":
                if server.tick_watcher.wait():
                    ctx["tick"] = server.tick_watcher.tick_time
                continue
            if "udp" in step.opts:
                n = step.opts["udp"]
                if n not in udps:
                    udps[n] = UdpClient(server.udp_address)
                r = udps[n].exchange(step.template.expand(ctx), step.opts)
                if r is not None:
                    out.append((i, r))
                    _capture_cas(ctx, r)
                continue
            n = step.opts.get("conn", 1)
            if step.kind == "reconnect":
                if n in conns:
                    conns[n].close()
                try:
                    conns[n] = Connection(address, proto)
                    out.append((i, Reply(b"<connected>")))
                except OSError:
                    conns[n] = Connection.dead()
                    out.append((i, Reply(b"<refused>")))
                continue
            if n not in conns:
                conns[n] = Connection(address, proto)
            payload = step.template.expand(ctx)
            r = conns[n].exchange(payload, step.opts)
            if r is None:  # noread: its reply is read with the next step
                continue
            out.append((i, r))
            _capture_cas(ctx, r)
    finally:
        for c in list(conns.values()) + list(udps.values()):
            c.close()
    return out


def _capture_cas(ctx, reply):
    for cas in reply_cas_values(reply):
        if cas != b"0" and cas not in ctx["cas"]:
            ctx["cas"].append(cas)


# --------------------------------------------------------------------------
# Normalisation
# --------------------------------------------------------------------------

_VALUE_RE = re.compile(rb"^VALUE ([^ \r\n]+) (\d+) (\d+)(?: (\d+))?\r\n\Z")
_VA_RE = re.compile(rb"^VA (\d+)(?: [^\r\n]*)?\r\n\Z")
_META_RE = re.compile(rb"^(?:VA \d+|HD|EN|NF|NS|EX|MN)(?P<flags>(?: [^ \r\n]*)*)\r\n\Z")
_META_CAS_RE = re.compile(rb"(?<= c)(\d+)(?= |\r)")
_ME_RE = re.compile(rb"^ME [^\r\n]*\r\n\Z")
_ME_CAS_RE = re.compile(rb"(?<= cas=)(\d+)(?= |\r)")
_VERSION_RE = re.compile(rb"^VERSION [^\r\n]*\r\n\Z")
_STAT_RE = re.compile(rb"^STAT ([^ \r\n]+) ([^\r\n]*)\r\n\Z")
_BIN_HEADER = struct.Struct(">BBHBBHIIQ")


def segments(data):
    """Split a text reply into ('line', bytes) and ('data', bytes) pieces.

    VALUE and VA headers are followed by their data block (plus \\r\\n),
    which is never interpreted as lines, so a value containing
    "\\r\\nEND\\r\\n" or "VERSION x" is left alone.
    """
    pos = 0
    n = len(data)
    while pos < n:
        nl = data.find(b"\n", pos)
        if nl < 0:
            yield ("line", data[pos:])
            return
        line = data[pos:nl + 1]
        yield ("line", line)
        pos = nl + 1
        m = _VALUE_RE.match(line)
        if m:
            size = int(m.group(3)) + 2
        else:
            m = _VA_RE.match(line)
            size = int(m.group(1)) + 2 if m else None
        if size is not None:
            yield ("data", data[pos:pos + size])
            pos += size


def _line_cas_spans(line):
    """(start, end) of every CAS unique in a text reply line, in order."""
    m = _VALUE_RE.match(line)
    if m:
        return [m.span(4)] if m.group(4) is not None else []
    m = _META_RE.match(line)
    if m:
        off = m.start("flags")
        return [(off + c.start(1), off + c.end(1)) for c in _META_CAS_RE.finditer(m.group("flags") + b"\r")]
    if _ME_RE.match(line):
        return [c.span(1) for c in _ME_CAS_RE.finditer(line)]
    return []


def _text_cas_values(data):
    for kind, seg in segments(data):
        if kind == "line":
            for a, b in _line_cas_spans(seg):
                yield seg[a:b]


def _bin_cas_values(data):
    for p in bin_packets(data)[0]:
        cas = _BIN_HEADER.unpack(p[:24])[8]
        if cas:
            yield str(cas).encode()


def _payload_cas_values(payload):
    if payload[:1] == b"\x81":
        return _bin_cas_values(payload)
    return _text_cas_values(payload)


def reply_cas_values(reply):
    """The CAS uniques in a reply, in order (decimal bytes), as {casN} sees them."""
    if reply.kind == "binary":
        return list(_bin_cas_values(reply.data))
    if reply.kind == "udp":
        return [c for d in reply.dgrams for c in _payload_cas_values(d[8:])]
    return list(_text_cas_values(reply.data))


# Stats osmium reports that memcached 1.6.45 has no name for: how its
# segments hold live and dead bytes and how they are cleaned (`stats`), and
# the cleaner's and the workers' idle polling settings and where /metrics
# listens (`stats settings`). In cases with a `stats:` line
# these lines are left out of every server's reply (memcached never sends
# them), so names and order are compared over memcached's own stats.
# Exact names, not patterns: a new stat is added here on purpose.
OSMIUM_OWN_STATS = frozenset(name.encode() for name in (
    "live_bytes", "dead_bytes", "segments_free", "segments_compacted",
    "compact_items_moved", "compact_bytes_copied", "compact_writer_runs",
    "compact_aborted", "segments_evicted", "evicted_live_bytes",
    "reclaimed_dead_bytes",
    "compact_policy", "compact_threshold", "compact_reserve", "compact_background",
    "idle_spin", "metrics_addr", "osmium_version",
))


def _stat_keep_value(case, name):
    mode, pats = case.stats
    name = name.decode("latin-1")
    hit = any(fnmatch.fnmatchcase(name, p) for p in pats)
    if mode == "names":
        return False
    if mode == "values":
        return hit
    return not hit  # except


def _cas_tag(casmap, cas):
    if cas not in casmap:
        casmap[cas] = b"<cas%d>" % (len(casmap) + 1)
    return casmap[cas]


def _norm_text(case, data, casmap):
    parts = []
    for kind, seg in segments(data):
        if kind == "line":
            spans = [(a, b) for a, b in _line_cas_spans(seg) if seg[a:b] != b"0"]
            if spans:
                out = bytearray()
                pos = 0
                for a, b in spans:
                    out += seg[pos:a] + _cas_tag(casmap, seg[a:b])
                    pos = b
                seg = bytes(out + seg[pos:])
            elif _VERSION_RE.match(seg):
                seg = b"VERSION <version>\r\n"
            elif case.stats is not None:
                sm = _STAT_RE.match(seg)
                if sm and sm.group(1) in OSMIUM_OWN_STATS:
                    continue
                if sm and not _stat_keep_value(case, sm.group(1)):
                    seg = b"STAT " + sm.group(1) + b" <v>\r\n"
        parts.append(seg)
    return b"".join(parts)


def _norm_binary(case, data, casmap):
    """Binary replies, one packet per line with every header field spelled out.

    Lossless apart from the normalisations: a non-zero CAS becomes <casN>; the
    value of a VERSION reply becomes <version>; STAT values follow the case's
    `stats:` line. Where a value is normalised, its bodylen shows <n>.
    """
    pkts, rest = bin_packets(data)
    out = []
    for p in pkts:
        magic, op, kl, el, dt, status, bl, opaque, cas = _BIN_HEADER.unpack(p[:24])
        body = p[24:]
        cas_s = _cas_tag(casmap, str(cas).encode()) if cas else b"0"
        bl_s = b"%d" % bl
        if el + kl <= bl:
            extras, key, value = body[:el], body[el:el + kl], body[el + kl:]
            if op == 0x10 and case.stats is not None and key in OSMIUM_OWN_STATS:
                continue
            if op == 0x0b and status == 0:
                value, bl_s = b"<version>", b"<n>"
            elif op == 0x10 and kl and case.stats is not None and not _stat_keep_value(case, key):
                value, bl_s = b"<v>", b"<n>"
            fields = b" extras=" + extras.hex().encode() + b" key=" + key + b" value=" + value
        else:
            fields = b" body=" + body
        out.append(b"[magic=%02x op=%02x keylen=%d extlen=%d dt=%02x status=%04x bodylen=%s "
                   b"opaque=%08x cas=%s%s]\n" % (magic, op, kl, el, dt, status, bl_s, opaque,
                                                cas_s, fields))
    if len(rest) >= 24:
        # A packet cut short (e.g. by the end of a UDP datagram): its header
        # is whole, so its CAS is normalised like any other.
        magic, op, kl, el, dt, status, bl, opaque, cas = _BIN_HEADER.unpack(rest[:24])
        cas_s = _cas_tag(casmap, str(cas).encode()) if cas else b"0"
        out.append(b"[partial magic=%02x op=%02x keylen=%d extlen=%d dt=%02x status=%04x "
                   b"bodylen=%d opaque=%08x cas=%s body=%s]\n"
                   % (magic, op, kl, el, dt, status, bl, opaque, cas_s, rest[24:].hex().encode()))
    elif rest:
        out.append(b"[partial " + rest.hex().encode() + b"]\n")
    return b"".join(out)


def _norm_udp(case, reply, casmap):
    if case.stats is not None:
        return _norm_udp_messages(case, reply, casmap)
    out = []
    for d in reply.dgrams:
        payload = d[8:]
        if payload[:1] == b"\x81":
            payload = _norm_binary(case, payload, casmap)
        else:
            payload = _norm_text(case, payload, casmap)
        out.append(render_dgram(d, payload))
    if reply.data.endswith(b"<udp-refused>"):
        out.append(b"<udp-refused>")
    return b"".join(out)


def _norm_udp_messages(case, reply, casmap):
    """UDP replies in cases with a `stats:` line: the datagrams of each reply are
    put back together (in sequence order) and normalised as one message, since
    where stats values split into datagrams depends on the values' lengths.
    The header shows the request id and whether the sequence numbers were
    complete (0..n-1, all carrying n as the count)."""
    messages = []
    by_id = {}
    for d in reply.dgrams:
        if len(d) < 8:
            messages.append(("short", d))
            continue
        rid = UDP_HEADER.unpack(d[:8])[0]
        if rid not in by_id:
            by_id[rid] = []
            messages.append(("msg", rid))
        by_id[rid].append(d)
    out = []
    for kind, v in messages:
        if kind == "short":
            out.append(render_dgram(v))
            continue
        ds = sorted(by_id[v], key=lambda d: UDP_HEADER.unpack(d[:8])[1])
        hdrs = [UDP_HEADER.unpack(d[:8]) for d in ds]
        whole = ([h[1] for h in hdrs] == list(range(len(ds)))
                 and all(h[2] == len(ds) and h[3] == 0 for h in hdrs))
        payload = b"".join(d[8:] for d in ds)
        payload = (_norm_binary(case, payload, casmap) if payload[:1] == b"\x81"
                   else _norm_text(case, payload, casmap))
        out.append(b"<udp id=%d message %s>" % (v, b"complete" if whole else b"INCOMPLETE") + payload)
    if reply.data.endswith(b"<udp-refused>"):
        out.append(b"<udp-refused>")
    return b"".join(out)


def normalise(case, replies):
    """Apply the normalisations listed in README.md to one server's replies."""
    casmap = {}
    out = []
    for idx, r in replies:
        if r.kind == "binary":
            data = _norm_binary(case, r.data, casmap)
        elif r.kind == "udp":
            data = _norm_udp(case, r, casmap)
        else:
            data = _norm_text(case, r.data, casmap)
        out.append((idx, Reply(data, r.closed, r.no_sentinel, kind="norm")))
    return out


# --------------------------------------------------------------------------
# Comparison
# --------------------------------------------------------------------------

def first_diff(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b)) if len(a) != len(b) else -1


def _clip(b, off, width=300):
    if len(b) <= 2 * width + 100:
        return repr(b)
    lo = max(0, off - width)
    hi = min(len(b), off + width)
    return (f"({len(b)} bytes; showing [{lo}:{hi}]) "
            + ("..." if lo else "") + repr(b[lo:hi]) + ("..." if hi < len(b) else ""))


def compare(case, names, res_a, res_b):
    """Return None when equal, else a human-readable failure message."""
    na, nb = names
    a = normalise(case, res_a)
    b = normalise(case, res_b)
    for (ia, ra), (ib, rb) in zip(a, b):
        x, y = ra.raw(), rb.raw()
        if x != y:
            off = first_diff(x, y)
            step = case.steps[ia]
            return (f"case {case.name} ({os.path.basename(case.path)}:{case.line}) differs at step "
                    f"{ia + 1} [{step.where}]: {step.describe()}\n"
                    f"  first differing offset: {off}\n"
                    f"  {na:>10}: {_clip(x, off)}\n"
                    f"  {nb:>10}: {_clip(y, off)}")
    if len(a) != len(b):
        return f"case {case.name}: {na} produced {len(a)} replies, {nb} produced {len(b)}"
    return None


def transcript(case, res, normalised=True):
    lines = []
    rs = normalise(case, res) if normalised else res
    by_idx = dict(rs)
    for i, step in enumerate(case.steps):
        lines.append(f"  {step.describe()}")
        if i in by_idx:
            lines.append(f"    <- {by_idx[i].raw()!r}"[:2000])
    return "\n".join(lines)


# --------------------------------------------------------------------------
# Servers
# --------------------------------------------------------------------------

class _Drained:
    """Keep a server's stderr pipe drained (verbosity output must never block it)."""

    def __init__(self, server):
        self.server = server
        self.tail = bytearray()
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self):
        try:
            while True:
                d = self.server.proc.stderr.read1(65536)
                if not d:
                    return
                self.tail += d
                del self.tail[:-65536]
        except (ValueError, OSError):
            return


def target_kinds(target):
    if target == "both":
        return ("memcached", "osmium")
    if target == "memcached-self":
        return ("memcached", "memcached")
    if target == "memcached":
        return ("memcached",)
    if target == "osmium":
        return ("osmium",)
    raise ValueError(f"unknown target {target!r}; one of {TARGETS}")


def osmium_missing():
    b = servers.OSMIUM_BIN
    if not (os.path.isfile(b) and os.access(b, os.X_OK)):
        return b
    return None


class Pool:
    """One server per (kind slot, flag set, group), started lazily; with
    `certs` (support.tls.Certs), every server speaks TLS (`-Z`) and the
    cases run over it."""

    def __init__(self, target, certs=None):
        self.certs = certs
        self.target = target
        self.kinds = target_kinds(target)
        self.servers = {}
        self.stopping = []
        self.lock = threading.Lock()

    def get(self, case):
        key = case.server_key()
        with self.lock:
            if key not in self.servers:
                started = []
                try:
                    for kind in self.kinds:
                        tls = self.certs.server_args(ca=False) if self.certs else []
                        srv = servers.Server(kind, list(key[0]) + tls,
                                             udp_port="auto" if key[1].endswith("+udp") else None)
                        # A port a stopped TLS server had may come back
                        # to a plain one: the map says what it is now.
                        if self.certs:
                            TLS_PORTS[srv.port] = self.certs.client_context()
                        else:
                            TLS_PORTS.pop(srv.port, None)
                        srv._drain = _Drained(srv)
                        srv.tick_watcher = TickWatcher(srv.address)
                        started.append(srv)
                except Exception:
                    for s in started:
                        s.stop()
                    raise
                self.servers[key] = started
            return self.servers[key]

    def release(self, case):
        """Stop a case's private ("group: fresh") servers, in the background:
        memcached takes about a second to exit after SIGTERM."""
        key = case.server_key()
        if key[1].startswith("fresh:"):
            with self.lock:
                pair = self.servers.pop(key, [])
            for srv in pair:
                srv.tick_watcher.stop()
                TLS_PORTS.pop(srv.port, None)
                t = threading.Thread(target=srv.stop, daemon=True)
                t.start()
                self.stopping.append(t)

    def stop_all(self):
        with self.lock:
            pairs = list(self.servers.values())
            self.servers.clear()
        for pair in pairs:
            for srv in pair:
                srv.tick_watcher.stop()
                TLS_PORTS.pop(srv.port, None)
        threads = [threading.Thread(target=srv.stop) for pair in pairs for srv in pair]
        for t in threads:
            t.start()
        for t in threads + self.stopping:
            t.join()


def labels(target):
    kinds = target_kinds(target)
    if len(kinds) == 2 and kinds[0] == kinds[1]:
        return (kinds[0] + "#1", kinds[1] + "#2")
    return kinds


def run_case(pool, case):
    """Run one case on every server of the target concurrently; returns results per server."""
    srvs = pool.get(case)
    try:
        with ThreadPoolExecutor(len(srvs)) as ex:
            futs = [ex.submit(run_case_on, case, s) for s in srvs]
            return [f.result() for f in futs]
    finally:
        pool.release(case)


def run_cases_concurrently(pool, cases):
    """Run many cases at once (used for the cases that sleep): {name: results}."""
    out = {}
    if not cases:
        return out
    with ThreadPoolExecutor(len(cases)) as ex:
        futs = {c.name: ex.submit(_safe_run, pool, c) for c in cases}
        for name, f in futs.items():
            out[name] = f.result()
    return out


def _safe_run(pool, case):
    try:
        return run_case(pool, case)
    except Exception as e:  # reported by the test item of that case
        return e


def check(case, target, results):
    """Return None when the servers agree, else the failure message."""
    names = labels(target)
    if isinstance(results, Exception):
        raise results
    first = results[0]
    for idx, r in first:
        if r.no_sentinel and names[0].startswith("memcached"):
            raise CaseError(f"case {case.name}: memcached did not answer the sentinel after step "
                            f"{idx + 1} ({case.steps[idx].where}); the case is out of sync there: "
                            f"use >[idle] or >[noread] for that step.\n{transcript(case, first)}")
    if len(results) == 2:
        return compare(case, names, results[0], results[1])
    return None
