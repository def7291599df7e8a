# memlyze.py - the memlyze heap profiler inside lldb.
#
#   (lldb) command script import /usr/local/share/memlyze/lldb/memlyze.py
#   (lldb) memlyze status | snapshot [FILE] | top [N] | attach [--rate N] | detach
#
# The same commands as the gdb script, through lldb's Python API. The
# reading half (the payload's descriptor, the heap-map scan, the .mlyze
# writer, the estimates) is not repeated here: it is the plain-Python part
# of ../gdb/memlyze.py, loaded as the module `memlyze_core` (that file
# imports gdb only when it runs inside gdb). This file supplies an lldb
# "target": memory through SBProcess.ReadMemory, modules from /proc/PID/maps
# (live) or lldb's module list (core file), symbols from lldb's symbol
# contexts, inline chains from its blocks.
#
# status, snapshot and top run no code in the program, so they work on a
# stopped process and on a core file. attach and detach use lldb's
# expression evaluation (a call into the program), with the same safe-thread
# rule as the gdb script.

import importlib.util
import os
import shlex
import sys
import time

import lldb

_HERE = os.path.dirname(os.path.abspath(__file__))


def _load_core():
    if "memlyze_core" in sys.modules:
        return sys.modules["memlyze_core"]
    for p in (os.environ.get("MEMLYZE_GDB_SCRIPT"), os.path.join(_HERE, "..", "gdb", "memlyze.py")):
        if p and os.path.isfile(p):
            spec = importlib.util.spec_from_file_location("memlyze_core", p)
            mod = importlib.util.module_from_spec(spec)
            sys.modules["memlyze_core"] = mod
            spec.loader.exec_module(mod)
            return mod
    raise ImportError("memlyze: cannot find ../gdb/memlyze.py next to %s (set MEMLYZE_GDB_SCRIPT)" % __file__)


core = _load_core()
MlzError, MlzMemory = core.MlzError, core.MlzMemory
INVALID = 0xFFFFFFFFFFFFFFFF


def _path(fs):
    """A SBFileSpec as a path ("" if none)."""
    if fs is None or not fs.IsValid() or not fs.GetFilename():
        return ""
    d = fs.GetDirectory()
    return d + "/" + fs.GetFilename() if d else fs.GetFilename()


