# memlyze.py - the memlyze heap profiler inside gdb (and, for its reading
# half, inside lldb: scripts/lldb/memlyze.py imports this file).
#
#   (gdb) source /usr/local/share/memlyze/gdb/memlyze.py
#   (gdb) memlyze status | snapshot [FILE] | top [N] | attach [--rate N] | detach
#
# The read-only commands (status, snapshot, top) execute no code in the
# inferior: they read the payload's tables through the debugger's memory API,
# so they work on a stopped live process and on a core file (the heap as it
# was when the process died). Everything about those tables - where they are
# and how they are laid out - comes from the `memlyze_info` descriptor the
# payload exports (payload/info.h); nothing here hard-codes an offset, and a
# descriptor of another version is refused.
#
# The file has two halves. The first is plain Python (no gdb): the descriptor,
# the heap-map scan with its consistency check, the .mlyze snapshot writer
# and the top-sites estimates; it talks to the debugger through a small
# "target" object (read, modules, symbolize). The second registers the gdb
# commands and implements that target with gdb's own memory, mappings and
# symbol tables, plus attach/detach through gdb's inferior calls.

import errno
import glob
import json
import math
import os
import re
import struct
import subprocess
import time

try:
    import gdb
except ImportError:          # imported by the lldb script or a test
    gdb = None

# ---------------------------------------------------------------------------
# The payload's descriptor (payload/info.h, struct memlyze_info)
# ---------------------------------------------------------------------------

INFO_SYMBOL = "memlyze_info"
INFO_MAGIC = b"MLZINFO\0"
CHECK_ALGORITHM = 2           # the check word heap_entry_check() implements

# The descriptor describes itself (payload/info.h, version 4 and later): its
# fixed head says where a table of its fields is, and every value below is
# read by name from that table. Only the head's layout is known here.
INFO_HEAD_FMT = "<8sIIQII"    # magic, version, size, fields_addr, nfields, field_size
INFO_HEAD_SIZE = struct.calcsize(INFO_HEAD_FMT)
INFO_FIRST_SELF_DESCRIBED = 4
FIELD_NAME_SIZE = 24          # struct memlyze_field: name[24], offset, width
INFO_SIZE_MAX, FIELDS_MAX = 4096, 128

# The fields these scripts use. A descriptor without one of them is refused.
INFO_NEEDED = (
    "ready_addr", "attached_addr", "rate_addr", "pid_addr", "mono_to_real_addr", "session_addr",
    "map_slots_addr", "map_mask_addr", "stack_recs_addr", "stack_frames_addr", "stack_next_id_addr",
    "counters_addr", "counter_names_addr",
    "entry_size", "entry_key", "entry_size_field", "entry_stack_id", "entry_tid_shift", "entry_time_ns",
    "entry_seq", "entry_check", "check_algorithm",
    "rec_size", "rec_ready", "rec_depth", "rec_frames_offset", "max_frames", "ncounters",
    "map_log2_max", "entry_size_min", "record_size_max", "counters_max",
)

HEAP_EMPTY, HEAP_RESERVED, HEAP_TOMBSTONE = 0, 1, (1 << 64) - 1
MAX_STACK_READ = 256          # as live/snapshot.c: deeper records are not trusted
MASK64 = (1 << 64) - 1


class MlzError(Exception):
    """A one-line error for the user."""


class NoPayload(MlzError):
    """memlyze_info is not in the program (attach may load it)."""


def _fmix64(h):
    h ^= h >> 33
    h = (h * 0xFF51AFD7ED558CCD) & MASK64
    h ^= h >> 33
    h = (h * 0xC4CEB9FE1A85EC53) & MASK64
    h ^= h >> 33
    return h


def heap_entry_check(key, size, stack_id, tid, time_ns, seq):
    """memlyze_check_word() of payload/info.h (check_algorithm 2)."""
    h = 0x6D6C7A6865617032
    h += key * 0xE3635A7FA9A7B469
    h += size * 0xDFDF6B53FB88D607
    h += (((stack_id & 0xFFFFFFFF) << 32) | (tid & 0xFFFFFFFF)) * 0xFDAA349F5741EBF1
    h += time_ns * 0xB1E4C0BB51AFCE77
    h += seq * 0xC8624383FEA3DD59
    return _fmix64(h & MASK64)


def _refuse(why):
    return MlzError("payload version differs from the scripts: " + why)


def parse_info_head(raw):
    """(version, size, fields_addr, nfields, field_size) of a descriptor's
    head; MlzError if it is not one these scripts can describe."""
    if len(raw) < INFO_HEAD_SIZE or raw[:8] != INFO_MAGIC:
        raise _refuse("memlyze_info has another magic")
    _, version, size, fields_addr, nfields, field_size = struct.unpack_from(INFO_HEAD_FMT, raw)
    if version < INFO_FIRST_SELF_DESCRIBED:
        raise _refuse("memlyze_info version %d predates the field table these scripts read; "
                      "use the scripts installed with that payload" % version)
    if not (INFO_HEAD_SIZE <= size <= INFO_SIZE_MAX and 0 < nfields <= FIELDS_MAX
            and FIELD_NAME_SIZE + 8 <= field_size <= 256):
        raise _refuse("memlyze_info version %d (%d bytes) has no field table these scripts can read"
                      % (version, size))
    return version, size, fields_addr, nfields, field_size


def parse_info(raw, table):
    """The descriptor's fields as a dict, read by name through its table.

    raw: the descriptor's size bytes; table: nfields entries of field_size
    bytes. MlzError if a field these scripts need is missing or a record
    layout is outside the bounds the descriptor itself gives."""
    version, size, _, nfields, field_size = parse_info_head(raw)
    if len(raw) < size or len(table) < nfields * field_size:
        raise MlzError("memlyze_info is cut short")
    d = {"version": version, "size": size}
    for k in range(nfields):
        e = table[k * field_size:(k + 1) * field_size]
        name = e[:FIELD_NAME_SIZE].split(b"\0", 1)[0].decode("ascii", "replace")
        off, width = struct.unpack_from("<II", e, FIELD_NAME_SIZE)
        if width not in (4, 8) or off < INFO_HEAD_SIZE or off + width > size:
            raise _refuse("memlyze_info v%d: field %s lies outside the descriptor" % (version, name))
        d[name] = int.from_bytes(raw[off:off + width], "little")
    missing = [n for n in INFO_NEEDED if n not in d]
    if missing:
        raise _refuse("memlyze_info version %d lacks the field %s" % (version, missing[0]))
    # Fields read below: 8 bytes for key/size/time/seq/check/frames_offset,
    # 4 for stack_id/tid/ready/depth. Anything outside its record means a
    # layout these scripts do not understand.
    es, rs, cap = d["entry_size"], d["rec_size"], d["record_size_max"]
    ok = (d["check_algorithm"] == CHECK_ALGORITHM and d["entry_size_min"] <= es <= cap and 0 < rs <= cap
          and cap <= INFO_SIZE_MAX and d["ncounters"] <= d["counters_max"] <= 4096 and d["map_log2_max"] < 64)
    for f, w in (("entry_key", 8), ("entry_size_field", 8), ("entry_stack_id", 4), ("entry_tid_shift", 4),
                 ("entry_time_ns", 8), ("entry_seq", 8), ("entry_check", 8)):
        ok = ok and d[f] + w <= es
    for f, w in (("rec_ready", 4), ("rec_depth", 4), ("rec_frames_offset", 8)):
        ok = ok and d[f] + w <= rs
    if not ok:
        raise _refuse("memlyze_info v%d describes a layout these scripts cannot read (check algorithm %d)"
                      % (version, d["check_algorithm"]))
    return d


