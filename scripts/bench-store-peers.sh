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
# force_merge runs in the background: wait until no merge is active.
for _ in $(seq 1 600); do
  active=$(curl -sf http://127.0.0.1:18428/metrics | awk '/^vm_active_merges/ {s += $2} END {print s + 0}')
  [ "$active" = 0 ] && break
  sleep 0.1
done
vm_samples=$(curl -sf -G --data-urlencode 'match[]={__name__=~".+"}' http://127.0.0.1:18428/api/v1/export |
  python3 -c 'import json,sys; print(sum(len(json.loads(l)["values"]) for l in sys.stdin))')
if [ "$vm_samples" != "$samples" ]; then
  echo "VictoriaMetrics holds $vm_samples of the $samples samples; not comparable" >&2
  exit 1
fi
vm_rows=$(curl -sf 'http://127.0.0.1:18428/api/v1/series/count' | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0])')
vm_bytes=$(bytes "$out/vm")

echo "InfluxDB ..." >&2
mkdir -p "$out/influx"
# Snapshot the WAL's cache to TSM and compact fully after a few idle seconds
# (the defaults wait 10 min and 4 h).
sed -e "s|/var/lib/influxdb|$out/influx|g" -e '/^\[http\]/a\  bind-address = "127.0.0.1:18086"' \
  -e '/^\[data\]/a\  cache-snapshot-write-cold-duration = "2s"\n  compact-full-write-cold-duration = "4s"' \
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
# Wait until the WAL is empty (snapshotted to TSM) and the TSM files settle.
wal_bytes() { find "$out/influx/wal" -name '*.wal' -printf '%s\n' | awk '{s += $1} END {print s + 0}'; }
tsm_bytes() { [ -d "$out/influx/data/$1" ] || { echo 0; return; }; find "$out/influx/data/$1" -name '*.tsm' -printf '%s\n' | awk '{s += $1} END {print s + 0}'; }
prev=-1
for _ in $(seq 1 120); do
  now="$(wal_bytes):$(tsm_bytes bench):$(tsm_bytes events)"
  if [ "$(wal_bytes)" -eq 0 ] && [ "$now" = "$prev" ]; then break; fi
  prev="$now"
  sleep 2
done
[ "$(wal_bytes)" -eq 0 ] || { echo "InfluxDB did not snapshot its WAL in time" >&2; exit 1; }
influx_bytes=$(bytes "$out/influx/data/bench")
# The series file preallocates 32 MiB whatever the data; the TSM files are the data.
influx_tsm=$(tsm_bytes bench)
influx_event_bytes=$(tsm_bytes events)

python3 - "$samples" "$kansoku_bytes" "$prom_bytes" "$vm_bytes" "$influx_bytes" "$events" "$event_bytes" "$influx_event_bytes" "$vm_rows" "$influx_tsm" <<'EOF'
import sys
n, k, p, v, i, ne, ke, ie, vm_series, itsm = map(int, sys.argv[1:])
print(f"{n} samples ({vm_series} series in VictoriaMetrics)")
print("| store | bytes | bytes/sample | vs kansoku |")
print("|---|---|---|---|")
for name, b in [("kansoku (blocks, tiers included)", k), ("Prometheus 2.42 (promtool backfill)", p),
                ("VictoriaMetrics (after force_merge)", v), ("InfluxDB 1.6 (whole shard dir, after restart)", i),
                ("InfluxDB 1.6 (TSM files only)", itsm)]:
    print(f"| {name} | {b:,} | {b/n:.3f} | {b/k:.1f}x |")
if ne:
    print(f"\n{ne} events")
    print("| store | bytes | bytes/event | vs kansoku |")
    print("|---|---|---|---|")
    for name, b in [("kansoku event logs", ke), ("InfluxDB 1.6 (pid, tid, ip fields)", ie)]:
        print(f"| {name} | {b:,} | {b/ne:.2f} | {b/ke:.1f}x |")
EOF
echo "work files in $out" >&2
