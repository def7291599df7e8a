#!/usr/bin/env bash
# Reports on a trace with known allocations (exact mode): tree, leaks,
# temporary, top --at and diff between two moments of one trace.
. "$(dirname "$0")/lib.sh"
cc -O2 -g -fno-omit-frame-pointer -pthread -o "$T/known" "$ROOT/tests/targets/known.c" || fail "build known"
"$MEMLYZE" run -r 1 -o "$T/k.mlyze" -- "$T/known" >/dev/null 2>&1
J() { python3 -c "import json, sys; d=json.load(open('$1')); $2"; }

"$MEMLYZE" tree "$T/k.mlyze" > "$T/tree.txt"
check "tree: main's inclusive covers its sites" bash -c "grep -E '^ +[0-9.]+ KiB .* main$' '$T/tree.txt' | head -1 | grep -q KiB"
"$MEMLYZE" tree --inverted --min-share 0 "$T/k.mlyze" > "$T/inv.txt"
check "tree --inverted: an allocation site at the top level" bash -c "grep -qE '%  site_thread$' '$T/inv.txt'"

"$MEMLYZE" leaks --age 0 --json -n 50 "$T/k.mlyze" > "$T/leaks.json"
check "leaks: site_malloc's 100000 B still live" J "$T/leaks.json" "sys.exit(0 if sum(s['bytes'] for s in d['sites'] if s['frames'][0].startswith('site_malloc')) == 100000 else 1)"
"$MEMLYZE" leaks --age 3600 --json "$T/k.mlyze" > "$T/old.json"
check "leaks: nothing is an hour old" J "$T/old.json" "sys.exit(0 if d['bytes'] == 0 else 1)"
"$MEMLYZE" temporary --within 1 --json -n 50 "$T/k.mlyze" > "$T/temp.json"
check "temporary: the 100000 churned blocks" J "$T/temp.json" "sys.exit(0 if sum(s['count'] for s in d['sites'] if s['frames'][0].startswith('churn')) == 100000 else 1)"
check "temporary: held blocks are not temporary" J "$T/temp.json" "sys.exit(0 if not any(s['frames'][0].startswith('site_malloc') for s in d['sites']) else 1)"

check "top --at 0: nothing live yet" bash -c "'$MEMLYZE' top --at 0 '$T/k.mlyze' | grep -q '(no allocation sites)'"
"$MEMLYZE" diff --json --from 0 --to 1e9 -n 50 "$T/k.mlyze" > "$T/d.json"
check "diff --from/--to over the whole trace = live at the end (406000 B)" J "$T/d.json" "sys.exit(0 if 400000 < d['growth_bytes'] < 420000 else 1)"
check "bad --at is a usage error" bash -c "'$MEMLYZE' top --at yesterday '$T/k.mlyze' 2>/dev/null; [ \$? -eq 2 ]"
finish