# ---------------------------------------------------------------------------
# Reading the payload's tables through a target
#
# A target provides: read(addr, n) -> bytes (raises MlzMemory), is_core,
# describe() ("process 123" / "core file"), now_us() (the snapshot's time, or
# None if unknown), exe(), cmdline(),
# modules() -> [Module], symbolize(pc, module) -> [(func, file, line, inlined)].
# ---------------------------------------------------------------------------

class MlzMemory(Exception):
    def __init__(self, addr, n):
        Exception.__init__(self, "cannot read %d bytes at 0x%x" % (n, addr))
        self.addr, self.n = addr, n


class Module(object):
    __slots__ = ("path", "start", "end", "bias", "build_id")

    def __init__(self, path, start, end, bias, build_id):
        self.path, self.start, self.end, self.bias, self.build_id = path, start, end, bias, build_id


class Payload(object):
    """The payload's globals, read once through the descriptor."""

    def __init__(self, target, info_addr):
        self.t = target
        self.info_addr = info_addr
        try:
            # The head first: it says how much more there is to read.
            raw = target.read(info_addr, INFO_HEAD_SIZE)
            _, size, fields_addr, nfields, field_size = parse_info_head(raw)
            raw += target.read(info_addr + INFO_HEAD_SIZE, size - INFO_HEAD_SIZE)
            table = target.read(fields_addr, nfields * field_size)
        except MlzMemory:
            raise MlzError("cannot read memlyze_info at 0x%x%s" % (info_addr, self._where()))
        self.i = parse_info(raw, table)
        i = self.i
        try:
            self.ready = self.s32(i["ready_addr"])
            self.attached = self.s32(i["attached_addr"])
            self.rate = self.u64(i["rate_addr"])
            self.pid = self.s32(i["pid_addr"])
            self.mono_to_real = self.u64(i["mono_to_real_addr"])
            self.session = self.u64(i["session_addr"])
            self.slots = self.u64(i["map_slots_addr"])
            self.mask = self.u64(i["map_mask_addr"])
            self.recs = self.u64(i["stack_recs_addr"])
            self.frames = self.u64(i["stack_frames_addr"])
            self.next_id = self.u32(i["stack_next_id_addr"])
        except MlzMemory as e:
            raise MlzError("cannot read the payload's globals (%s)%s" % (e, self._where()))

    def _where(self):
        return " in this core file (it lacks the payload's data)" if self.t.is_core else ""

    def u64(self, a):
        return struct.unpack("<Q", self.t.read(a, 8))[0]

    def u32(self, a):
        return struct.unpack("<I", self.t.read(a, 4))[0]

    def s32(self, a):
        return struct.unpack("<i", self.t.read(a, 4))[0]

    def require_tables(self):
        if not self.ready or not self.slots:
            if self.t.is_core:
                raise MlzError("core file without the payload's tables (memlyze was loaded but not "
                               "sampling when the core was written)")
            raise MlzError("memlyze is loaded in %s but not attached (memlyze attach starts it)"
                           % self.t.describe())
        if self.mask >> self.i["map_log2_max"] or (self.mask + 1) & self.mask:
            raise MlzError("implausible heap map size (mask 0x%x)%s" % (self.mask, self._where()))

    def counters(self):
        """[(name, value)] of the payload's statistics."""
        i, out = self.i, []
        try:
            for k in range(i["ncounters"]):
                v = self.u64(i["counters_addr"] + 8 * k)
                name = read_cstring(self.t, self.u64(i["counter_names_addr"] + 8 * k)) or "c%d" % k
                out.append((name, v))
            # The heap map's drops (v8): a snapshot missing samples says so.
            if "map_full_drops_addr" in i:
                out.append(("map_capacity", self.u64(i["map_mask_addr"]) + 1))
                out.append(("map_full_drops", self.u64(i["map_full_drops_addr"])))
        except MlzMemory:
            pass
        return out

    def scan(self):
        """Every consistent published entry of the heap map, oldest first,
        as tuples (time_ns, key, size, stack_id, tid), plus the slot counts.
        The target is stopped (or a core): an inconsistent entry was caught
        mid-update and is skipped, as live/snapshot.c does after its
        re-reads."""
        i = self.i
        es, cap = i["entry_size"], self.mask + 1
        ko, so, sio, tio, to, qo, co = (i["entry_key"], i["entry_size_field"], i["entry_stack_id"],
                                        i["entry_tid_shift"], i["entry_time_ns"], i["entry_seq"], i["entry_check"])
        per = max(1, (1 << 20) // es)
        live, skipped, tombstones = [], 0, 0
        fast = ko % 8 == 0 and es % 8 == 0
        for base in range(0, cap, per):
            n = min(per, cap - base)
            try:
                data = self.t.read(self.slots + base * es, n * es)
            except MlzMemory as e:
                raise MlzError("cannot read the heap map (%s)%s" % (e, self._where()))
            if fast:
                keys = memoryview(data).cast("Q")[ko // 8::es // 8].tolist()
            else:
                keys = [struct.unpack_from("<Q", data, j * es + ko)[0] for j in range(n)]
            for j, key in enumerate(keys):
                if key == HEAP_EMPTY:
                    continue
                if key == HEAP_TOMBSTONE:
                    tombstones += 1
                    continue
                e = j * es
                size, check = struct.unpack_from("<Q", data, e + so)[0], struct.unpack_from("<Q", data, e + co)[0]
                sid, tid = struct.unpack_from("<I", data, e + sio)[0], struct.unpack_from("<I", data, e + tio)[0]
                tns, seq = struct.unpack_from("<Q", data, e + to)[0], struct.unpack_from("<Q", data, e + qo)[0]
                if key == HEAP_RESERVED or check != heap_entry_check(key, size, sid, tid, tns, seq) or \
                        tid >> TID_SHIFT_POS > RATE_SHIFT_MAX:
                    skipped += 1
                    continue
                live.append((tns, key, size, sid, tid))
        live.sort(key=lambda x: x[0])
        return live, {"capacity": cap, "skipped": skipped, "tombstones": tombstones}

    def stack(self, sid):
        """The PCs of stack sid (leaf first), or None if it cannot be read."""
        i = self.i
        if not (0 < sid < self.next_id):
            return None
        try:
            rec = self.t.read(self.recs + sid * i["rec_size"], i["rec_size"])
            ready = struct.unpack_from("<I", rec, i["rec_ready"])[0]
            depth = struct.unpack_from("<I", rec, i["rec_depth"])[0]
            foff = struct.unpack_from("<Q", rec, i["rec_frames_offset"])[0]
            if ready != 1 or depth > i["max_frames"] or depth > MAX_STACK_READ:
                return None
            if depth == 0:
                return []
            return list(struct.unpack("<%dQ" % depth, self.t.read(self.frames + foff * 8, depth * 8)))
        except MlzMemory:
            return None


def read_cstring(t, addr, limit=256):
    """A NUL-terminated string of the target, at most limit bytes."""
    for n in (limit, 64):
        try:
            return t.read(addr, n).split(b"\0", 1)[0].decode("utf-8", "replace")
        except MlzMemory:
            pass
    b = b""                 # near the end of a mapping: byte by byte
    for k in range(limit):
        try:
            c = t.read(addr + k, 1)
        except MlzMemory:
            break
        if c == b"\0":
            break
        b += c
    return b.decode("utf-8", "replace")


def find_module(mods, pc):
    for k, m in enumerate(mods):
        if m.start <= pc < m.end:
            return k, m
    return -1, None


def unknown_frame(pc, m):
    """The name of a frame nothing resolves, as symbolize/symbolize.c spells it."""
    if m is None:
        return "0x%x" % pc
    return "%s+0x%x" % (m.path.rsplit("/", 1)[-1], (pc - m.bias) & MASK64)


class Snapshot(object):
    """The live sampled heap: entries, their stacks and their symbols, in
    the order live/snapshot.c + finalize.c produce them."""

    def __init__(self, target, payload):
        self.t, self.p = target, payload
        payload.require_tables()
        self.live, self.slot_stats = payload.scan()
        self.mods = target.modules()
        # Stack ids in order of first use by the (time-sorted) entries; ids
        # that cannot be read share one empty stack numbered next_id + 1.
        self.order, self.pcs, self.no_stack = [], {}, 0
        self.sid_of = []
        empty_id = payload.next_id + 1
        for (_, _, _, sid, _) in self.live:
            if sid not in self.pcs:
                pcs = payload.stack(sid)
                if pcs is not None:
                    self.pcs[sid] = pcs
                    self.order.append(sid)
            if sid in self.pcs:
                self.sid_of.append(sid)
            else:
                if empty_id not in self.pcs:
                    self.pcs[empty_id] = []
                    self.order.append(empty_id)
                self.sid_of.append(empty_id)
                self.no_stack += 1
        self._sym = {}

    def frames_of(self, sid):
        """[(func, file, line, inlined, module, addr)] of a stack."""
        out = []
        for pc in self.pcs[sid]:
            r = self._sym.get(pc)
            if r is None:
                k, m = find_module(self.mods, pc)
                rel = (pc - m.bias) & MASK64 if m else pc
                fr = self.t.symbolize(pc, m) if m is not None and m.path.startswith("/") else None
                if not fr:
                    fr = [(unknown_frame(pc, m), "", 0, False)]
                r = [(f, fi, ln, inl, k, rel) for (f, fi, ln, inl) in fr]
                self._sym[pc] = r
            out.extend(r)
        return out

    def time_us(self, tns):
        return ((tns + self.p.mono_to_real) & MASK64) // 1000


# ---------------------------------------------------------------------------
# The .mlyze writer (docs/FORMAT.md): header, JSON metadata, ALLOC events
# ---------------------------------------------------------------------------

HEADER_SIZE = 256
FLAG_SEALED = 0x1
EV_ALLOC, EV_MARKER = 0, 3
SNAPSHOT_MARKER = "memlyze:snapshot"
# An entry's entry_tid_shift word (payload/info.h): the thread id in the low
# 24 bits, the shift of the rate the sample was taken at in the top 8 (the
# payload doubles its rate under overload). Snapshots name each rate in a
# MARKER before the first ALLOC sampled at it: function 1 + shift.
TID_MASK, TID_SHIFT_POS, RATE_SHIFT_MAX = 0xFFFFFF, 24, 20
RATE_MARKER_ID = 1


def rate_of(rate, tid):
    """The rate an entry was sampled at, from the payload's base rate."""
    return rate << (tid >> TID_SHIFT_POS) if rate > 1 else rate


def varint(v):
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def snapshot_meta(snap):
    """The metadata object, keys in the order finalize.c writes them."""
    t, p = snap.t, snap.p
    meta = {"kind": "snapshot", "memlyze": "1", "rate": p.rate, "pid": p.pid}
    exe = t.exe()
    if exe:
        meta["exe"] = exe
    cmd = t.cmdline()
    if cmd:
        meta["cmdline"] = cmd
    meta["clock"] = "realtime"
    meta["session"] = "%d.%d" % (p.pid, p.session)
    meta["counters"] = dict(p.counters())
    meta["modules"] = []
    for m in snap.mods:
        d = {"path": m.path}
        if m.build_id:
            d["build_id"] = m.build_id.hex()
        d.update(base=m.start, size=m.end - m.start, bias=m.bias)
        meta["modules"].append(d)
    files, funcs = {}, {SNAPSHOT_MARKER: 0}
    for k in range(RATE_SHIFT_MAX + 1 if p.rate > 1 else 0):
        funcs["memlyze:rate %d" % (p.rate << k)] = RATE_MARKER_ID + k
    traces = {}
    for sid in snap.order:
        fr = []
        for (f, fi, ln, inl, k, rel) in snap.frames_of(sid):
            o = {"file_id": files.setdefault(fi, len(files)), "line": ln,
                 "func_id": funcs.setdefault(f, len(funcs))}
            if k >= 0:
                o["module"] = k
            o["addr"] = rel
            if inl:
                o["inline"] = True
            fr.append(o)
        traces[str(sid)] = fr
    meta["stack_traces"] = traces
    meta["files"] = {str(v): k for k, v in files.items()}
    meta["functions"] = {str(v): k for k, v in funcs.items()}
    return meta


def snapshot_bytes(snap, now_us):
    meta = json.dumps(snapshot_meta(snap), separators=(",", ":")).encode()
    start = snap.time_us(snap.live[0][0]) if snap.live else now_us
    ev, last, n, shift = bytearray(), start, 0, 0
    for (tns, key, size, _, tid), sid in zip(snap.live, snap.sid_of):
        t = snap.time_us(tns)
        d = t - last if t > last else 0     # out of order: keep the predecessor's time
        last += d
        if snap.p.rate > 1 and tid >> TID_SHIFT_POS != shift:
            shift = tid >> TID_SHIFT_POS
            ev += bytes((EV_MARKER,)) + varint(d) + varint(RATE_MARKER_ID + shift)
            n += 1
            d = 0
        ev += bytes((EV_ALLOC,)) + varint(d) + struct.pack("<Q", key) + varint(size) + varint(sid) + \
            struct.pack("<H", tid & 0xFFFF)
        n += 1
    d = now_us - last if now_us > last else 0
    ev += bytes((EV_MARKER,)) + varint(d) + varint(0)
    n += 1
    head = struct.pack("<4sIQIIQQQ", b"MTRC", 1, start, len(meta), FLAG_SEALED, len(ev), n, len(ev))
    return head + b"\0" * (HEADER_SIZE - len(head)) + meta + bytes(ev)


def default_name(pid):
    """memlyze.PID.N.mlyze, the first N not taken (as memlyze snapshot)."""
    n = 1
    while os.path.exists("memlyze.%d.%d.mlyze" % (pid, n)):
        n += 1
    return "memlyze.%d.%d.mlyze" % (pid, n)


def write_new_file(path, data):
    """Writes under PATH.PID.tmp, then links into place: never replaces an
    existing file, never leaves a partial one under its real name."""
    tmp = "%s.%d.tmp" % (path, os.getpid())
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as e:
        raise MlzError("cannot write %s: %s" % (tmp, e.strerror))
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)
        except OSError as e:
            if e.errno == errno.EEXIST:
                raise MlzError("%s exists: not replaced (choose another name)" % path)
            if e.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.EXDEV):
                raise MlzError("cannot write %s: %s" % (path, e.strerror))
            if os.path.exists(path):
                raise MlzError("%s exists: not replaced (choose another name)" % path)
            os.rename(tmp, path)
    except OSError as e:
        raise MlzError("cannot write %s: %s" % (path, e.strerror))
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def cmd_snapshot(target, payload, path):
    t0 = time.time()
    snap = Snapshot(target, payload)
    if not path:
        path = default_name(payload.pid)
    now = target.now_us()
    if now is None:         # a core whose time the debugger does not tell: the newest birth in it
        now = snap.time_us(snap.live[-1][0]) if snap.live else 0
    write_new_file(path, snapshot_bytes(snap, now))
    st = snap.slot_stats
    return ("%s: %d live samples of %s in %.1f ms (%d skipped mid-update%s)"
            % (path, len(snap.live), target.describe(), (time.time() - t0) * 1e3, st["skipped"],
               ", %d without a readable stack" % snap.no_stack if snap.no_stack else ""))


