#!/usr/bin/env bash
# A multi-node install, rehearsed on one machine (`make rehearse`, part of
# `make test`): three nodes, each its own network namespace and its own
# throw-away overlay of this machine's root, joined by a bridge in a fourth
# namespace (10.203.0.0/24, which exists only inside them). The package is
# installed on each; the server and two agents run from the packaged units'
# command lines (their user, their capabilities) and /etc/kansoku/kansoku.toml
# with tokens; the server must see both hosts live, also after a reload
# (SIGHUP); one agent is upgraded to a newer build of the package while the
# other keeps running; then nothing may be lost: every round the upgraded
# agent sampled before it stopped is on the server, the other agent's rounds
# have no gap, no spool dropped anything.
# Usage: scripts/rehearse.sh DIR (holding kansoku_*.deb, from `make deb`).
set -euo pipefail
here=$(dirname "$(realpath "$0")")
dir=$(realpath "${1:?usage: $0 DIR-with-the-deb}")
deb=$(ls "$dir"/kansoku_*_amd64.deb | sort -V | tail -n 1)
[ -f "$deb" ] || { echo "rehearse: no kansoku_*_amd64.deb in $dir (run make deb)" >&2; exit 1; }
say() { echo "rehearse: $*"; }
fail() { echo "rehearse: FAILED: $*" >&2; for f in "$w"/ctl/*.log; do echo "--- $f" >&2; tail -n 20 "$f" >&2; done; exit 1; }

w=$(mktemp -d /tmp/kansoku-rehearse.XXXXXX)
nodes=(server agent1 agent2)
cleanup() {
  for n in "${nodes[@]}"; do [ -p "$w/ctl/$n.cmd" ] && timeout 5 sh -c "echo stop > '$w/ctl/$n.cmd'" 2>/dev/null || true; done
  kill $(jobs -p) 2>/dev/null || true
  wait 2>/dev/null || true
  # (Each node has its own PID namespace: its processes end with it.)
  for n in sw "${nodes[@]}"; do ip netns del "ks-$n" 2>/dev/null || true; done
  rm -rf "$w"
}
trap cleanup EXIT
mkdir -p "$w/ctl"
cp "$deb" "$w/ctl/first.deb"
dpkg-deb -R "$deb" "$w/newer"
sed -i "s/^Version: .*/Version: $(dpkg-deb -f "$deb" Version)+rehearsal1/" "$w/newer/DEBIAN/control"
dpkg-deb -b -Zgzip "$w/newer" "$w/ctl/newer.deb" >/dev/null
rm -rf "$w/newer"
token() { head -c 24 /dev/urandom | base64 | tr '+/' '-_'; }
printf '%s agent1\n%s agent2\nread %s\n' "$(token)" "$(token)" "$(token)" > "$w/ctl/tokens"
chmod 600 "$w/ctl/tokens"

# The network: a bridge in ks-sw, a veth from it to each node.
ip netns add ks-sw
ip -n ks-sw link add br0 type bridge
ip -n ks-sw link set br0 up
i=0
for n in "${nodes[@]}"; do
  i=$((i + 1))
  ip netns add "ks-$n"
  ip link add "ks-$n-0" netns "ks-$n" type veth peer name "p$i" netns ks-sw
  ip -n ks-sw link set "p$i" master br0 up
  ip -n "ks-$n" link set lo up
  ip -n "ks-$n" link set "ks-$n-0" name eth0
  ip -n "ks-$n" addr add "10.203.0.$i/24" dev eth0
  ip -n "ks-$n" link set eth0 up
  mkfifo "$w/ctl/$n.cmd"
done

# What each node runs inside its overlay: install, configure, run its role
# as its unit would, then wait for "upgrade" or "stop".
cat > "$w/ctl/node.sh" <<'EOF'
set -euo pipefail
n=$1
role=${n%%[0-9]*}
state() { echo "$*" >> /ctl/$n.state; }
export DEBIAN_FRONTEND=noninteractive
dpkg -i /ctl/first.deb > /ctl/$n.dpkg.log 2>&1
if [ "$role" = server ]; then
  install -m 600 -o kansoku -g kansoku /ctl/tokens /etc/kansoku/tokens
  # The operator's configuration, in place of the shipped example.
  cat > /etc/kansoku/kansoku.toml <<EOT
data = "/var/lib/kansoku"

[server]
ingest = "10.203.0.1:7071"
listen = "10.203.0.1:7070"
tokens = "/etc/kansoku/tokens"
EOT
else
  grep " $n\$" /ctl/tokens | cut -d' ' -f1 | install -m 600 -o kansoku -g kansoku /dev/stdin /etc/kansoku/agent.token
  cat > /etc/kansoku/kansoku.toml <<EOT
data = "/var/lib/kansoku"

[agent]
server = "10.203.0.1:7071"
token-file = "/etc/kansoku/agent.token"
host = "$n"
trace = "off"
EOT
fi
kansoku config check 2>> /ctl/$n.log
unit=/usr/lib/systemd/system/kansoku-$role.service
run() {
  local exec_start caps
  exec_start=$(sed -n 's/^ExecStart=//p' "$unit")
  caps=$(sed -n 's/^AmbientCapabilities=//p' "$unit" | tr ' ' '\n' | sed '/^$/d; s/^CAP_//' | tr 'A-Z' 'a-z' | sed 's/^/+/' | paste -sd, -)
  cd /var/lib/kansoku
  if [ -n "$caps" ]; then
    setpriv --reuid kansoku --regid kansoku --init-groups --inh-caps "$caps" --ambient-caps "$caps" $exec_start 2>> /ctl/$n.log &
  else
    setpriv --reuid kansoku --regid kansoku --init-groups $exec_start 2>> /ctl/$n.log &
  fi
  pid=$!
  state "running $(dpkg-query -W -f '${Version}' kansoku) $(date +%s%N)"
}
run
while read -r cmd < /ctl/$n.cmd; do
  case "$cmd" in
    upgrade)
      state "stopping $(date +%s%N)"
      kill -TERM "$pid"; wait "$pid" || true
      state "stopped $(date +%s%N)"
      dpkg -i --force-confold /ctl/newer.deb >> /ctl/$n.dpkg.log 2>&1
      run ;;
    reload)
      kill -HUP "$pid" ;;
    stop)
      kill -TERM "$pid"; wait "$pid" || true
      state "stopped $(date +%s%N)"
      exit 0 ;;
  esac