class LldbTarget(object):
    def __init__(self, debugger):
        self.target = debugger.GetSelectedTarget()
        self.process = self.target.GetProcess() if self.target.IsValid() else None
        if self.process is None or not self.process.IsValid() or \
                self.process.GetState() in (lldb.eStateInvalid, lldb.eStateExited, lldb.eStateDetached):
            raise MlzError("no process: launch or attach to the program, or open a core file")
        self.is_core = self.process.GetPluginName() == "elf-core"
        self.pid = self.process.GetProcessID()
        self._sym = {}

    def describe(self):
        return "core file of process %d" % self.pid if self.is_core else "process %d" % self.pid

    def read(self, addr, n):
        err = lldb.SBError()
        data = self.process.ReadMemory(addr, n, err)
        if (err.Fail() or data is None or len(data) != n) and self.is_core:
            # Read-only data (strings) is not in a core: the module files have it.
            err = lldb.SBError()
            data = self.target.ReadMemory(self.target.ResolveLoadAddress(addr), n, err)
        if err.Fail() or data is None or len(data) != n:
            raise MlzMemory(addr, n)
        return bytes(data)

    def now_us(self):
        # A core's own time is not in lldb's API: None lets the snapshot use
        # the newest birth in the map (the heap's last change before the end).
        return None if self.is_core else int(time.time() * 1e6)

    def exe(self):
        if not self.is_core:
            try:
                return os.readlink("/proc/%d/exe" % self.pid)
            except OSError:
                pass
        return _path(self.target.GetExecutable())

    def cmdline(self):
        return [] if self.is_core else core.read_cmdline(self.pid)

    def modules(self):
        if not self.is_core:
            try:
                with open("/proc/%d/maps" % self.pid) as f:
                    maps = core.parse_maps_text(f.read())
                return core.modules_from_mappings(maps, core.live_open_mapping(self.pid))
            except (IOError, OSError):
                pass
        # A core: the loaded segments lldb knows, the build-id from the file.
        mods = []
        for m in self.target.module_iter():
            path = _path(m.GetFileSpec())
            lo, hi, bias = None, None, None
            for i in range(m.GetNumSections()):
                s = m.GetSectionAtIndex(i)
                la = s.GetLoadAddress(self.target)
                if la == INVALID or not s.GetName().startswith("PT_LOAD"):
                    continue
                bias = (la - s.GetFileAddress()) & core.MASK64
                lo = la if lo is None or la < lo else lo
                e = la + max(1, s.GetFileByteSize())
                hi = e if hi is None or e > hi else hi
            if lo is None:
                continue
            lo &= ~0xFFF
            hi = (hi + 0xFFF) & ~0xFFF
            bid = b""
            f = core.file_open_mapping(lo, hi, path) if path.startswith("/") else None
            if f is not None:
                try:
                    facts = core.elf_facts(f)
                finally:
                    f.close()
                if facts:
                    bid = facts[1]
            mods.append(core.Module(path, lo, hi, bias, bid))
        mods.sort(key=lambda m: m.start)
        return mods

    def symbolize(self, pc, m):
        """[(func, file, line, inlined)], innermost inline first: the line
        entry of pc-1, then each inlined block's call site outward."""
        q = pc - 1 if pc else 0
        addr = self.target.ResolveLoadAddress(q)
        sc = self.target.ResolveSymbolContextForAddress(addr, lldb.eSymbolContextEverything)
        le = sc.GetLineEntry()
        fname, line = (_path(le.GetFileSpec()), le.GetLine()) if le.IsValid() else ("", 0)
        out = []
        blk = sc.GetBlock()
        inl = blk.GetContainingInlinedBlock() if blk.IsValid() else None
        while inl is not None and inl.IsValid():
            out.append((inl.GetInlinedName() or "??", fname, line, True))
            fname, line = _path(inl.GetInlinedCallSiteFile()), inl.GetInlinedCallSiteLine()
            parent = inl.GetParent()
            inl = parent.GetContainingInlinedBlock() if parent.IsValid() else None
        fn = sc.GetFunction()
        name = fn.GetName() if fn.IsValid() else None
        if not name and sc.GetSymbol().IsValid():
            name = sc.GetSymbol().GetName()
        out.append((name or core.unknown_frame(pc, m), fname, line, False))
        return out

    def bloom(self):
        v = self.target.FindFirstGlobalVariable("mlz__g")
        if not v.IsValid():
            return None
        b = v.GetChildMemberWithName("bloom")
        if not b.IsValid() or not b.GetChildMemberWithName("mask").IsValid():
            return None
        return (b.GetChildMemberWithName("mask").GetValueAsUnsigned() + 1,
                b.GetChildMemberWithName("nonzero").GetValueAsUnsigned(),
                b.GetChildMemberWithName("stuck").GetValueAsUnsigned())


def _find_payload(t):
    for sc in t.target.FindSymbols(core.INFO_SYMBOL):
        s = sc.GetSymbol()
        a = s.GetStartAddress().GetLoadAddress(t.target) if s.IsValid() else INVALID
        if a != INVALID:
            return core.Payload(t, a), _path(sc.GetModule().GetFileSpec())
    raise core.NoPayload("no memlyze payload in this %s (memlyze attach loads one; memlyze run starts a program "
                   "with it)" % ("core file" if t.is_core else "process"))


# -- attach / detach through expression evaluation ---------------------------

_sessions = {}


def _thread_unsafe(t, thread):
    for k in range(min(thread.GetNumFrames(), 64)):
        f = thread.GetFrameAtIndex(k)
        le = f.GetLineEntry()
        why = core.frame_unsafe(f.GetFunctionName(), _path(f.GetModule().GetFileSpec()),
                                _path(le.GetFileSpec()) if le.IsValid() else "")
        if why:
            return why
    return None


def _safe_thread(t):
    proc = t.process
    sel = proc.GetSelectedThread()
    threads = [sel] + [th for th in proc if th.GetThreadID() != sel.GetThreadID()]
    why = {}
    for th in threads:
        w = _thread_unsafe(t, th)
        if not w:
            if th.GetThreadID() != sel.GetThreadID():
                proc.SetSelectedThread(th)
                return "memlyze: thread %d (LWP %d) is %s; calling from thread %d (LWP %d)" % (
                    sel.GetIndexID(), sel.GetThreadID(), why[sel.GetThreadID()], th.GetIndexID(), th.GetThreadID())
            return None
        why[th.GetThreadID()] = w
    raise MlzError("no thread is at a safe point (thread %d, LWP %d, is %s); continue a little and retry"
                   % (sel.GetIndexID(), sel.GetThreadID(), why[sel.GetThreadID()]))