# ---------------------------------------------------------------------------
# Top sites, with Horvitz-Thompson estimates (core/sampler.c, report/profile.c)
# ---------------------------------------------------------------------------

def sample_prob(size, rate):
    return 1.0 if rate <= 1 else -math.expm1(-(size + 1.0) / rate)


def miss_prob(size, rate):
    return 0.0 if rate <= 1 else math.exp(-(size + 1.0) / rate)


def fmt_bytes(b):
    """cli_bytes() of reader/cli.c."""
    units, u, a = ("B", "KiB", "MiB", "GiB", "TiB"), 0, abs(b)
    while a >= 1024 and u < 4:
        a /= 1024.0
        b /= 1024.0
        u += 1
    if u == 0:
        return "%.0f B" % b
    return "%.*f %s" % (2 if a < 10 else 1 if a < 100 else 0, b, units[u])


def frame_name(f, fi, ln, inl):
    """prof_frame_name() of report/profile.c."""
    base = fi.rsplit("/", 1)[-1]
    if base and ln:
        return "%s (%s:%d)%s" % (f, base, ln, " [inlined]" if inl else "")
    return f + (" [inlined]" if inl else "")


def top_sites(snap):
    """Sites (stacks with the same symbolized frames merged), by live bytes."""
    rate = snap.p.rate
    sites, key_of = {}, {}
    for sid in snap.order:
        fr = snap.frames_of(sid)
        key = tuple((f, fi, ln) for (f, fi, ln, _, _, _) in fr)
        if key not in sites:
            sites[key] = {"frames": fr, "bytes": 0.0, "bvar": 0.0, "count": 0.0, "cvar": 0.0, "samples": 0}
        key_of[sid] = key
    for (tns, key, size, _, tid), sid in zip(snap.live, snap.sid_of):
        s = sites[key_of[sid]]
        r = rate_of(rate, tid)
        p, q = sample_prob(size, r), miss_prob(size, r)
        s["bytes"] += size / p
        s["bvar"] += float(size) * size * q / (p * p)
        s["count"] += 1.0 / p
        s["cvar"] += q / (p * p)
        s["samples"] += 1
    return sorted((s for s in sites.values() if s["samples"] and s["bytes"] > 0),
                  key=lambda s: -s["bytes"])


