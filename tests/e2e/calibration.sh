#!/usr/bin/env bash
# Sampled estimates through the real payload are calibrated: over 50 runs
# with fixed, different seeds, each site's true live bytes fall inside the
# reported 95% interval in at least 90% of (site, run) pairs, and the mean
# estimate over the runs is within 3 standard errors of the truth for every
# site (unbiased weights: the spec's constant weight S would miss the large
# sites by 37-76%, far outside that).
. "$(dirname "$0")/lib.sh"
cc -O2 -g -fno-omit-frame-pointer -o "$T/calib" "$ROOT/tests/targets/calib.c" || fail "build calib"
for seed in $(seq 1 50); do
    "$MEMLYZE" run -r 64k --seed "$seed" -o "$T/c$seed.mlyze" -- "$T/calib" 2>/dev/null
    "$MEMLYZE" top --json -n 50 "$T/c$seed.mlyze" > "$T/c$seed.json"
done
python3 - "$T" > "$T/calib.out" 2>&1 <<'PY' || fail "calibration figures computed" "$(tail -c 600 "$T/calib.out")"
import json, sys
truth = {"site_tiny": 20000*16, "site_small": 5000*200, "site_mid": 500*8192,
         "site_big": 20*262144, "site_huge": 4*(1 << 20)}
inside = total = 0
sums = {k: 0.0 for k in truth}
vars_ = {k: 0.0 for k in truth}
for seed in range(1, 51):
    d = json.load(open(f"{sys.argv[1]}/c{seed}.json"))
    est = {k: (0.0, 0.0) for k in truth}
    for s in d["sites"]:
        leaf = s["frames"][0].split(" ")[0]
        if leaf in est:
            e, c = est[leaf]
            est[leaf] = (e + s["live_bytes"], (c*c + s["live_bytes_ci95"]**2) ** 0.5)
    for k, t in truth.items():
        e, c = est[k]
        total += 1
        inside += abs(e - t) <= c
        sums[k] += e
        vars_[k] += (c / 1.96) ** 2
print(f"inside {inside} {total}")
for k, t in truth.items():
    se = vars_[k] ** 0.5 / 50
    print(f"bias {k} {sums[k] / 50 / t - 1:.4f} {abs(sums[k] / 50 - t) / se if se else 0:.2f}")
PY
read -r _ inside total < <(grep '^inside' "$T/calib.out")
# Empty figures would make the comparisons below true (0 -ge 0).
check "figures for 50 runs of 5 sites" bash -c "[ '${total:-}' = 250 ] && [ \$(grep -c '^bias' '$T/calib.out') -eq 5 ]"
[ "${total:-}" = 250 ] || finish
check "95% intervals cover the truth in >= 90% of $total site-runs ($inside)" test $((inside * 100)) -ge $((total * 90))
while read -r _ site bias z; do
    check "mean estimate of $site unbiased (relative error $bias, $z standard errors)" python3 -c "import sys; sys.exit(0 if $z < 3 else 1)"
done < <(grep '^bias' "$T/calib.out")
finish
