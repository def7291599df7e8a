#!/usr/bin/env python3
"""synth_trace.py - synthetic exact traces (memlyze dump text, for `memlyze
undump`) whose replay differs between allocators in a known direction.

  synth_trace.py tiny N       N blocks of 8 bytes, all live at the end:
                              glibc's smallest chunk is 32 bytes, the size-class
                              allocators (jemalloc, tcmalloc, mimalloc) have an
                              8-byte class, so glibc's RSS over live bytes is
                              several times theirs.
  synth_trace.py timed N      N blocks of 1000 bytes, 10 ms apart, made by two
                              threads in turn, each freed right after (for
                              --timing and the thread count).
"""
import json, sys

kind, n = sys.argv[1], int(sys.argv[2])
meta = {"kind": "trace", "rate": 1, "pid": 1, "exe": "/synthetic", "clock": "realtime",
        "stack_traces": {"1": [{"file_id": 0, "line": 1, "func_id": 1}],
                         "2": [{"file_id": 0, "line": 2, "func_id": 2}]},
        "files": {"0": "synth.c"}, "functions": {"1": "small", "2": "large"}}
out = ["mlyze-dump 1", "header version=1 start_us=1700000000000000 flags=0x1 stream_len=0 event_count=0 raw_len=0",
       "meta " + json.dumps(meta, separators=(",", ":"))]
ev = 0
def alloc(addr, size, stack, thread=1, dt=1):
    global ev; ev += 1
    out.append("alloc dt=%d t=0 addr=0x%x size=%d stack=%d thread=%d" % (dt, addr, size, stack, thread))
def free(addr):
    global ev; ev += 1
    out.append("free dt=1 t=0 addr=0x%x" % addr)
if kind == "tiny":
    for i in range(n):
        alloc(0x10000000 + 16 * i, 8, 1)
elif kind == "timed":
    for i in range(n):
        alloc(0x10000000 + 4096 * i, 1000, 1 + i % 2, thread=1 + i % 2, dt=10000)
        free(0x10000000 + 4096 * i)
else:
    sys.exit("unknown kind " + kind)
out.append("end events=%d" % ev)
print("\n".join(out))