def ci95(var):
    return 1.96 * math.sqrt(var) if var > 0 else 0.0


def cmd_top(target, payload, n, nframes=4):
    snap = Snapshot(target, payload)
    sites = top_sites(snap)
    rate = payload.rate
    total = sum(s["bytes"] for s in sites)
    tvar = sum(s["bvar"] for s in sites)
    count = sum(s["count"] for s in sites)
    lines = []
    head = "%s: live %s" % (target.describe(), fmt_bytes(total))
    if rate > 1:
        head += " \u00b1 %s" % fmt_bytes(ci95(tvar))
    head += " in ~%.0f objects; sampling %s; %d live samples" % (
        count, "exact (every allocation)" if rate <= 1 else fmt_bytes(float(rate)), len(snap.live))
    lines.append(head)
    if rate > 1 and len(snap.live) < 100:
        lines.append("warning: only %d live samples; estimates are rough" % len(snap.live))
    lines.append("%4s  %-28s %6s  %9s  %7s  %s" % ("rank", "live bytes", "share", "objects", "samples", "site"))
    for r, s in enumerate(sites[:n]):
        cell = fmt_bytes(s["bytes"])
        if rate > 1:
            cell += " \u00b1 %s" % fmt_bytes(ci95(s["bvar"]))
        fr = s["frames"]
        name = frame_name(*fr[0][:4]) if fr else "(no frames)"
        lines.append("%4d  %-28s %5.1f%%  %9.0f  %7d  %s" % (
            r + 1, cell, 100.0 * s["bytes"] / total if total > 0 else 0.0, s["count"], s["samples"], name))
        for f in fr[1:nframes]:
            lines.append("%4s  %-28s %6s  %9s  %7s    <- %s" % ("", "", "", "", "", frame_name(*f[:4])))
    if not sites:
        lines.append("(no allocation sites)")
    return "\n".join(lines)


def cmd_status(target, payload, module_path):
    p, i = payload, payload.i
    out = ["memlyze payload: %s (memlyze_info v%d at 0x%x)" % (module_path or "?", i["version"], p.info_addr)]
    if p.ready and p.attached:
        state = "attached (GOT mode), sampling"
    elif p.ready:
        state = "sampling (preloaded), or stopping"
    else:
        state = "loaded, not attached"
    out.append("state: %s; pid %d; rate %s" % (state, p.pid, "1 (exact: every allocation)" if p.rate <= 1
                                                else "%d B (%s)" % (p.rate, fmt_bytes(float(p.rate)))))
    cs = p.counters()
    if cs:
        out.append("counters: " + ", ".join("%s %d" % c for c in cs))
    if p.ready and p.slots:
        live, st = p.scan()
        cap = st["capacity"]
        out.append("heap map: %d live entries in %d slots (load %.1f%%), %d tombstones, %d mid-update"
                   % (len(live), cap, 100.0 * (len(live) + st["tombstones"]) / cap, st["tombstones"],
                      st["skipped"]))
        out.append("stack table: %d stacks" % max(0, p.next_id - 1))
    b = target.bloom()
    if b:
        cells, nonzero, stuck = b
        out.append("Bloom filter: %d of %d cells set (%.1f%%), %d saturated"
                   % (nonzero, cells, 100.0 * nonzero / cells if cells else 0, stuck))
    else:
        out.append("Bloom filter: not described by memlyze_info v%d (needs the payload's debug info)"
                   % i["version"])
    return "\n".join(out)


# ---------------------------------------------------------------------------
# Modules: file-backed mappings, their load bias and build-id (as
# reader/procmem.c computes them from /proc/PID/maps and the ELF files)
# ---------------------------------------------------------------------------

