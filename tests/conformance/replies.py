"""What a server answered and how two answers are compared: a step's
Reply, datagrams rendered as bytes, the normalisations (CAS values, stats
that differ by nature) and the first difference (documented in README.md;
keep the two in sync)."""

import fnmatch
import os
import re
import struct

from case_format import bin_packets

CLOSED = b"<closed>"
NO_SENTINEL = b"<no-sentinel>"
UDP_HEADER = struct.Struct(">HHHH")   # request id, sequence number, datagram count, reserved


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


def render_dgram(d, payload=None):
    """A datagram as bytes for comparison: its 8-byte frame header spelled out, then the payload."""
    if len(d) < 8:
        return b"<udp short " + d.hex().encode() + b">"
    rid, seq, total, rsv = UDP_HEADER.unpack(d[:8])
    return (b"<udp id=%d seq=%d total=%d rsv=%d>" % (rid, seq, total, rsv)
            + (d[8:] if payload is None else payload))


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
# segments hold live and dead bytes and how they are cleaned, packed values
# that did not decode, the pack pass, its dictionaries and the packed items
# (in RAM and on flash), and the binary
# upgrades done and failed (`stats`), what holds item memory and
# the cleaner's and the workers' idle polling settings, where /metrics
# listens and the hot-key settings (`stats settings`). In cases with a `stats:` line
# these lines are left out of every server's reply (memcached never sends
# them), so names and order are compared over memcached's own stats.
# Exact names, not patterns: a new stat is added here on purpose.
OSMIUM_OWN_STATS = frozenset(name.encode() for name in (
    "live_bytes", "dead_bytes", "segments_free", "segments_compacted",
    "compact_items_moved", "compact_bytes_copied", "compact_writer_runs",
    "compact_aborted", "segments_evicted", "evicted_live_bytes",
    "reclaimed_dead_bytes", "compress_errors",
    "pack_segments", "pack_segments_not_worth", "pack_items", "pack_rejected",
    "pack_skipped", "pack_cpu_us", "pack_kept_raw", "pack_kept_packed", "pack_promoted",
    "packed_items", "packed_raw_bytes", "packed_bytes",
    "pack_dicts", "pack_dict_bytes", "pack_dict_trainings", "pack_dict_train_us",
    "packed_dict_items", "compress_dicts",
    "extstore_packed_items", "extstore_packed_raw_bytes", "extstore_packed_bytes",
    "extstore_pack_staged", "extstore_staged_bytes", "extstore_pack_rejected",
    "extstore_pack_skipped", "extstore_pack_cpu_us",
    "compact_policy", "compact_threshold", "compact_reserve", "compact_background",
    "compression", "item_memory", "upgrades", "upgrade_failures",
    "idle_spin", "metrics_addr", "osmium_version", "hotkeys_top", "hotkeys_sample",
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
