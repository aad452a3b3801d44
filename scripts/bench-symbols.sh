#!/usr/bin/env bash
# Symbols from other hosts: what an agent sends so that the server names its
# samples. A server and one sampling agent (--perf 1000 --perf-callchain) in
# a mount namespace whose boot id is faked, so the server treats it as
# another machine and asks for its kernel table too. Prints, from the
# agent's own series on the server: the sources sent and their bytes on the
# wire in the first SETTLE seconds (the first connection) and over the
# STEADY seconds after (the steady state), beside the samples' own bytes;
# then, for the largest binary sent, the whole file zstd'd (what is
# shipped: symbols, DWARF, inlined frames) against its symbol table alone
# (strip --strip-debug, then zstd): the saving that would lose line and
# inline information. Needs root (unshare -m, mount --bind).
# Usage: scripts/bench-symbols.sh [BIN] [SETTLE_SECONDS] [STEADY_SECONDS]
set -euo pipefail
bin="${1:-$(cd "$(dirname "$0")/.." && pwd)/target/release/kansoku}"
settle="${2:-20}"
steady="${3:-60}"
dir=$(mktemp -d /tmp/kansoku-symbols.XXXXXX)
cleanup() { kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; grep -hE "lacks|asked for" "$dir/server.log" "$dir/agent.log" | tail -5 || true; rm -rf "$dir"; }
trap cleanup EXIT
echo "0badb007-0000-4000-8000-0000be7c0de0" > "$dir/boot_id"
"$bin" server --data "$dir/server" --listen 127.0.0.1:17480 --ingest 127.0.0.1:17481 2>"$dir/server.log" &
until curl -sf -o /dev/null http://127.0.0.1:17480/api/v1/status; do sleep 0.1; done
unshare -m sh -c "mount --bind $dir/boot_id /proc/sys/kernel/random/boot_id && exec $bin agent --server 127.0.0.1:17481 --host sym-node --perf 1000 --perf-callchain --data $dir/agent" 2>"$dir/agent.log" &
last() {
  curl -sf "http://127.0.0.1:17480/api/v1/query?query=$1%7Bhost%3D%22sym-node%22%7D&since=1h" |
    python3 -c "import json,sys; s=json.load(sys.stdin)['series']; v=[x for x in (s[0]['values'] if s else []) if x is not None]; print(int(v[-1]) if v else 0)"
}
sleep "$settle"
s1=$(last kansoku_agent_symbols_sent_total); b1=$(last kansoku_agent_symbols_wire_bytes_total); w1=$(last kansoku_agent_wire_bytes_total)
sleep "$steady"
s2=$(last kansoku_agent_symbols_sent_total); b2=$(last kansoku_agent_symbols_wire_bytes_total); w2=$(last kansoku_agent_wire_bytes_total)
echo "first ${settle} s: ${s1} sources, ${b1} bytes of symbols; ${w1} bytes on the wire in all"
echo "next ${steady} s: $((s2 - s1)) sources, $((b2 - b1)) bytes of symbols; $((w2 - w1)) bytes on the wire in all ($(( (w2 - w1) / steady )) B/s)"
curl -sf http://127.0.0.1:17480/api/v1/status | python3 -c "import json,sys; print('server symbol store:', json.load(sys.stdin)['symbols'])"
largest=$(ls -S "$dir/server/buildid" | head -1)
if [ -n "$largest" ]; then
  f="$dir/server/buildid/$largest"
  whole=$(zstd -q -3 -c "$f" | wc -c)
  strip --strip-debug -o "$dir/stripped" "$f"
  symtab=$(zstd -q -3 -c "$dir/stripped" | wc -c)
  echo "largest binary: $(stat -c %s "$f") bytes; whole, zstd -3: $whole; symbol table only (strip --strip-debug), zstd -3: $symtab"
fi
