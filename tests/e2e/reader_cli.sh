#!/usr/bin/env bash
# The memlyze reader commands on files made from the dump texts in
# tests/fuzz/seeds: validate, dump/undump byte identity, stats, top, errors.
. "$(dirname "$0")/lib.sh"
SEEDS="$ROOT/tests/fuzz/seeds"

for s in "$SEEDS"/*.txt; do
    n=$(basename "$s" .txt)
    check "undump $n" "$MEMLYZE" undump -o "$T/$n.mlyze" "$s"
    check "validate $n" bash -c "'$MEMLYZE' validate '$T/$n.mlyze' | grep -q ': ok'"
    # dump of the binary reproduces the seed (t= fields aside) ...
    "$MEMLYZE" dump "$T/$n.mlyze" > "$T/$n.dump"
    check "dump $n matches its source" bash -c "diff <(sed 's/ t=[0-9]*//; s/stream_len=.*//' '$s') <(sed 's/ t=[0-9]*//; s/stream_len=.*//' '$T/$n.dump')"
    # ... and dump -> undump gives the identical bytes back.
    check "undump(dump($n)) is byte-identical" bash -c "'$MEMLYZE' undump -o '$T/$n.2.mlyze' '$T/$n.dump' && cmp '$T/$n.mlyze' '$T/$n.2.mlyze'"
done

check "lz4 seed has its index" test -f "$T/lz4.mlyze.idx"
check "undump refuses to overwrite" bash -c "! '$MEMLYZE' undump -o '$T/trace.mlyze' '$SEEDS/trace.txt' 2>/dev/null"
check "undump -f overwrites" "$MEMLYZE" undump -f -o "$T/trace.mlyze" "$SEEDS/trace.txt"

# A damaged file: one line naming the rule and the byte offset, exit 1.
cp "$T/trace.mlyze" "$T/bad.mlyze"
printf 'X' | dd of="$T/bad.mlyze" bs=1 seek=0 conv=notrunc 2>/dev/null
out=$("$MEMLYZE" validate "$T/bad.mlyze" 2>&1); rc=$?
check "validate names rule 1 and offset" bash -c "[ $rc -eq 1 ] && [ \$(printf '%s\n' \"$out\" | wc -l) -eq 1 ] && printf '%s' \"$out\" | grep -q 'rule 1 (magic) at byte 0'"
head -c 300 "$T/trace.mlyze" > "$T/cut.mlyze"
out=$("$MEMLYZE" validate "$T/cut.mlyze" 2>&1); rc=$?
check "validate reports truncation" bash -c "[ $rc -eq 1 ] && printf '%s' \"$out\" | grep -q 'rule 7 (size)'"
out=$("$MEMLYZE" validate "$T/trace.mlyze" "$T/cut.mlyze" 2>&1); rc=$?
check "validate: one ok, one bad => exit 1" bash -c "[ $rc -eq 1 ] && printf '%s' \"$out\" | grep -q ': ok'"
out=$("$MEMLYZE" validate "$T/missing.mlyze" 2>&1); rc=$?
check "missing file: one line, exit 1" bash -c "[ $rc -eq 1 ] && printf '%s' \"$out\" | grep -q 'No such file'"

# stats and top read the same file.
check "stats counts events" bash -c "'$MEMLYZE' stats '$T/trace.mlyze' | grep -q 'events: *6'"
check "stats sees the peak" bash -c "'$MEMLYZE' stats '$T/trace.mlyze' | grep -q 'peak live'"
check "top names the big site first" bash -c "'$MEMLYZE' top '$T/trace.mlyze' | awk '/^ +1 /' | grep -q 'work (b.c:7)'"
check "top --by allocated" bash -c "'$MEMLYZE' top --by allocated -n 5 '$T/trace.mlyze' | grep -q 'main (a.c:42)'"
check "top refuses a spool" bash -c "out=\$('$MEMLYZE' top '$T/spool.mlyze' 2>&1); [ \$? -ne 0 ] && printf '%s' \"\$out\" | grep -q finalize"

# Every command of main.c's table answers --help and is listed by
# memlyze --help; unknown commands and options fail cleanly.
cmds=$("$MEMLYZE" help --commands)
check "help --commands lists the command table" bash -c "[ \$(wc -l <<<\"\$0\") -ge 17 ] && grep -qx diff <<<\"\$0\"" "$cmds"
for c in $cmds; do
    check "$c --help" bash -c "'$MEMLYZE' $c --help | grep -q '^usage: memlyze $c'"
    check "memlyze --help lists $c" bash -c "'$MEMLYZE' --help | grep -q '^  $c '"
