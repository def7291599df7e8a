#!/usr/bin/env python3
# code_bytes.py PID BINARY SYMBOL [FILE]: 16 bytes (hex) at SYMBOL, a function
# of the executable BINARY, in the running process PID; with the word FILE,
# the same bytes as the file holds them. Inline-hook tests compare the two.
import struct, subprocess, sys

pid, exe, sym = sys.argv[1], sys.argv[2], sys.argv[3]
va = None
for line in subprocess.run(["readelf", "-sW", exe], capture_output=True, text=True).stdout.splitlines():
    f = line.split()
    if len(f) >= 8 and f[7] == sym and f[3] == "FUNC":
        va = int(f[1], 16)
        break
if va is None:
    sys.exit("no function %s in %s" % (sym, exe))
if len(sys.argv) > 4 and sys.argv[4] == "FILE":
    d = open(exe, "rb").read()
    phoff, = struct.unpack_from("<Q", d, 32)
    phentsize, phnum = struct.unpack_from("<HH", d, 54)
    for i in range(phnum):
        t, fl, off, vaddr, pa, filesz = struct.unpack_from("<IIQQQQ", d, phoff + i * phentsize)
        if t == 1 and vaddr <= va < vaddr + filesz:
            print(d[off + va - vaddr: off + va - vaddr + 16].hex())
            break
    sys.exit(0)
base = 0
if open(exe, "rb").read(18)[16] == 3:   # PIE: the lowest mapping of the executable is its load bias
    for line in open("/proc/%s/maps" % pid):
        if line.rstrip().endswith(exe):
            base = int(line.split("-")[0], 16)
            break
with open("/proc/%s/mem" % pid, "rb") as m:
    m.seek(base + va)
    print(m.read(16).hex())
