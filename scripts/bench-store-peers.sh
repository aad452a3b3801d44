#!/usr/bin/env bash
# Bytes per sample on disk: kansoku beside Prometheus, VictoriaMetrics and
# InfluxDB holding the same samples, measured in the same run.
#
#   scripts/bench-store-peers.sh DATA_DIR [OUT_DIR]
#
# DATA_DIR is a kansoku data directory (e.g. from a 10-minute `kansoku up`,
# or `kansoku lab store --data DIR`). Its samples are exported once with
# `kansoku export` and loaded into each peer the way that peer is fed:
#   Prometheus       promtool tsdb create-blocks-from openmetrics (backfill)
#   VictoriaMetrics  InfluxDB line protocol on /write, then force_flush + force_merge
#   InfluxDB 1.x     line protocol on /write, then a restart (WAL -> TSM)
# Event streams (per-CPU samples), if any, go to InfluxDB too, ip as an
# integer field. Every peer listens on loopback only. Needs the Debian
# packages prometheus, victoria-metrics, influxdb (scripts/deps.sh bench).
set -euo pipefail
data="${1:?usage: $0 DATA_DIR [OUT_DIR]}"
out="${2:-$(mktemp -d /tmp/kansoku-peers.XXXXXX)}"
bin="$(dirname "$0")/../target/release/kansoku"
mkdir -p "$out"
for t in promtool victoria-metrics influxd curl; do
  command -v "$t" >/dev/null || { echo "missing $t: run scripts/deps.sh bench" >&2; exit 2; }
done
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

wait_http() { # url
  for _ in $(seq 1 300); do curl -sf -o /dev/null "$1" && return 0; sleep 0.1; done
  echo "no answer from $1" >&2; exit 1
}
bytes() { du -sb "$1" | cut -f1; }

echo "exporting $data ..." >&2
"$bin" export '{}' --from 0 --data "$data" --format influx-lp -o "$out/series.lp"
"$bin" export '{}' --from 0 --data "$data" --format openmetrics -o "$out/series.om"
samples=$(wc -l < "$out/series.lp")
kansoku_bytes=$(du -sb "$data/blocks" | cut -f1)
events=0
if "$bin" export '{}' --events --from 0 --data "$data" --format influx-lp -o "$out/events.lp" 2>/dev/null; then
  # InfluxDB 1.6 has no unsigned fields: the address as a (wrapping) signed integer.
  python3 - "$out/events.lp" <<'EOF'
import re, sys
p = sys.argv[1]
with open(p) as f, open(p + ".i", "w") as g:
    for line in f:
        g.write(re.sub(r"ip=(\d+)u", lambda m: "ip=%di" % (int(m.group(1)) - (1 << 64) if int(m.group(1)) >= 1 << 63 else int(m.group(1))), line))
EOF
  events=$(wc -l < "$out/events.lp")
fi
event_bytes=$(du -sb "$data/events" 2>/dev/null | cut -f1 || echo 0)

echo "Prometheus (promtool backfill) ..." >&2
promtool tsdb create-blocks-from openmetrics "$out/series.om" "$out/prom" >/dev/null
prom_bytes=$(bytes "$out/prom")

echo "VictoriaMetrics ..." >&2
victoria-metrics -storageDataPath "$out/vm" -httpListenAddr 127.0.0.1:18428 -retentionPeriod 100y \
  -loggerLevel ERROR >"$out/vm.log" 2>&1 &
pids+=($!)
wait_http http://127.0.0.1:18428/health
split -l 200000 "$out/series.lp" "$out/vm-part."
for f in "$out"/vm-part.*; do curl -sf --data-binary @"$f" http://127.0.0.1:18428/write; done
rm -f "$out"/vm-part.*
curl -sf http://127.0.0.1:18428/internal/force_flush
curl -sf http://127.0.0.1:18428/internal/force_merge
sleep 5 # force_merge runs in the background; its log says when it is done
vm_rows=$(curl -sf 'http://127.0.0.1:18428/api/v1/series/count' | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0])')
vm_bytes=$(bytes "$out/vm")

echo "InfluxDB ..." >&2
mkdir -p "$out/influx"
sed -e "s|/var/lib/influxdb|$out/influx|g" -e '/^\[http\]/a\  bind-address = "127.0.0.1:18086"' \
  /etc/influxdb/influxdb.conf > "$out/influx.conf"
printf '\nreporting-disabled = true\nbind-address = "127.0.0.1:18088"\n' | cat - "$out/influx.conf" > "$out/influx2.conf"
start_influx() {
  influxd -config "$out/influx2.conf" >"$out/influx.log" 2>&1 &
  influx_pid=$!
  pids+=($influx_pid)
  wait_http http://127.0.0.1:18086/ping
}
start_influx
curl -sf -XPOST http://127.0.0.1:18086/query --data-urlencode 'q=CREATE DATABASE bench' >/dev/null
curl -sf -XPOST http://127.0.0.1:18086/query --data-urlencode 'q=CREATE DATABASE events' >/dev/null
split -l 100000 "$out/series.lp" "$out/ix-part."
for f in "$out"/ix-part.*; do curl -sf --data-binary @"$f" 'http://127.0.0.1:18086/write?db=bench&precision=ns'; done
rm -f "$out"/ix-part.*
if [ "$events" -gt 0 ]; then
  split -l 100000 "$out/events.lp.i" "$out/ie-part."
  for f in "$out"/ie-part.*; do curl -sf --data-binary @"$f" 'http://127.0.0.1:18086/write?db=events&precision=ns'; done
  rm -f "$out"/ie-part.*
fi
kill "$influx_pid"; wait "$influx_pid" 2>/dev/null || true # shutdown writes the WAL's cache to TSM
start_influx
influx_bytes=$(bytes "$out/influx/data/bench")
influx_event_bytes=$(du -sb "$out/influx/data/events" 2>/dev/null | cut -f1 || echo 0)

python3 - "$samples" "$kansoku_bytes" "$prom_bytes" "$vm_bytes" "$influx_bytes" "$events" "$event_bytes" "$influx_event_bytes" "$vm_rows" <<'EOF'
import sys
n, k, p, v, i, ne, ke, ie, vm_series = map(int, sys.argv[1:])
print(f"{n} samples ({vm_series} series in VictoriaMetrics)")
print("| store | bytes | bytes/sample | vs kansoku |")
print("|---|---|---|---|")
for name, b in [("kansoku (blocks, tiers included)", k), ("Prometheus 2.42 (promtool backfill)", p),
                ("VictoriaMetrics (after force_merge)", v), ("InfluxDB 1.6 (TSM after restart)", i)]:
    print(f"| {name} | {b:,} | {b/n:.3f} | {b/k:.1f}x |")
if ne:
    print(f"\n{ne} events")
    print("| store | bytes | bytes/event | vs kansoku |")
    print("|---|---|---|---|")
    for name, b in [("kansoku event logs", ke), ("InfluxDB 1.6 (pid, tid, ip fields)", ie)]:
        print(f"| {name} | {b:,} | {b/ne:.2f} | {b/ke:.1f}x |")
EOF
echo "work files in $out" >&2
