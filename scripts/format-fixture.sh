#!/usr/bin/env bash
# Writes a format fixture: what a released build leaves on disk, and what it
# answered about it, for crates/kansoku/tests/formats_e2e.rs to open and ask
# again with today's code. Run it (with that release's binary) when a
# format's version changes, and commit its folder beside the older ones:
#   scripts/format-fixture.sh target/release/kansoku crates/kansoku/tests/fixtures/formats/NAME
# What it makes, with the real binary only:
#   data/     a server's data directory: InfluxDB points (float, integer,
#             boolean and string fields, so the string dictionary) over 12
#             minutes, the first 10 flushed to a block with its tiers at a
#             clean stop, the last 2 only in the WAL (the server killed
#             with SIGKILL after they were acknowledged); perf events
#             imported into the event log.
#   agent/    an agent's spool: batches it could not send (no server).
#   symbols/  a server's symbol store: a binary under its build id, a boot's
#             kernel symbol table under its boot id.
#   queries   one request a line (an HTTP path), answers/N.json what this
#             build answered to line N, on a copy of data/.
#   events.csv  `kansoku export --events` of the imported events.
#   meta      the build (kansoku --version), the agent's spool window.
set -euo pipefail
bin=$(realpath "${1:?usage: $0 KANSOKU_BIN OUT_DIR}")
out=${2:?usage: $0 KANSOKU_BIN OUT_DIR}
[ ! -e "$out" ] || { echo "format-fixture: $out exists; fixtures are never rewritten" >&2; exit 1; }
mkdir -p "$out/answers"
out=$(realpath "$out")
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$tmp"' EXIT
perf_data=$(dirname "$0")/../crates/kansoku/tests/fixtures/busy-loop.perf.data

# Starts `kansoku server` on DATA; sets $pid and $addr.
serve() {
  "$bin" --config /dev/null server --data "$1" --listen 127.0.0.1:0 --ingest 127.0.0.1:0 2>"$tmp/server.log" &
  pid=$!
  addr=$(grep -m1 -o 'listening on http://[0-9.:]*' < <(timeout 30 tail --pid=$pid -n +1 -f "$tmp/server.log") | sed 's|listening on http://||')
  [ -n "$addr" ] || { cat "$tmp/server.log"; exit 1; }
}
# Line protocol for hosts a and b, every 100 ms from second $1 to $2 past
# 2026-01-01T00:00:00Z (ms precision).
lines() {
  python3 - "$1" "$2" <<'EOF'
import sys
t0 = 1767225600000
for i in range(int(sys.argv[1]) * 10, int(sys.argv[2]) * 10):
    t = t0 + i * 100
    for h, k in (("a", 1.0), ("b", -2.5)):
        state = ("idle", "busy", 'idle\\"q', "")[i % 4]
        print(f'cpu,host={h},region=eu\\ west usage={k * (i % 37) / 7:.6g},count={i}i,ok={"true" if i % 3 else "false"},state="{state}" {t}')
EOF
}
write() {
  curl -sf -XPOST "http://$addr/write?db=fx&precision=ms" --data-binary @- >/dev/null
}

mkdir -p "$tmp/data"
serve "$out/data"
curl -sf -XPOST "http://$addr/query" --data-urlencode 'q=CREATE DATABASE fx' >/dev/null
lines 0 600 | write
kill -TERM $pid; wait $pid
"$bin" --config /dev/null import "$perf_data" --host fx --start 2026-01-01T00:00:00Z --data "$out/data" 2>/dev/null
serve "$out/data"
lines 600 720 | write
kill -KILL $pid; wait $pid || true
rm -f "$out/data/LOCK"

# The agent's spool: a second of rounds with nowhere to go.
spool_from=$(date +%s%N)
"$bin" --config /dev/null agent --server 127.0.0.1:1 --data "$out/agent" --host fixture-agent --interval 100ms --trace off 2>"$tmp/agent.log" &
apid=$!
sleep 2
kill -TERM $apid; wait $apid || true
spool_to=$(date +%s%N)

# The symbol store's layout as a server keeps it (`symbols/`): a binary
# under its build id and a boot's kernel table under its boot id, each kept
# verbatim as it arrived (a small binary compiled here, the table's first
# lines).
mkdir -p "$out/symbols/buildid" "$out/symbols/kallsyms"
printf 'int fixture_function(int x) { return x * 3 + 1; }\nint main(int argc, char **argv) { (void)argv; return fixture_function(argc); }\n' > "$tmp/busy.c"
cc -O1 -Wl,--build-id=sha1 -o "$tmp/busy" "$tmp/busy.c"
cp "$tmp/busy" "$out/symbols/buildid/$(readelf -n "$tmp/busy" | sed -n 's/.*Build ID: //p')"
head -n 40 /proc/kallsyms > "$out/symbols/kallsyms/$(cat /proc/sys/kernel/random/boot_id)"

cat > "$out/queries" <<'EOF'
/query?db=fx&epoch=ms&q=SELECT%20mean(usage)%2C%20max(count)%2C%20count(state)%2C%20count(ok)%20FROM%20cpu%20WHERE%20time%20%3E%3D%20'2026-01-01T00%3A00%3A00Z'%20AND%20time%20%3C%20'2026-01-01T00%3A12%3A00Z'%20GROUP%20BY%20time(1m)%2C%20host
/query?db=fx&epoch=ms&q=SELECT%20*%20FROM%20cpu%20WHERE%20time%20%3E%3D%20'2026-01-01T00%3A09%3A59.6Z'%20AND%20time%20%3C%3D%20'2026-01-01T00%3A10%3A00.4Z'
/query?db=fx&q=SHOW%20FIELD%20KEYS%3B%20SHOW%20TAG%20VALUES%20WITH%20KEY%20%3D%20host%3B%20SELECT%20distinct(state)%20FROM%20cpu%20WHERE%20host%3D'b'
/prometheus/api/v1/query_range?query=avg_over_time(cpu_usage%7Bdb%3D%22fx%22%7D%5B1m%5D)&start=1767225600&end=1767226320&step=60
/prometheus/api/v1/query_range?query=max_over_time(cpu_count%7Bhost%3D%22a%22%7D%5B10m%5D)&start=1767226200&end=1767226320&step=120
EOF
cp -a "$out/data" "$tmp/copy"
serve "$tmp/copy"
n=0
while read -r q; do
  n=$((n + 1))
  curl -sf "http://$addr$q" > "$out/answers/$n.json"
done < "$out/queries"
kill -TERM $pid; wait $pid
"$bin" --config /dev/null export '{host="fx"}' --events --format csv --data "$tmp/copy" > "$out/events.csv"
printf 'build %s\nspool_from_ns %s\nspool_to_ns %s\n' "$("$bin" --version)" "$spool_from" "$spool_to" > "$out/meta"
du -sh "$out"
