#!/usr/bin/env bash
# Outage recovery: an agent in a network namespace, its link cut for
# OUTAGE seconds (default 30), then restored. Prints how long until the
# agent's backlog is drained (the server holds every batch again) and how
# many batches arrived meanwhile; that none is lost or stored twice is what
# make test's cluster_e2e checks. Needs root (ip netns).
# Usage: scripts/bench-outage.sh [OUTAGE_SECONDS]
set -euo pipefail
outage="${1:-30}"
bin="$(cd "$(dirname "$0")/.." && pwd)/target/release/kansoku"
dir=$(mktemp -d /tmp/kansoku-outage.XXXXXX)
ns=kansoku-outage; out=kskoo0; in=kskoi0
cleanup() { kill $(jobs -p) 2>/dev/null || true; ip link del $out 2>/dev/null || true; ip netns del $ns 2>/dev/null || true; }
trap cleanup EXIT
ip netns add $ns
ip link add $out type veth peer name $in
ip link set $in netns $ns
ip addr add 10.213.58.1/30 dev $out && ip link set $out up
ip -n $ns addr add 10.213.58.2/30 dev $in && ip -n $ns link set $in up && ip -n $ns link set lo up
"$bin" server --data "$dir/server" --listen 127.0.0.1:17470 --ingest 10.213.58.1:17471 2>"$dir/server.log" &
until curl -sf -o /dev/null http://127.0.0.1:17470/api/v1/status; do sleep 0.1; done
ip netns exec $ns "$bin" agent --server 10.213.58.1:17471 --host outage --data "$dir/agent" 2>"$dir/agent.log" &
field() { curl -sf http://127.0.0.1:17470/api/v1/hosts | python3 -c "import json,sys; h=[x for x in json.load(sys.stdin)['hosts'] if x['host']=='outage']; print(h[0]['$1'] if h and h[0]['$1'] is not None else -1)"; }
until [ "$(field batches)" -ge 5 ]; do sleep 0.2; done
ip link set $out down
echo "link down for ${outage}s"
sleep "$outage"
ip link set $out up
up=$(date +%s.%N)
before=$(field batches)
# Backlog drained: the agent reports an empty backlog in a batch stored after the link came back.
until [ "$(field batches)" -gt "$((before + 2))" ] && [ "$(field backlog_batches)" = "0.0" ]; do sleep 0.05; done
done_at=$(date +%s.%N)
after=$(field batches)
dups=$(field duplicate_batches)
echo "recovered: backlog drained $(python3 -c "print(round($done_at - $up, 2))") s after the link came back; $((after - before)) batches arrived meanwhile, $dups duplicates skipped"
grep -E "retrying|connected" "$dir/agent.log" "$dir/server.log" | tail -4