done
# Outputs that are not regular files are written, never replaced: a rename
# over /dev/null once turned it into a regular file for the whole machine.
"$MEMLYZE" undump -o "$T/dev.mlyze" "$ROOT/tests/e2e/reports/fixture.dump"
mkfifo "$T/fifo"
cat "$T/fifo" > "$T/fifo.out" & CATP=$!
check "export into a fifo writes through it" "$MEMLYZE" export --format json -o "$T/fifo" "$T/dev.mlyze"
wait "$CATP"
check "the fifo is still a fifo and got the document" bash -c "[ -p '$T/fifo' ] && python3 -c 'import json; json.load(open(\"$T/fifo.out\"))'"
if [ "$(id -u)" -eq 0 ]; then
    mknod -m 666 "$T/null" c 1 3
    for f in json pprof heaptrack dumpalloc; do
        check "export --format $f -o a character device leaves it a device" \
            bash -c "'$MEMLYZE' export --format $f -o '$T/null' '$T/dev.mlyze' && [ -c '$T/null' ]"
    done
else
    skip "export to a character device" "needs root for mknod"
fi
# A report never replaces a trace (its own input, or another).
cp "$T/dev.mlyze" "$T/victim.mlyze"
check "export -o onto its own input trace is refused" \
    bash -c "! '$MEMLYZE' export --format folded -o '$T/victim.mlyze' '$T/victim.mlyze' 2>/dev/null"
check "the refused trace is intact" cmp "$T/dev.mlyze" "$T/victim.mlyze"
check "flamegraph -o onto another trace is refused" \
    bash -c "! '$MEMLYZE' flamegraph -o '$T/victim.mlyze' '$T/dev.mlyze' 2>/dev/null && cmp '$T/dev.mlyze' '$T/victim.mlyze'"
check "export -o onto an older report replaces it" \
    bash -c "echo old > '$T/rep.txt' && '$MEMLYZE' export --format folded -o '$T/rep.txt' '$T/dev.mlyze' && ! grep -qx old '$T/rep.txt'"
# A directory where the index goes: the error names it, before any work,
# and no main file is left without its index.
mkdir "$T/dirx.mlyze.idx"
out=$("$MEMLYZE" convert --format split -o "$T/dirx.mlyze" "$T/dev.mlyze" 2>&1); rc=$?
check "convert names the index that is a directory" \
    bash -c "[ $rc -eq 1 ] && grep -q 'dirx.mlyze.idx: Is a directory' <<<\"\$0\" && [ ! -e '$T/dirx.mlyze' ]" "$out"
# A trace in which nothing was ever live has no peak time (it printed
# 0 - the start time, an offset of 584942 years).
printf 'int main(void) { return 0; }\n' > "$T/none.c" && cc -o "$T/none" "$T/none.c"
"$MEMLYZE" run -r 1 -o "$T/none.mlyze" -- "$T/none" 2>/dev/null
check "stats: no peak time when nothing was live" bash -c "'$MEMLYZE' stats '$T/none.mlyze' | grep -qx 'peak live: *0 B'"
# Blocks of 0 B never freed are leaks too: top counts them, so does leaks.
cat > "$T/zero.c" <<'EOF'
#include <stdlib.h>
void *volatile keep[6];
__attribute__((noinline)) void zero_site(void) { for (int i = 0; i < 5; i++) keep[i] = malloc(0); }
int main(void) { zero_site(); keep[5] = malloc(10); return 0; }
EOF
cc -O1 -g -o "$T/zero" "$T/zero.c" && "$MEMLYZE" run -r 1 -o "$T/zero.mlyze" -- "$T/zero" 2>/dev/null
check "leaks lists a site of 0 B blocks with its 5 objects" bash -c "'$MEMLYZE' leaks --age 0 --json '$T/zero.mlyze' | python3 -c \"
import json, sys
s = [x for x in json.load(sys.stdin)['sites'] if x['frames'][0].startswith('zero_site ')]
sys.exit(not (len(s) == 1 and s[0]['count'] == 5))\""
check "unknown command exits 2" bash -c "'$MEMLYZE' frobnicate 2>/dev/null; [ \$? -eq 2 ]"
check "bad option exits 2" bash -c "'$MEMLYZE' top --bogus x 2>/dev/null; [ \$? -eq 2 ]"
# Numbers that strtod takes but no time or share is: a usage error each,
# never a report computed from a cast of NaN or of an overflowing double.
for a in "top --at nan" "top --at inf" "top --at 1e20" "diff --from nan --to 1" "tree --min-share nan" \
         "tree --min-share 101" "leaks --age nan" "leaks --age 1e14" "temporary --within inf"; do
    check "$a exits 2" bash -c "'$MEMLYZE' $a '$T/trace.mlyze' >/dev/null 2>&1; [ \$? -eq 2 ]"
