#!/usr/bin/env bash
# bench/sim_calibrate.py --quick end to end: measures 1x2 (one host), 2x1 and 3x1 (emulated
# hosts) with ddl_perf, fits ddl_sim's constants on 1x2 and 2x1, predicts 3x1, and writes the
# report and a cluster file. Checks that the report has every setup and collective with finite
# errors, that the cluster file holds the fitted values and that ddl_sim accepts it, and that
# --reuse measures nothing again. Timings and errors are never asserted (a shared machine).
#
#   test_sim_calibrate.sh [BUILD_DIR]      (default $DDL_BUILD_DIR, else build/)
# Skipped (77) without root or where emulated hosts cannot be made (network namespaces, tc).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-${DDL_BUILD_DIR:-$root/build}}" && pwd) || exit 1
export DDL_BUILD_DIR=$build
sim=$build/tools/ddl_sim/ddl_sim
for tool in "$sim" "$build/tools/ddl_perf/ddl_perf" "$build/tools/ddlrun/ddlrun"; do
  [ -x "$tool" ] || { echo "FAIL: $tool is not built"; exit 1; }
done
if [ "$(id -u)" != 0 ]; then
  echo "test_sim_calibrate: skipped: emulated hosts need root"
  exit 77
fi
if ! probe=$(timeout -k 5 60 "$root/tools/emuhosts/emuhosts" run --name simcalprobe$$ --hosts 1 --rate 1gbit -- true 2>&1); then
  echo "test_sim_calibrate: skipped: cannot make emulated hosts here: $probe"
  exit 77
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

echo "=== sim_calibrate.py --quick"
start=$SECONDS
timeout -k 10 600 python3 "$root/bench/sim_calibrate.py" --quick --measurements "$tmp/m.json" \
  --out "$tmp/r.json" --write-cluster "$tmp/fit.cluster" > "$tmp/out.txt" 2> "$tmp/err.txt"
rc=$?
cat "$tmp/out.txt"
echo "(--quick: exit status $rc, $((SECONDS - start)) s)"
if [ $rc -ne 0 ]; then
  fail "sim_calibrate.py --quick exited with $rc:"$'\n'"$(tail -30 "$tmp/err.txt")"
  exit 1
fi

# The report: every setup with its role, every collective, finite errors and positive times;
# the fitted constants; the measurements file. Prints what is wrong, one line each.
problems=$(python3 - "$tmp/r.json" "$tmp/m.json" << 'EOF'
import json, math, sys
report, meas = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
want = {"1x2": "fitted", "2x1": "fitted", "3x1": "held out"}
colls = ["allreduce", "allgather"]
keys = ["local_rate", "local_latency", "net_latency", "net_efficiency", "net_cpu_rate", "message_overhead",
        "call_overhead", "reduce_rate"]
bad = []
finite = lambda x: isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
got = {s["name"]: s for s in report.get("setups", [])}
if sorted(got) != sorted(want):
    bad.append("setups in the report: %s, want %s" % (sorted(got), sorted(want)))
for name, role in want.items():
    s = got.get(name)
    if not s:
        continue
    if s.get("role") != role:
        bad.append("%s: role %r, want %r" % (name, s.get("role"), role))
    if sorted(s.get("collectives", {})) != sorted(colls):
        bad.append("%s: collectives %s, want %s" % (name, sorted(s.get("collectives", {})), colls))
    for c, r in s.get("collectives", {}).items():
        for k in ("median_abs_error", "worst_abs_error", "initial_median_abs_error", "initial_worst_abs_error"):
            if not finite(r.get(k)) or r[k] < 0:
                bad.append("%s %s: %s = %r is not a finite number >= 0" % (name, c, k, r.get(k)))
        if role == "held out" and not isinstance(r.get("targets_met"), bool):
            bad.append("%s %s: targets_met = %r, want true or false" % (name, c, r.get("targets_met")))
        sizes = r.get("sizes", [])
        if len(sizes) != 5:  # 4K, 16K, 64K, 256K, 1M
            bad.append("%s %s: %d sizes, want 5" % (name, c, len(sizes)))
        for row in sizes:
            for k in ("measured_us", "predicted_us", "initial_predicted_us"):
                if not finite(row.get(k)) or row[k] <= 0:
                    bad.append("%s %s %s: %s = %r" % (name, c, row.get("size"), k, row.get(k)))
            if not finite(row.get("error")):
                bad.append("%s %s %s: error = %r" % (name, c, row.get("size"), row.get("error")))
    if sorted(meas.get("setups", {}).get(name, {}).get("collectives", {})) != sorted(colls):
        bad.append("%s: not every collective in the measurements file" % name)
if sorted(report.get("fitted", {})) != sorted(keys):
    bad.append("fitted constants: %s, want %s" % (sorted(report.get("fitted", {})), sorted(keys)))
for k in ("initial", "fitted"):
    if not finite(report.get("objective", {}).get(k)):
        bad.append("objective %s = %r" % (k, report.get("objective", {}).get(k)))
print("\n".join(bad))
EOF
)
[ $? -eq 0 ] && [ -z "$problems" ] || fail "the report:"$'\n'"$problems"

# The cluster file: ddl_sim accepts it, and it holds the fitted values (ddl_sim prints rates
# in Gbit and times in us; the report has them as written: GB, us, plain numbers).
if ! described=$(timeout -k 5 60 "$sim" --cluster "$tmp/fit.cluster" --describe 2>&1); then
  fail "ddl_sim does not accept the fitted cluster file: $described"$'\n'"$(cat "$tmp/fit.cluster")"
else
  problems=$(python3 - "$tmp/r.json" "$described" << 'EOF'
import json, re, sys
fitted = json.load(open(sys.argv[1]))["fitted"]
described = dict(l.split(" = ", 1) for l in sys.argv[2].splitlines() if " = " in l)
def si(text):
    m = re.fullmatch(r"([0-9.eE+-]+)\s*(GB|Gbit|us)?", text)
    return float(m.group(1)) * {"GB": 1e9, "Gbit": 1e9 / 8, "us": 1e-6, None: 1}[m.group(2)]
for k, v in fitted.items():
    if k not in described or abs(si(described[k]) / si(v) - 1) > 1e-4:
        print("%s = %s in the report, %s in ddl_sim --describe of the file" % (k, v, described.get(k)))
EOF
  )
  [ $? -eq 0 ] && [ -z "$problems" ] || fail "the cluster file:"$'\n'"$problems"
fi
grep -q "^# Fitted by bench/sim_calibrate.py" "$tmp/fit.cluster" || fail "no provenance line in the cluster file"
grep -q "^# The emulated hosts" "$tmp/fit.cluster" || fail "the cluster file lost its comment header"

echo "=== sim_calibrate.py --quick --reuse"
if ! timeout -k 10 300 python3 "$root/bench/sim_calibrate.py" --quick --reuse --measurements "$tmp/m.json" \
  --out "$tmp/r2.json" > /dev/null 2> "$tmp/err2.txt"; then
  fail "--reuse failed:"$'\n'"$(tail -30 "$tmp/err2.txt")"
else
  grep -q "measuring" "$tmp/err2.txt" && fail "--reuse measured again:"$'\n'"$(cat "$tmp/err2.txt")"
  [ "$(grep -c "reusing the measurements" "$tmp/err2.txt")" -eq 3 ] ||
    fail "--reuse did not reuse all 3 setups:"$'\n'"$(cat "$tmp/err2.txt")"
fi

if [ $failures -ne 0 ]; then
  echo "test_sim_calibrate: $failures failure(s)"
  exit 1
fi
echo "test_sim_calibrate: ok"
