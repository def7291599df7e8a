# libmemlyze.so-gdb.py - gdb's auto-load hook for the memlyze payload.
#
# gdb runs OBJFILE-gdb.py when it loads OBJFILE and finds this file beside it
# or under its auto-load directory (e.g. /usr/share/gdb/auto-load/usr/lib/
# memlyze/libmemlyze.so-gdb.py), in a directory of `auto-load safe-path`.
# So attaching gdb to a profiled process, or opening its core, brings the
# memlyze commands without a `source`. The commands live in memlyze.py,
# installed in PREFIX/share/memlyze/gdb/; this hook only finds and loads it,
# once per gdb session.
import importlib.util
import os
import sys

import gdb

if not getattr(gdb, "memlyze_commands_loaded", False):
    _here = os.path.dirname(os.path.abspath(__file__))
    _obj = gdb.current_objfile()
    # PREFIX/lib/memlyze/libmemlyze.so -> PREFIX/share/memlyze/gdb/memlyze.py
    _libdir = os.path.dirname(os.path.realpath(_obj.filename)) if _obj is not None else _here
    for _p in (os.path.join(_here, "memlyze.py"),
               os.path.join(_libdir, "..", "..", "share", "memlyze", "gdb", "memlyze.py"),
               os.path.join(_libdir, "..", "share", "memlyze", "gdb", "memlyze.py")):
        if os.path.isfile(_p):
            # As a module of its own (not `source`, which would run it in
            # __main__ with this file's __file__).
            _spec = importlib.util.spec_from_file_location("memlyze_gdb", os.path.normpath(_p))
            _mod = importlib.util.module_from_spec(_spec)
            sys.modules["memlyze_gdb"] = _mod
            _spec.loader.exec_module(_mod)
            break
