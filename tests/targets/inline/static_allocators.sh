# static_allocators.sh - sourced by the inline-hook tests (after lib.sh,
# with S the folder of sites.c): builds sites.c against the allocators
# Debian ships as static libraries and appends what was built to $variants.
#   add_static_allocators TEST: jemalloc in a PIE (je_pie) and in a non-PIE
#   (je_nopie), tcmalloc (tc_static: malloc and tc_malloc one function);
#   a missing library is a SKIP named after TEST.
add_static_allocators() {
    local L=/usr/lib/x86_64-linux-gnu
    if [ -f $L/libjemalloc_pic.a ] && [ -f $L/libjemalloc.a ]; then
        cc -O2 -g -pie -fPIE -pthread -o "$T/je_pie" "$S/sites.c" $L/libjemalloc_pic.a -ldl -lm || fail "build je_pie"
        cc -O2 -g -no-pie -fno-PIE -pthread -o "$T/je_nopie" "$S/sites.c" $L/libjemalloc.a -ldl -lm || fail "build je_nopie"
        variants="$variants je_pie je_nopie"
    else
        skip "$1: jemalloc linked statically" "libjemalloc-dev not installed; make deps"
    fi
    if [ -f $L/libtcmalloc_minimal.a ]; then
        cc -O2 -g -pthread -o "$T/tc_static" "$S/sites.c" $L/libtcmalloc_minimal.a -lstdc++ -ldl -lm || fail "build tc_static"
        variants="$variants tc_static"
    else
        skip "$1: tcmalloc linked statically" "libgoogle-perftools-dev not installed; make deps"
    fi
}