def elf_facts(f):
    """(lowest PT_LOAD address, page-aligned; GNU build-id bytes) of an open
    ELF64 little-endian file, or None."""
    h = f.read(64)
    if len(h) < 64 or h[:4] != b"\x7fELF" or h[4] != 2 or h[5] != 1:
        return None
    phoff = struct.unpack_from("<Q", h, 0x20)[0]
    phentsize, phnum = struct.unpack_from("<HH", h, 0x36)
    if phentsize < 56 or phnum > 4096:
        return None
    f.seek(phoff)
    ph = f.read(phentsize * phnum)
    minv, bid = None, b""
    for k in range(phnum):
        if (k + 1) * phentsize > len(ph):
            break
        p_type, _, p_off, p_vaddr, _, p_filesz, _, p_align = struct.unpack_from("<IIQQQQQQ", ph, k * phentsize)
        if p_type == 1:      # PT_LOAD
            v = p_vaddr & ~(p_align - 1 if p_align > 1 else 0) & MASK64
            minv = v if minv is None or v < minv else minv
        elif p_type == 4 and not bid and p_filesz < (1 << 20):     # PT_NOTE
            f.seek(p_off)
            notes, al, o = f.read(p_filesz), 8 if p_align == 8 else 4, 0
            while o + 12 <= len(notes):
                namesz, descsz, ntype = struct.unpack_from("<III", notes, o)
                d = o + 12 + ((namesz + al - 1) // al) * al
                if ntype == 3 and descsz <= 64 and d + descsz <= len(notes):   # NT_GNU_BUILD_ID
                    bid = notes[d:d + descsz]
                    break
                o = d + ((descsz + al - 1) // al) * al
    return None if minv is None else (minv, bid)


def modules_from_mappings(maps, open_mapping):
    """maps: [(start, end, offset, path)] in address order (file-backed and
    [vdso] only are kept); open_mapping(start, end, path) -> file or None."""
    mods, by_path = [], {}
    for (s, e, off, path) in maps:
        if not path.startswith("/") and path != "[vdso]":
            continue
        m = by_path.get(path)
        if m is None:
            m = Module(path, s, e, None, b"")
            by_path[path] = m
            mods.append(m)
        m.start, m.end = min(m.start, s), max(m.end, e)
        if off == 0 and m.bias is None:
            m.bias = -1
            f = open_mapping(s, e, path) if path.startswith("/") else None
            if f is not None:
                try:
                    facts = elf_facts(f)
                finally:
                    f.close()
                if facts:
                    m.bias, m.build_id = (s - facts[0]) & MASK64, facts[1]
    for m in mods:
        if m.bias is None or m.bias == -1:
            m.bias = m.start
    return mods


def parse_maps_text(text):
    """Lines "START END SIZE OFFSET [PERMS] PATH" (gdb's `info proc
    mappings`) or "START-END PERMS OFFSET DEV INODE PATH" (/proc/PID/maps)."""
    out = []
    for line in text.splitlines():
        w = line.split()
        if len(w) >= 6 and "-" in w[0] and not w[0].startswith("0x"):       # /proc/PID/maps
            try:
                s, e = (int(x, 16) for x in w[0].split("-"))
                off = int(w[2], 16)
            except ValueError:
                continue
            path = line.split(None, 5)[5].strip() if len(line.split(None, 5)) > 5 else ""
            out.append((s, e, off, path))
        elif len(w) >= 4 and w[0].startswith("0x"):
            try:
                s, e, off = int(w[0], 16), int(w[1], 16), int(w[3], 16)
            except ValueError:
                continue
            rest = line.split(None, 4)[4] if len(line.split(None, 4)) > 4 else ""
            if re.match(r"^[r-][w-][x-][ps]\b", rest):
                rest = rest[4:]
            out.append((s, e, off, rest.strip()))
    return out


def live_open_mapping(pid):
    """Opens a mapped file as process pid sees it (map_files, then its root)."""
    def op(s, e, path):
        for p in ("/proc/%d/map_files/%x-%x" % (pid, s, e), "/proc/%d/root%s" % (pid, path), path):
            try:
                return open(p, "rb")
            except (IOError, OSError):
                continue
        return None
    return op


def file_open_mapping(s, e, path):
    try:
        return open(path, "rb")
    except (IOError, OSError):
        return None


def read_cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            raw = f.read(4096)
    except (IOError, OSError):
        return []
    return [a.decode("utf-8", "replace") for a in raw.split(b"\0")[:-1]] if raw else []


# ---------------------------------------------------------------------------
# Attach safety: frames a thread must not be in while we call into it
# (the injector's rules, injector/safepoint.c)
# ---------------------------------------------------------------------------

UNSAFE_EXACT = frozenset((
    "malloc", "free", "calloc", "realloc", "reallocarray", "memalign", "posix_memalign", "aligned_alloc",
    "valloc", "pvalloc", "cfree", "malloc_trim", "malloc_stats", "malloc_info", "mallinfo", "mallinfo2",
    "malloc_usable_size", "mallopt", "fork", "_Fork", "vfork", "pthread_create", "pthread_join",
    "pthread_tryjoin_np", "pthread_timedjoin_np", "pthread_clockjoin_np", "pthread_detach", "pthread_exit",
    "exit", "_exit", "backtrace", "iconv_open", "getaddrinfo", "getpwnam", "getpwuid", "dl_open_worker",
))
UNSAFE_PREFIX = (
    "dl", "_dl_", "__dl", "__libc_dl", "__libc_malloc", "__libc_free", "__libc_calloc", "__libc_realloc",
    "__libc_memalign", "__libc_valloc", "__libc_pvalloc", "__libc_mallinfo", "__libc_fork", "_int_",
    "tcache_", "arena_", "sysmalloc", "malloc_", "__malloc_", "__nptl_", "__pthread_create", "_IO_cleanup",
    "__GI___libc_malloc", "__GI___libc_free", "__GI___libc_realloc", "__GI___libc_calloc", "__GI__dl",
)
UNSAFE_FILES = frozenset(("malloc.c", "arena.c", "hooks.c", "dl-open.c", "dl-close.c", "dl-load.c",
                          "dl-lookup.c", "dl-reloc.c", "dl-runtime.c", "dl-tls.c", "dl-error-skeleton.c"))


def frame_unsafe(name, module, filename, payload=None):
    """Why a frame is unsafe to call from, or None. module is the shared
    library's path (None for the executable); payload the path the payload
    goes by here, if known (memlyze-attach loads it from a memfd, which a
    debugger may name /proc/PID/fd/N). The name prefixes apply to glibc's
    own functions only, the exact allocator names anywhere (another
    allocator's malloc has locks too)."""
    base = (module or "").rsplit("/", 1)[-1]
    if base.startswith("ld-linux") or base.startswith("ld.so") or re.match(r"^ld-[0-9.]+\.so", base):
        return "in the dynamic loader (%s)" % (name or base)
    if base.startswith("libmemlyze") or "memlyze-payload" in (module or "") or (payload and module == payload):
        return "in the memlyze payload (%s)" % (name or base)
    in_libc = base.startswith(("libc.so", "libc-", "libpthread", "libdl"))
    if name:
        bare = name.split("(")[0]
        if bare in UNSAFE_EXACT or in_libc and bare.startswith(UNSAFE_PREFIX):
            return "in %s" % bare
    if filename and filename.rsplit("/", 1)[-1] in UNSAFE_FILES and in_libc:
        return "in libc's allocator or loader (%s)" % (name or filename)
    return None


def parse_attach_args(argv):
    """`memlyze attach` options (gdb and lldb): rate, output, lib, spool, unwind."""
    rate, out, lib, spool, unwind = 512 * 1024, None, None, None, "dwarf"
    a = list(argv)
    while a:
        x = a.pop(0)
        if x in ("--rate", "-r", "--output", "-o", "--lib", "--spool", "--unwind") and not a:
            raise MlzError("%s needs a value" % x)
        if x in ("--rate", "-r"):
            rate = parse_rate(a.pop(0))
        elif x in ("--output", "-o"):
            out = os.path.abspath(os.path.expanduser(a.pop(0)))
        elif x == "--lib":
            lib = os.path.abspath(os.path.expanduser(a.pop(0)))
        elif x == "--spool":
            spool = os.path.abspath(os.path.expanduser(a.pop(0)))
        elif x == "--unwind":
            unwind = a.pop(0)
            if unwind not in ("fp", "dwarf"):
                raise MlzError("--unwind takes fp or dwarf")
        else:
            raise MlzError("usage: memlyze attach [--rate N] [--output FILE] [--spool FILE] [--lib PATH] "
                           "[--unwind fp|dwarf]")
    return rate, out, lib, spool, unwind


def parse_detach_args(argv):
    """memlyze detach [--output FILE] [--spool FILE]: (output, spool), absolute or None."""
    out, spool = None, None
    a = list(argv)
    while a:
        x = a.pop(0)
        if x in ("--output", "-o") and a:
            out = os.path.abspath(os.path.expanduser(a.pop(0)))
        elif x == "--spool" and a:
            spool = os.path.abspath(os.path.expanduser(a.pop(0)))
        else:
            raise MlzError("usage: memlyze detach [--output FILE] [--spool FILE]")
    return out, spool


def parse_rate(s):
    m = re.match(r"^([0-9]+)([kKmM]?)(i?[bB])?$", s)
    if not m or int(m.group(1)) == 0:
        raise MlzError("bad rate '%s': bytes between samples, e.g. 524288, 512k or 1 (exact)" % s)
    return int(m.group(1)) << {"": 0, "k": 10, "K": 10, "m": 20, "M": 20}[m.group(2)]


def find_file_near(candidates):
    for c in candidates:
        if c and os.path.isfile(c):
            return os.path.abspath(c)
    return None


_HERE = os.path.dirname(os.path.abspath(__file__)) if "__file__" in globals() else os.getcwd()


def default_library():
    """libmemlyze.so: $MEMLYZE_PAYLOAD, the source tree's build/, the install."""
    return find_file_near((
        os.environ.get("MEMLYZE_PAYLOAD"),
        os.path.join(_HERE, "..", "..", "build", "lib", "libmemlyze.so"),          # scripts/gdb/ in the tree
        os.path.join(_HERE, "..", "..", "..", "lib", "memlyze", "libmemlyze.so"),  # PREFIX/share/memlyze/gdb/
        "/usr/local/lib/memlyze/libmemlyze.so", "/usr/lib/memlyze/libmemlyze.so"))


def memlyze_tool():
    """The memlyze command, for finalize after detach."""
    found = find_file_near((
        os.environ.get("MEMLYZE_BIN"),
        os.path.join(_HERE, "..", "..", "build", "bin", "memlyze"),
        os.path.join(_HERE, "..", "..", "..", "bin", "memlyze")))
    if found:
        return found
    for d in os.environ.get("PATH", "").split(os.pathsep):
        if d and os.access(os.path.join(d, "memlyze"), os.X_OK):
            return os.path.join(d, "memlyze")
    return None


# The record memlyze-attach leaves for memlyze-detach (injector/state.c):
# /tmp/memlyze-PID/state as the target sees /tmp, lines KEY=VALUE naming
# the trace to write (output), the payload's spool, the rate, and the
# process's start time (a record of an earlier process of that pid is not
# its). A detach here reads it, an attach here writes it, so either tool
# may end what the other began.

def _record_dir(pid):
    return "/proc/%d/root/tmp/memlyze-%d" % (pid, pid)


def _start_ticks(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return 0


def read_attach_record(pid):
    """{"output", "spool" (as this process reaches it), ...} or None."""
    rec = {}
    try:
        with open(os.path.join(_record_dir(pid), "state")) as f:
            for line in f:
                k, _, v = line.rstrip("\n").partition("=")
                rec[k] = v
    except OSError:
        return None
    ticks = rec.get("start_ticks")
    if not rec.get("spool") or (ticks and ticks != str(_start_ticks(pid))):
        return None
    rec["spool_here"] = "/proc/%d/root%s" % (pid, rec["spool"]) if rec["spool"].startswith("/") else rec["spool"]
    return rec


def write_attach_record(pid, out, spool, rate):
    """Best effort: an error message, or None."""
    d = _record_dir(pid)
    try:
        try:
            os.mkdir(d, 0o700)
        except FileExistsError:
            st = os.lstat(d)
            if not os.path.isdir(d) or os.path.islink(d) or st.st_mode & 0o077 or st.st_uid not in (0, os.geteuid()):
                return "%s is not a private directory" % d
        tmp = os.path.join(d, "state.tmp")
        with open(tmp, "w") as f:
            f.write("output=%s\nspool=%s\nrate=%d\nattached_at=%d\nstart_ticks=%d\n"
                    % (out, spool, rate, int(time.time()), _start_ticks(pid)))
        os.rename(tmp, os.path.join(d, "state"))
    except OSError as e:
        return "cannot write the attach record in %s: %s" % (d, e.strerror)
    return None


def remove_attach_record(pid):
    d = _record_dir(pid)
    for name in ("state", "state.new"):
        try:
            os.unlink(os.path.join(d, name))
        except OSError:
            pass
    try:
        os.rmdir(d)                # only when empty
    except OSError:
        pass


def finalize_spool(spool, out):
    """Runs memlyze finalize; returns a message line."""
    tool = memlyze_tool()
    if not tool:
        return "spool sealed at %s; turn it into a trace with: memlyze finalize -o %s %s" % (spool, out, spool)
    r = subprocess.run([tool, "finalize", "-o", out, spool], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if r.returncode != 0:
        msg = r.stdout.decode("utf-8", "replace").strip().splitlines()
        raise MlzError("memlyze finalize failed (%s); the spool is kept at %s" % (msg[-1][:200] if msg else "?", spool))
    try:
        os.unlink(spool)
    except OSError:
        pass
    return "trace written to %s" % out


# ---------------------------------------------------------------------------
# gdb
# ---------------------------------------------------------------------------

if gdb is not None:

    def _gdb_is_core(inf):
        conn = getattr(inf, "connection", None)
        if conn is not None:
            return conn.type == "core"
        try:
            return "core dump" in gdb.execute("info target", to_string=True)
        except gdb.error:
            return False

    class GdbTarget(object):
        """The selected inferior: a live process stopped by gdb or a core."""

        def __init__(self):
            self.inf = gdb.selected_inferior()
            if self.inf.pid == 0:
                raise MlzError("no process: run or attach to the program, or open a core file")
            self.is_core = _gdb_is_core(self.inf)
            self.pid = self.inf.pid

        def describe(self):
            return "core file of process %d" % self.pid if self.is_core else "process %d" % self.pid

        def read(self, addr, n):
            try:
                return self.inf.read_memory(addr, n).tobytes()
            except (gdb.MemoryError, gdb.error, OverflowError, ValueError):
                raise MlzMemory(addr, n)

        def now_us(self):
            """The snapshot's moment (its MARKER): now, or when the core was written."""
            if self.is_core:
                m = re.search(r"Local core dump file:\s*`(.*)', file type", gdb.execute("info target", to_string=True))
                if m and os.path.exists(m.group(1)):
                    return int(os.stat(m.group(1)).st_mtime * 1e6)
            return int(time.time() * 1e6)

        def exe(self):
            if not self.is_core:
                try:
                    return os.readlink("/proc/%d/exe" % self.pid)
                except OSError:
                    pass
            return self.inf.progspace.filename or ""

        def cmdline(self):
            return [] if self.is_core else read_cmdline(self.pid)

        def modules(self):
            try:
                text = gdb.execute("info proc mappings", to_string=True)
            except gdb.error as e:
                raise MlzError("gdb cannot list the mappings: %s" % e)
            maps = parse_maps_text(text)
            return modules_from_mappings(maps, file_open_mapping if self.is_core else live_open_mapping(self.pid))

        def symbolize(self, pc, m):
            return gdb_symbolize(pc, m)

        def bloom(self):
            """(cells, nonzero, stuck) from the payload's debug info, or None:
            memlyze_info v1 does not describe the Bloom filter."""
            try:
                b = gdb.parse_and_eval("mlz__g.bloom")
                return int(b["mask"]) + 1, int(b["nonzero"]), int(b["stuck"])
            except (gdb.error, RuntimeError):
                return None

    _msym_cache = {}

    def _minimal_symbol(q):
        """The ELF symbol containing q (gdb's minimal symbols), or None."""
        if q in _msym_cache:
            return _msym_cache[q]
        name = None
        try:
            s = gdb.execute("info symbol 0x%x" % q, to_string=True).strip()
            if " in section " in s and not s.startswith("No symbol"):
                name = re.sub(r" \+ [0-9]+$", "", s.rsplit(" in section ", 1)[0])
        except gdb.error:
            pass
        _msym_cache[q] = name
        return name

    def _filename(symtab):
        return symtab.filename if symtab is not None else ""

    def gdb_symbolize(pc, m):
        """[(func, file, line, inlined)] for a return address, innermost
        inline first, from gdb's blocks and line table. An inlined
        function's symbol carries its call site (DW_AT_call_file/line), which
        becomes the file:line of the frame it was inlined into."""
        q = pc - 1 if pc else 0
        try:
            block = gdb.block_for_pc(q)
        except RuntimeError:
            block = None
        sal = gdb.find_pc_line(q)
        fname, line = (_filename(sal.symtab), sal.line) if sal.symtab is not None else ("", 0)
        funcs = []
        while block is not None and not block.is_global and not block.is_static:
            if block.function is not None:
                funcs.append(block.function)
            block = block.superblock
        out = []
        for f in funcs[:-1]:
            out.append((f.name, fname, line, True))
            fname, line = _filename(f.symtab), f.line
        outer = funcs[-1].name if funcs else _minimal_symbol(q)
        if not outer:
            outer = unknown_frame(pc, m)
        out.append((outer, fname, line, False))
        return out

    def _find_info():
        """(address of memlyze_info, module path) or raise MlzError."""
        try:
            v = gdb.parse_and_eval("&'%s'" % INFO_SYMBOL)
            addr = int(v)
        except (gdb.error, RuntimeError):
            raise NoPayload("no memlyze payload in this %s (memlyze attach loads one; memlyze run starts a "
                           "program with it)" % ("core file" if _gdb_is_core(gdb.selected_inferior())
                                                 else "process"))
        return addr, gdb.solib_name(addr) or (gdb.selected_inferior().progspace.filename or "")

    def _payload():
        t = GdbTarget()
        addr, path = _find_info()
        return t, Payload(t, addr), path

    def _run(fn):
        try:
            fn()
        except MlzError as e:
            raise gdb.GdbError("memlyze: %s" % e)
        except KeyboardInterrupt:
            raise gdb.GdbError("memlyze: interrupted")

    def _argv(arg):
        try:
            return gdb.string_to_argv(arg)
        except Exception:
            return arg.split()

    def _complete(text, word, options, values=None, files=()):
        """Completion of options (and of the value after some of them).
        gdb's word may start inside a token ('-' breaks words): the answers
        are the rest of the token from where word starts."""
        w = text.split()
        tok = "" if not w or text.endswith(" ") else w[-1]
        prev = (w[-1] if text.endswith(" ") else w[-2]) if len(w) >= (1 if text.endswith(" ") else 2) else ""
        if prev in files:
            if word is None:            # gdb asks which characters break words: a file name's
                return gdb.COMPLETE_FILENAME
            cands = [p + "/" if os.path.isdir(p) else p for p in glob.glob(os.path.expanduser(tok) + "*")]
        else:
            cands = (values or {}).get(prev, options)
        cut = len(tok) - len(word or "")
        return [c[cut:] for c in cands if c.startswith(tok)]

    class MemlyzeCommand(gdb.Command):
        """The memlyze heap profiler, inside gdb.

memlyze status          is the payload in this process or core; rate, counters, tables
memlyze snapshot [FILE] write the sampled live heap as a .mlyze snapshot
memlyze top [N] [--frames F]
                        the N biggest live allocation sites, with 95% intervals
memlyze attach [--rate N] [--output FILE]
                        load the profiler and start sampling (rate 1 = exact)
memlyze detach [--output FILE]
                        stop sampling, seal the spool and write the trace

status, snapshot and top read the payload's tables through gdb's memory
access and run no code in the program: they work on a stopped process and on
a core file. attach and detach call into the program (gdb inferior calls)."""

        def __init__(self):
            super(MemlyzeCommand, self).__init__("memlyze", gdb.COMMAND_DATA, gdb.COMPLETE_NONE, True)

        def invoke(self, arg, from_tty):
            if arg.strip():
                raise gdb.GdbError("memlyze: unknown command '%s' (see help memlyze)" % arg.split()[0])
            gdb.execute("help memlyze")

    class MemlyzeStatus(gdb.Command):
        """Whether the memlyze payload is in this process or core, and its state.

Usage: memlyze status
Shows the payload's library and descriptor version, whether it is sampling,
its rate, its counters (samples, drops, ...), the heap map's load, the stack
table's size and the Bloom filter's saturation (when the payload has debug
info). Reads memory only."""

        def __init__(self):
            super(MemlyzeStatus, self).__init__("memlyze status", gdb.COMMAND_DATA, gdb.COMPLETE_NONE)

        def invoke(self, arg, from_tty):
            def go():
                if _argv(arg):
                    raise MlzError("status takes no arguments")
                t, p, path = _payload()
                gdb.write(cmd_status(t, p, path) + "\n")
            _run(go)

    class MemlyzeSnapshot(gdb.Command):
        """Write the sampled live heap as a .mlyze snapshot file.

Usage: memlyze snapshot [FILE]
FILE defaults to memlyze.PID.N.mlyze in the current directory, the first N
not taken; an existing file is never replaced. The file is the same as
`memlyze snapshot PID` writes (kind "snapshot", symbolized with gdb's own
symbol and line tables). Runs no code in the program: works on a stopped
process and on a core file."""

        def __init__(self):
            super(MemlyzeSnapshot, self).__init__("memlyze snapshot", gdb.COMMAND_DATA, gdb.COMPLETE_FILENAME)

        def invoke(self, arg, from_tty):
            def go():
                a = _argv(arg)
                if len(a) > 1:
                    raise MlzError("usage: memlyze snapshot [FILE]")
                t, p, _ = _payload()
                gdb.write(cmd_snapshot(t, p, os.path.expanduser(a[0]) if a else None) + "\n")
            _run(go)

    class MemlyzeTop(gdb.Command):
        """The biggest live allocation sites, from the payload's live tables.

Usage: memlyze top [N] [--frames F]
Ranks sites (stacks with the same function, file and line) by estimated live
bytes, with 95% intervals when sampling (rate > 1). N sites (default 10),
F frames each (default 4). Reads memory only."""

        def __init__(self):
            super(MemlyzeTop, self).__init__("memlyze top", gdb.COMMAND_DATA)

        def complete(self, text, word):
            return _complete(text, word, ("--frames",))

        def invoke(self, arg, from_tty):
            def go():
                a, n, nf = _argv(arg), 10, 4
                try:
                    while a:
                        x = a.pop(0)
                        if x == "--frames" and a:
                            nf = int(a.pop(0))
                        else:
                            n = int(x)
                except ValueError:
                    raise MlzError("usage: memlyze top [N] [--frames F]")
                if n <= 0 or nf <= 0:
                    raise MlzError("usage: memlyze top [N] [--frames F] (positive numbers)")
                t, p, _ = _payload()
                gdb.write(cmd_top(t, p, n, nf) + "\n")
            _run(go)

    # -- attach / detach: gdb inferior calls ---------------------------------

    _sessions = {}       # pid -> {"spool": path, "output": path} of this gdb session's attaches

    def _thread_unsafe(thread):
        """Why calling into thread now could deadlock, or None."""
        thread.switch()
        try:
            f = gdb.newest_frame()
        except gdb.error as e:
            return "unreadable (%s)" % e
        try:
            payload = _find_info()[1]
        except MlzError:
            payload = None
        n = 0
        while f is not None and n < 64:
            try:
                pc = f.pc()
                name = f.name()
                sal = f.find_sal()
                why = frame_unsafe(name, gdb.solib_name(pc), _filename(sal.symtab) if sal.symtab else "", payload)
            except gdb.error:
                break
            if why:
                return why
            try:
                f = f.older()
            except gdb.error:
                break
            n += 1
        return None

    def _safe_thread():
        """Selects a thread at a safe point: the selected one if it is; else
        another (others run during the call, unless scheduler-locking is on,
        in which case every thread must be safe)."""
        inf = gdb.selected_inferior()
        sel = gdb.selected_thread()
        if sel is None:
            raise MlzError("no thread to call from (is the program running?)")
        try:
            locked = "\"on\"" in gdb.execute("show scheduler-locking", to_string=True)
        except gdb.error:
            locked = False
        why = {}
        threads = [sel] + [t for t in inf.threads() if t.ptid != sel.ptid]
        chosen = None
        try:
            for t in threads:
                w = _thread_unsafe(t)
                if w:
                    why[t.num] = (t, w)
                    if locked:
                        break
                elif chosen is None:
                    chosen = t
                    if not locked:
                        break
        finally:
            sel.switch()
        if locked and why:
            t, w = list(why.values())[0]
            raise MlzError("thread %d (LWP %d) is %s and scheduler-locking is on: it would never let go; "
                           "continue a little and retry" % (t.num, t.ptid[1], w))
        if chosen is None:
            t, w = why[sel.num]
            raise MlzError("no thread is at a safe point (thread %d, LWP %d, is %s); continue a little "
                           "and retry" % (t.num, t.ptid[1], w))
        if chosen.ptid != sel.ptid:
            t, w = why[sel.num]
            gdb.write("memlyze: thread %d (LWP %d) is %s; calling from thread %d (LWP %d)\n"
                      % (t.num, t.ptid[1], w, chosen.num, chosen.ptid[1]))
        return chosen

    def _c_string(s):
        return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'

    def _infcall(expr):
        """Evaluates expr (an inferior call). The user's breakpoints are
        disabled meanwhile (the other threads run during the call and would
        hit them, abandoning it half done), and a signal unwinds the call
        instead of leaving the program stopped inside our code."""
        saved, disabled = [], []
        for setting in ("unwindonsignal", "unwind-on-terminating-exception"):
            try:
                saved.append((setting, gdb.parameter(setting)))
                gdb.execute("set %s on" % setting, to_string=True)
            except (gdb.error, RuntimeError):
                pass
        for b in gdb.breakpoints() or ():
            if b.is_valid() and b.enabled:
                b.enabled = False
                disabled.append(b)
        try:
            return gdb.parse_and_eval(expr)
        except gdb.error as e:
            raise MlzError("the call into the program failed: %s" % str(e).splitlines()[0])
        finally:
            for b in disabled:
                if b.is_valid():
                    b.enabled = True
            for setting, v in saved:
                gdb.execute("set %s %s" % (setting, "on" if v else "off"), to_string=True)

    def _strerror(code):
        try:
            s = _infcall("((const char *(*)(int))memlyze_strerror)(%d)" % code)
            return s.string()
        except (MlzError, gdb.error):
            return "error %d" % code

    def _live_target():
        inf = gdb.selected_inferior()
        if inf.pid == 0:
            raise MlzError("no process: run or attach to the program first")
        if _gdb_is_core(inf):
            raise MlzError("a core file cannot be profiled: attach and detach need a live process")
        return inf

    def do_attach(argv):
        rate, out, lib, spool, unwind = parse_attach_args(argv)
        inf = _live_target()
        pid = inf.pid
        out = out or os.path.abspath("memlyze.%d.mlyze" % pid)
        spool = spool or out + ".spool"
        for f in (out, spool):
            if os.path.exists(f):
                raise MlzError("%s exists: detach would not replace it (choose another --output)" % f)
        try:
            t, p, path = _payload()
            if p.attached or p.ready:
                raise MlzError("memlyze is already %s in process %d (memlyze detach stops it)"
                               % ("attached" if p.attached else "sampling (preloaded)", pid))
        except NoPayload:
            path = None
        _safe_thread().switch()
        if path is None:
            lib = lib or default_library()
            if not lib:
                raise MlzError("cannot find libmemlyze.so: use --lib PATH or set MEMLYZE_PAYLOAD")
            handle = None
            for fn in ("dlopen", "__libc_dlopen_mode"):
                try:
                    handle = int(_infcall("((void *(*)(const char *, int))%s)(%s, 2)" % (fn, _c_string(lib))))
                    break
                except MlzError as e:
                    if "No symbol" not in str(e):
                        raise
            if handle is None:
                raise MlzError("the program has no dlopen to load %s with" % lib)
            if handle == 0:
                err = ""
                try:
                    v = _infcall("((char *(*)(void))dlerror)()")
                    err = v.string() if int(v) else ""
                except (MlzError, gdb.error):
                    pass
                raise MlzError("dlopen(%s) failed in process %d%s" % (lib, pid, ": " + err if err else ""))
        config = "rate=%d;spool=%s;unwind=%s" % (rate, spool, unwind)
        rc = int(_infcall("((int (*)(const char *))memlyze_attach)(%s)" % _c_string(config)))
        if rc < 0:
            raise MlzError("the payload could not start in process %d: %s" % (pid, _strerror(rc)))
        _sessions[pid] = {"spool": spool, "output": out}
        why = write_attach_record(pid, out, spool, rate)
        return ("memlyze: attached to process %d, rate %d B%s, spool %s; `memlyze detach` writes %s%s"
                % (pid, rate, " (exact)" if rate == 1 else "", spool, out,
                   "" if not why else " (memlyze-detach cannot: %s)" % why))

    def _spool_from_payload(t):
        """The payload's spool path, from its debug info (not in memlyze_info)."""
        try:
            return read_cstring(t, int(gdb.parse_and_eval("&mlz__g.spool_path[0]")), 4096) or None
        except (gdb.error, RuntimeError, MlzMemory):
            return None

    def do_detach(argv):
        out, spool = parse_detach_args(argv)
        inf = _live_target()
        pid = inf.pid
        t, p, _ = _payload()
        if not p.attached:
            raise MlzError("memlyze is not attached to process %d%s" % (
                pid, " (it was preloaded: it stops when the program exits)" if p.ready else ""))
        sess = _sessions.get(pid, {})
        rec = read_attach_record(pid) or {}     # memlyze-attach's (or ours)
        spool = spool or sess.get("spool") or rec.get("spool_here") or _spool_from_payload(t)
        out = out or sess.get("output") or rec.get("output") \
            or (spool[:-6] if spool and spool.endswith(".mlyze.spool") else None) \
            or os.path.abspath(default_name(pid))
        if os.path.exists(out):
            raise MlzError("%s exists: not replaced (use --output)" % out)
        _safe_thread().switch()
        rc = int(_infcall("((int (*)(void))memlyze_detach)()"))
        if rc < 0:
            raise MlzError("detach in process %d: %s" % (pid, _strerror(rc)))
        _sessions.pop(pid, None)
        if not spool:
            return "memlyze: detached from process %d; spool path unknown: finalize it with memlyze finalize" % pid
        msg = finalize_spool(spool, out)
        remove_attach_record(pid)
        return "memlyze: detached from process %d; %s" % (pid, msg)

    class MemlyzeAttach(gdb.Command):
        """Load the memlyze profiler into this process and start sampling.

Usage: memlyze attach [--rate N] [--output FILE] [--spool FILE] [--lib PATH] [--unwind fp|dwarf]
  --rate N      mean bytes between samples (default 512k; 1 = every allocation)
  --output FILE the trace `memlyze detach` writes (default memlyze.PID.mlyze)
  --spool FILE  the payload's raw output while attached (default FILE.spool)
  --lib PATH    libmemlyze.so to load (default: $MEMLYZE_PAYLOAD, then next to
                these scripts)
Calls dlopen and memlyze_attach in the program (gdb inferior calls), from a
thread that is not inside malloc, the dynamic loader or the payload; the
other threads run during the call unless scheduler-locking is on."""

        def __init__(self):
            super(MemlyzeAttach, self).__init__("memlyze attach", gdb.COMMAND_RUNNING)

        def complete(self, text, word):
            return _complete(text, word, ("--rate", "--output", "--spool", "--lib", "--unwind"),
                             {"--unwind": ("fp", "dwarf"), "--rate": ()}, ("--output", "--spool", "--lib"))

        def invoke(self, arg, from_tty):
            _run(lambda: gdb.write(do_attach(_argv(arg)) + "\n"))

    class MemlyzeDetach(gdb.Command):
        """Stop sampling, seal the spool and write the trace.

Usage: memlyze detach [--output FILE] [--spool FILE]
Calls memlyze_detach in the program (restores the GOT slots, drains and
seals the spool), then runs `memlyze finalize` to write the symbolized trace
(FILE, default the --output given to attach). The library stays loaded."""

        def __init__(self):
            super(MemlyzeDetach, self).__init__("memlyze detach", gdb.COMMAND_RUNNING)

        def complete(self, text, word):
            return _complete(text, word, ("--output", "--spool"), None, ("--output", "--spool"))

        def invoke(self, arg, from_tty):
            _run(lambda: gdb.write(do_detach(_argv(arg)) + "\n"))

    gdb.memlyze_commands_loaded = True      # for the auto-load hook (libmemlyze.so-gdb.py)
    MemlyzeCommand()
    MemlyzeStatus()
    MemlyzeSnapshot()
    MemlyzeTop()
    MemlyzeAttach()
    MemlyzeDetach()