done
EOF

for n in "${nodes[@]}"; do
  : > "$w/ctl/$n.state"; : > "$w/ctl/$n.log"
  ip netns exec "ks-$n" unshare --mount --pid --fork "$here/overlay-chroot.sh" "$w" "$n" /ctl/node.sh "$n" &
  # The server first: agents connect to it.
  if [ "$n" = server ]; then
    grep -q -m1 'listening on' < <(timeout 120 tail --pid=$! -n +1 -f "$w/ctl/server.log") || fail "the server did not start"
    say "server: installed, serving on 10.203.0.1:7070, agents on :7071 (tokens)"
  fi
done

read_token=$(sed -n 's/^read //p' "$w/ctl/tokens")
api() { ip netns exec ks-server curl -sf -H "Authorization: Bearer $read_token" "http://10.203.0.1:7070$1"; }
# Both agents live on the server, polled until they are (at most a minute).
hosts_live() {
  api /api/v1/hosts | python3 -c '
import json, sys
hosts = {h["host"]: h for h in json.load(sys.stdin)["hosts"]}
want = sys.argv[1:]
sys.exit(0 if all(hosts.get(h, {}).get("state") == "live" for h in want) else 1)' "$@"
}
deadline=$((SECONDS + 60))
until hosts_live agent1 agent2; do
  [ $SECONDS -lt $deadline ] || fail "the server does not see both agents live"
  sleep 0.5
done
say "agent1, agent2: installed, their units' command lines running, both live on the server"

