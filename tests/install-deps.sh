#!/usr/bin/env bash
# Installs the Debian packages memlyze's build and tests need, saying which.
# Run as root (or with sudo available). Safe to re-run: installs only what is missing.
set -eu
pkgs=(
  gcc make pkg-config
  libelf-dev        # reading ELF files and modules (injector, gotpatch)
  libdw-dev         # DWARF symbolization: function, file:line, inlines, debug links
  libdeflate-dev    # inflating compressed debug files for libdw, twice as fast as zlib
  libcapstone-dev   # disassembly for the blind-spot report
  liblz4-dev        # the .mlyze Phase 2 block compression
  libzstd-dev       # entropy coding of split-stream trace blocks (tools only)
  libjansson-dev    # parsing the .mlyze JSON metadata
  zlib1g-dev        # gzip for pprof export
  clang libclang-rt-14-dev  # libFuzzer and sanitizer runtimes for the fuzzer
  gdb               # debugger integration tests
  python3
  redis-server redis-tools  # attach/snapshot tests against a real server under load
  bc                # benchmark scripts
  strace            # the tests that refuse an already-traced process (attach, heapdump)
  valgrind          # the reader under memcheck: no memory error, no leak (e2e/reader_valgrind.sh)
  libc6-dbg         # glibc's lock layout from debug info (the injector checks it against its table)
  lldb              # the lldb commands' tests
  protobuf-compiler # checks pprof exports against the published profile.proto
  python3-jsonschema  # checks speedscope exports against their published schema
  golang-go golang-github-google-pprof-dev  # builds the real pprof tool, offline, to read our exports
  chromium          # opens the flame graphs headless and looks at them
  libncurses-dev    # memlyze watch: the terminal view (curses, works over ssh in 80x24)
  tmux              # drives memlyze watch in a real terminal in its test
  libmicrohttpd-dev # memlyze serve: the embedded HTTP server (request parsing is the library's)
  libjemalloc2 libtcmalloc-minimal4 libmimalloc2.0  # allocators memlyze replay compares
  heaptrack         # heaptrack_print reads our heaptrack exports; bench/compare.sh measures against it
  libjemalloc-dev   # libjemalloc.a / libjemalloc_pic.a: inline-hook tests link the allocator into the executable
  libgoogle-perftools-dev   # libtcmalloc_minimal.a: the same with tcmalloc
)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then echo "deps: all present"; exit 0; fi
echo "deps: installing ${missing[*]}"
SUDO=; [ "$(id -u)" -eq 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "deps: done"