def _call(t, expr):
    """Evaluates expr in the selected thread; other threads run meanwhile and
    breakpoints are ignored. Returns the SBValue."""
    o = lldb.SBExpressionOptions()
    o.SetIgnoreBreakpoints(True)
    o.SetUnwindOnError(True)
    o.SetTryAllThreads(True)
    o.SetStopOthers(False)
    o.SetTimeoutInMicroSeconds(30 * 1000000)
    o.SetLanguage(lldb.eLanguageTypeC)
    frame = t.process.GetSelectedThread().GetFrameAtIndex(0)
    v = frame.EvaluateExpression(expr, o) if frame.IsValid() else t.target.EvaluateExpression(expr, o)
    if not v.IsValid() or v.GetError().Fail():
        msg = v.GetError().GetCString() if v.IsValid() else "no value"
        raise MlzError("the call into the program failed: %s" % (msg or "?").strip().splitlines()[0])
    return v


def _c_string(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _strerror(t, code):
    try:
        return _call(t, "(const char *)memlyze_strerror(%d)" % code).GetSummary().strip('"')
    except MlzError:
        return "error %d" % code


def do_attach(t, argv, say):
    rate, out, lib, spool, unwind = core.parse_attach_args(argv)
    if t.is_core:
        raise MlzError("a core file cannot be profiled: attach and detach need a live process")
    out = out or os.path.abspath("memlyze.%d.mlyze" % t.pid)
    spool = spool or out + ".spool"
    for f in (out, spool):
        if os.path.exists(f):
            raise MlzError("%s exists: detach would not replace it (choose another --output)" % f)
    try:
        p, path = _find_payload(t)
        if p.attached or p.ready:
            raise MlzError("memlyze is already %s in process %d (memlyze detach stops it)"
                           % ("attached" if p.attached else "sampling (preloaded)", t.pid))
    except core.NoPayload:
        path = None
    note = _safe_thread(t)
    if note:
        say(note)
    if path is None:
        lib = lib or core.default_library()
        if not lib:
            raise MlzError("cannot find libmemlyze.so: use --lib PATH or set MEMLYZE_PAYLOAD")
        h = _call(t, "(void *)dlopen(%s, 2)" % _c_string(lib)).GetValueAsUnsigned()
        if not h:
            raise MlzError("dlopen(%s) failed in process %d" % (lib, t.pid))
    config = "rate=%d;spool=%s;unwind=%s" % (rate, spool, unwind)
    rc = _call(t, "(int)memlyze_attach(%s)" % _c_string(config)).GetValueAsSigned()
    if rc < 0:
        raise MlzError("the payload could not start in process %d: %s" % (t.pid, _strerror(t, rc)))
    _sessions[t.pid] = {"spool": spool, "output": out}
    why = core.write_attach_record(t.pid, out, spool, rate)
    return ("memlyze: attached to process %d, rate %d B%s, spool %s; `memlyze detach` writes %s%s"
            % (t.pid, rate, " (exact)" if rate == 1 else "", spool, out,
               "" if not why else " (memlyze-detach cannot: %s)" % why))


def do_detach(t, argv, say):
    out, spool = core.parse_detach_args(argv)
    if t.is_core:
        raise MlzError("a core file cannot be profiled: attach and detach need a live process")
    p, _ = _find_payload(t)
    if not p.attached:
        raise MlzError("memlyze is not attached to process %d%s" % (
            t.pid, " (it was preloaded: it stops when the program exits)" if p.ready else ""))
    sess = _sessions.get(t.pid, {})
    rec = core.read_attach_record(t.pid) or {}     # memlyze-attach's (or ours)
    spool = spool or sess.get("spool") or rec.get("spool_here")
    if not spool:
        v = t.target.FindFirstGlobalVariable("mlz__g")
        sp = v.GetChildMemberWithName("spool_path") if v.IsValid() else None
        if sp is not None and sp.IsValid() and sp.GetLoadAddress() != INVALID:
            spool = core.read_cstring(t, sp.GetLoadAddress(), 4096) or None
    out = out or sess.get("output") or rec.get("output") \
        or (spool[:-6] if spool and spool.endswith(".mlyze.spool") else None) \
        or os.path.abspath(core.default_name(t.pid))
    if os.path.exists(out):
        raise MlzError("%s exists: not replaced (use --output)" % out)
    note = _safe_thread(t)
    if note:
        say(note)
    rc = _call(t, "(int)memlyze_detach()").GetValueAsSigned()
    if rc < 0:
        raise MlzError("detach in process %d: %s" % (t.pid, _strerror(t, rc)))
    _sessions.pop(t.pid, None)
    if not spool:
        return "memlyze: detached from process %d; spool path unknown: finalize it with memlyze finalize" % t.pid
    msg = core.finalize_spool(spool, out)
    core.remove_attach_record(t.pid)
    return "memlyze: detached from process %d; %s" % (t.pid, msg)


# -- the command ---------------------------------------------------------------

USAGE = {
    "status": "memlyze status",
    "snapshot": "memlyze snapshot [FILE]",
    "top": "memlyze top [N] [--frames F]",
    "attach": "memlyze attach [--rate N] [--output FILE] [--spool FILE] [--lib PATH] [--unwind fp|dwarf]",
    "detach": "memlyze detach [--output FILE] [--spool FILE]",
}

LONG_HELP = """The memlyze heap profiler, inside lldb.

memlyze status          is the payload in this process or core; rate, counters, tables
memlyze snapshot [FILE] write the sampled live heap as a .mlyze snapshot
                        (default memlyze.PID.N.mlyze; never replaces a file)
memlyze top [N] [--frames F]
                        the N biggest live allocation sites, with 95% intervals
memlyze attach [--rate N] [--output FILE] [--spool FILE] [--lib PATH]
                        load the profiler and start sampling (rate 1 = exact)
memlyze detach [--output FILE]
                        stop sampling, seal the spool and write the trace

status, snapshot and top read the payload's tables through lldb's memory
access and run no code in the program: they work on a stopped process and on
a core file. attach and detach call into the program (expression evaluation)
from a thread that is not inside malloc, the dynamic loader or the payload."""


class MemlyzeCommand(object):
    def __init__(self, debugger, internal_dict):
        pass

    def get_short_help(self):
        return "memlyze heap profiler: status, snapshot [FILE], top [N], attach, detach"

    def get_long_help(self):
        return LONG_HELP

    def __call__(self, debugger, command, exe_ctx, result):
        try:
            argv = shlex.split(command)
        except ValueError as e:
            result.SetError("memlyze: %s" % e)
            return
        if not argv or argv[0] in ("help", "-h", "--help"):
            result.AppendMessage(LONG_HELP)
            return
        sub, args = argv[0], argv[1:]
        if sub not in USAGE:
            result.SetError("memlyze: unknown command '%s' (see help memlyze)" % sub)
            return
        try:
            t = LldbTarget(debugger)
            if sub == "status":
                if args:
                    raise MlzError("usage: " + USAGE[sub])
                p, path = _find_payload(t)
                result.AppendMessage(core.cmd_status(t, p, path))
            elif sub == "snapshot":
                if len(args) > 1:
                    raise MlzError("usage: " + USAGE[sub])
                p, _ = _find_payload(t)
                result.AppendMessage(core.cmd_snapshot(t, p, os.path.expanduser(args[0]) if args else None))
            elif sub == "top":
                n, nf = 10, 4
                try:
                    while args:
                        x = args.pop(0)
                        if x == "--frames" and args:
                            nf = int(args.pop(0))
                        else:
                            n = int(x)
                except ValueError:
                    raise MlzError("usage: " + USAGE[sub])
                if n <= 0 or nf <= 0:
                    raise MlzError("usage: " + USAGE[sub])
                p, _ = _find_payload(t)
                result.AppendMessage(core.cmd_top(t, p, n, nf))
            elif sub == "attach":
                result.AppendMessage(do_attach(t, args, result.AppendMessage))
            elif sub == "detach":
                result.AppendMessage(do_detach(t, args, result.AppendMessage))
        except MlzError as e:
            result.SetError("memlyze: %s" % e)


def __lldb_init_module(debugger, internal_dict):
    debugger.HandleCommand("command script add -c %s.MemlyzeCommand memlyze" % __name__)