# `systemctl reload kansoku-server`: its tokens read again, still serving.
echo reload > "$w/ctl/server.cmd"
grep -q -m1 'SIGHUP: 3 tokens in use' < <(timeout 60 tail -n +1 -f "$w/ctl/server.log") || fail "the server's reload"
hosts_live agent1 agent2 || fail "the agents after the server's reload"
say "server: reloaded (SIGHUP: its tokens read again), both agents still live"

# Upgrade agent2 while agent1 runs on.
echo upgrade > "$w/ctl/agent2.cmd"
grep -q -m1 '^running .*+rehearsal1' < <(timeout 120 tail -n +1 -f "$w/ctl/agent2.state") || fail "agent2's upgrade"
restarted=$(sed -n 's/^running [^ ]* //p' "$w/ctl/agent2.state" | tail -n 1)
# Live again: a batch sampled a second after its restart has arrived.
after_restart() {
  api /api/v1/hosts | python3 -c '
import json, sys
h = next(h for h in json.load(sys.stdin)["hosts"] if h["host"] == "agent2")
sys.exit(0 if h["last_batch_ns"] > int(sys.argv[1]) + 1_000_000_000 else 1)' "$restarted"
}
deadline=$((SECONDS + 60))
until hosts_live agent1 agent2 && after_restart; do
  [ $SECONDS -lt $deadline ] || fail "agent2 is not live again after its upgrade"
  sleep 0.5
done
say "agent2: upgraded to $(sed -n 's/^running \([^ ]*\) .*/\1/p' "$w/ctl/agent2.state" | tail -n 1) and live again"

# Nothing lost. Each agent's rounds as the server stored them (a series its
# collector writes every round, read raw: a range selector at one instant),
# from its first round to a second ago.
stopping=$(sed -n 's/^stopping //p' "$w/ctl/agent2.state")
now=$(date +%s)
check() {
  local host=$1
  api "/prometheus/api/v1/query?query=kansoku_collector_round_cpu_seconds%7Bhost%3D%22$host%22%7D%5B10m%5D&time=$((now - 1))" \
    | python3 -c '
import json, sys
host, stopping, restarted = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
r = json.load(sys.stdin)["data"]["result"]
if not r: sys.exit(f"{host}: no rounds on the server")
ts = sorted(float(t) for s in r for t, _ in s["values"])
# A gap is a second without a round: rounds 100 ms apart, and a round a
# busy machine skips is not sampled (the agent counts it) rather than lost.
gaps = [(a, b) for a, b in zip(ts, ts[1:]) if b - a > 1.0]
if host == "agent1" and gaps: sys.exit(f"agent1 has gaps: {gaps[:5]}")
if host == "agent2":
    # Its rounds up to the moment it was stopped, then again from its
    # restart: one gap, and only while it was stopped for its upgrade.
    s, r = stopping / 1e9, restarted / 1e9
    before = [t for t in ts if t <= s]
    if not before or s - before[-1] > 1.0 or not any(t >= r for t in ts):
        sys.exit(f"agent2: rounds {ts[0]:.2f}..{ts[-1]:.2f} do not reach its stop at {s:.2f} and restart at {r:.2f}")
    bad = [(a, b) for a, b in gaps if not (a <= r and b >= s - 1)]
    if bad or len(gaps) > 1: sys.exit(f"agent2: gaps outside its upgrade: {gaps[:5]} (stopped at {s:.2f}, back at {r:.2f})")
print(f"rehearse: {host}: {len(ts)} rounds over {ts[-1] - ts[0]:.1f} s, gaps {[round(b - a, 2) for a, b in gaps]}")
' "$host" "${stopping:-0}" "${restarted:-0}"
}
check agent1 || { api /api/v1/hosts >&2; fail "agent1 lost rounds"; }
check agent2 || { api /api/v1/hosts >&2; cat "$w/ctl/agent2.state" >&2; fail "agent2 lost rounds"; }
dropped=$(api /api/v1/hosts | python3 -c 'import json,sys; print(sum(h["spool_dropped_samples"] for h in json.load(sys.stdin)["hosts"]))')
[ "$dropped" = 0.0 ] || fail "the spools dropped $dropped samples"
say "nothing lost: agent1 without a gap, agent2 only while stopped for its upgrade, no spool dropped a sample"
say ok