done
# A function name with an escape sequence and a newline (a hostile binary):
# text reports print '?' for control characters, JSON keeps the name exact.
sed 's/"0":"main"/"0":"ma\\\\u001b[31min\\\\nx"/' "$SEEDS/trace.txt" > "$T/ctl.txt"
"$MEMLYZE" undump -o "$T/ctl.mlyze" "$T/ctl.txt"
for c in "top" "top --by allocated" "tree" "leaks --age 0" "temporary --within 1" "diff --from 0 --to 1"; do
    check "$c prints no control character from a name" bash -c \
        "out=\$('$MEMLYZE' $c '$T/ctl.mlyze') && grep -q 'ma?\[31min?x' <<<\"\$out\" && ! grep -q \$'\\x1b' <<<\"\$out\""
done
check "top --json keeps the name exact" bash -c "'$MEMLYZE' top --json '$T/ctl.mlyze' | grep -qi 'ma\\\\u001b\\[31min\\\\nx'"

# The seed trace's first allocation comes 1 s after its start.
sed 's/^alloc dt=0 t=0 /alloc dt=1000000 t=0 /' "$SEEDS/trace.txt" > "$T/late.txt"
"$MEMLYZE" undump -o "$T/late.mlyze" "$T/late.txt"
check "diff from an empty heap says so, not +0.0%" bash -c \
    "'$MEMLYZE' diff --from 0.5 --to 1e9 '$T/late.mlyze' | head -1 | grep -q '^live heap 0 B -> .* (from nothing); '"
# Inputs that are no files: a FIFO nobody writes is refused at once (its
# open used to wait for a writer forever), /dev/zero and a directory are
# refused by undump (it read /dev/zero into memory without end), an empty
# file is no dumpalloc recording.
mkfifo "$T/in.fifo"
for c in "validate" "stats" "top" "dump" "tree" "leaks" "temporary" "diff $T/dev.mlyze" \
         "convert --format v1 -o $T/fifo.conv" "export --format pprof -o $T/fifo.pb" "flamegraph -o $T/fifo.svg" \
         "timeline -o $T/fifo.tl.svg" "finalize -o $T/fifo.fin" "import dumpalloc -o $T/fifo.da" \
         "import heaptrack -o $T/fifo.ht" "replay"; do
    check "$c FIFO: refused at once, one line" bash -c "out=\$(timeout 10 '$MEMLYZE' $c '$T/in.fifo' 2>&1); rc=\$?
        [ \$rc -eq 1 ] && [ \$(wc -l <<<\"\$out\") -eq 1 ] && grep -q 'not a regular file' <<<\"\$out\""
done
check "retainers FIFO: refused at once" bash -c "timeout 10 '$MEMLYZE' retainers --site x '$T/in.fifo' 2>/dev/null; [ \$? -eq 1 ]"
out=$(timeout 10 "$MEMLYZE" undump -o "$T/devzero.mlyze" /dev/zero 2>&1); rc=$?
check "undump /dev/zero: refused at its first line" bash -c "[ $rc -eq 1 ] && grep -q '^memlyze undump: /dev/zero:1: not memlyze dump text' <<<\"\$0\" && [ ! -e '$T/devzero.mlyze' ]" "$out"
out=$("$MEMLYZE" undump -o "$T/dir.mlyze" "$T" 2>&1); rc=$?
check "undump of a directory names the cause" bash -c "[ $rc -eq 1 ] && grep -q 'Is a directory' <<<\"\$0\"" "$out"
: > "$T/empty.bin"
out=$("$MEMLYZE" undump -o "$T/empty.mlyze" "$T/empty.bin" 2>&1); rc=$?
check "undump of an empty file: empty input" bash -c "[ $rc -eq 1 ] && grep -q 'empty input' <<<\"\$0\"" "$out"
out=$("$MEMLYZE" import dumpalloc -o "$T/empty.da.mlyze" "$T/empty.bin" 2>&1); rc=$?
check "import dumpalloc of an empty file: refused, nothing written" bash -c "[ $rc -eq 1 ] && grep -q 'empty file: no dumpalloc record' <<<\"\$0\" && [ ! -e '$T/empty.da.mlyze' ]" "$out"

# The HTTP server library (with gnutls and eight more) and libstdc++ are
# loaded by the commands that use them (serve; a C++ name to demangle), not
# by every command at its start (they took half of it).
check "memlyze --help loads neither libmicrohttpd, gnutls nor libstdc++" bash -c "
    out=\$(LD_DEBUG=libs '$MEMLYZE' --help 2>&1 >/dev/null); grep -q 'calling init' <<<\"\$out\" &&
    ! grep 'calling init' <<<\"\$out\" | grep -q 'microhttpd\|gnutls\|libstdc++'"
finish
