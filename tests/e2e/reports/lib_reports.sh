# lib_reports.sh - what the report tests share (sourced after tests/e2e/lib.sh):
# the fixture and real traces, a Python that has jsonschema, and headless
# Chromium. Tools that are missing print one "SKIP: ..." line naming the
# Debian package (tests/install-deps.sh installs them all).
R="$ROOT/tests/e2e/reports"

# A Python with jsonschema: the default one, else Debian's (python3-jsonschema).
PY=python3
HAVE_JSONSCHEMA=0
for c in python3 /usr/bin/python3; do
    if "$c" -c 'import jsonschema' 2>/dev/null; then PY=$c; HAVE_JSONSCHEMA=1; break; fi
done

# The fixture: a hand-written exact trace (tests/e2e/reports/fixture.dump)
# with an inlined frame, two stacks of one site, a non-PIE and a PIE module,
# names that need escaping and three markers. Live at the end: grow_site 5000,
# inner 200, the odd names 7 + 5; at +1 ms: grow_site 2000, inner 100.
fixture() {   # fixture OUT.mlyze
    "$MEMLYZE" undump -f -o "$1" "$R/fixture.dump" >/dev/null
}

# known.c in exact mode: site_malloc holds exactly 100000 bytes at the end.
known_trace() {   # known_trace OUT.mlyze [RATE]
    [ -x "$T/known" ] || cc -O2 -g -fno-omit-frame-pointer -pthread -o "$T/known" "$ROOT/tests/targets/known.c"
    "$MEMLYZE" run -r "${2:-1}" --seed 7 -o "$1" -- "$T/known" >/dev/null 2>&1
}

CHROMIUM=$(command -v chromium || command -v chromium-browser || true)
# shot URL OUT.png [WIDTHxHEIGHT]: a headless screenshot, no network, fresh profile.
shot() {
    local prof
    prof=$(mktemp -d "$T/chrome.XXXXXX")
    timeout 60 "$CHROMIUM" --headless --no-sandbox --disable-gpu --disable-background-networking \
        --disable-component-update --disable-sync --no-first-run --user-data-dir="$prof" \
        --screenshot="$2" --window-size="${3:-1200,600}" "$1" >/dev/null 2>&1
}
# dom URL: the document after its scripts ran.
dom() {
    local prof
    prof=$(mktemp -d "$T/chrome.XXXXXX")
    timeout 60 "$CHROMIUM" --headless --no-sandbox --disable-gpu --disable-background-networking \
        --disable-component-update --disable-sync --no-first-run --user-data-dir="$prof" \
        --dump-dom "$1" 2>/dev/null
}
