#!/usr/bin/env bash
# Installs what a make target needs, only when missing: Debian packages via
# apt-get, cargo tools via crates.io. Usage: scripts/deps.sh test|bench|build|deb
set -euo pipefail

need_apt=()
want() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed' || need_apt+=("$1"); }

case "${1:-test}" in
  test)
    want build-essential   # cc/c++ for libFuzzer (fuzz targets)
    want snmpd             # real agents in the SNMP poller's tests
    want snmp              # snmpget/snmpwalk: the tests' oracle
    want chromium          # the dashboard's end-to-end test (headless)
    want fonts-liberation  # readable text in its screenshots (a recommends we skip otherwise)
    want python3-influxdb  # the InfluxDB client whose DataFrames kansoku's /write and /query must serve
    want python3-pandas    # (its DataFrameClient)
    want openssl           # certificates for the TLS tests
    want iproute2          # network namespaces for the outage test
    want linux-perf        # perf script: the oracle of the perf.data import test
    want prometheus        # the oracle of the PromQL differential test (promtool builds its blocks), remote write e2e
    want prometheus-node-exporter  # what that Prometheus scrapes in the remote-write e2e test
    want prometheus-alertmanager   # where the rules e2e test sends its alerts
    want influxdb                  # influxd: the oracle of the InfluxQL differential test
    want clang                     # compiles the BPF programs of crates/trace (kernel event histograms)
    want libbpf-tools              # biolatency: the oracle of the block I/O tracer's test
    want nginx                     # the server whose access log is the oracle of the load generator's test
    want e2fsprogs                 # mkfs.ext4, e4defrag, filefrag: the fragmentation collector's tests
    want xfsprogs                  # mkfs.xfs, xfs_fsr: the same on XFS
    want redis-server              # the server across the network injector in `lab latency --workload redis`'s test
    want redis-tools               # redis-benchmark: its load
    want fio                       # random reads on the delayed device in `lab latency --inject storage`'s test
    want clickhouse-server         # the store at scale: its tests start a cluster of 2 shards × 2 replicas on loopback
    want zookeeper                 # (their replication)
    ;;
  build)
    want clang                     # compiles the BPF programs of crates/trace; without it tracing is left out
    ;;
  deb)
    want lintian                   # checks the package as Debian's archive would
    want systemd                   # systemd-analyze verify: the units (systemd need not be PID 1)
    ;;
  bench)
    want prometheus-node-exporter   # the peer in `kansoku lab collector-cost` and `lab up-cost`
    want pcp                        # pmcd + pmlogger: a peer in `kansoku lab up-cost`
    want collectd-core              # a peer in `kansoku lab up-cost`
    want sysstat                    # pidstat: a peer of `up --processes` in `kansoku lab up-cost`
    want netdata-core               # apps.plugin: a peer of `up --processes` in `kansoku lab up-cost`
    want prometheus-snmp-exporter   # a peer in `kansoku lab snmp`
    want snmp                       # snmpget: the glogger paper's baseline in `kansoku lab snmp`
    want linux-perf                 # perf record: the real capture in `kansoku lab store`
    want stress-ng                  # the workload under that capture; a benchmark of `lab interference`; `lab diagnose` workloads
    want fio                        # the I/O-bound workload of `kansoku lab diagnose`
    want p7zip-full                 # 7z b: the paper's 7-Zip benchmark in `kansoku lab interference`
    want sysbench                   # sysbench cpu: a CPU benchmark of `kansoku lab interference`
    want prometheus                 # promtool: a peer in scripts/bench-store-peers.sh
    want victoria-metrics           # a peer in scripts/bench-store-peers.sh
    want influxdb                   # a peer in scripts/bench-store-peers.sh
    want curl
    want clang                      # the BPF programs of crates/trace
    want libbpf-tools               # syscount -L: the peer in `kansoku lab trace-cost`
    want bpftrace                   # a peer in `kansoku lab trace-cost`
    want nginx                      # the server `kansoku lab load` is measured against
    want wrk                        # a peer in `kansoku lab load`
    want apache2-utils              # ab: a peer in `kansoku lab load`
    want nghttp2-client             # h2load: the HTTP/2 peer in `kansoku lab load`
    want postgresql                 # experiments/pgbench-tuning.toml (pgbench and the server)
    ;;
  *) echo "usage: $0 test|bench|build|deb" >&2; exit 2 ;;
esac

if [ ${#need_apt[@]} -gt 0 ] && [ "${1:-test}" = build ] && [ "$(id -u)" != 0 ]; then
  echo "deps: ${need_apt[*]} missing and not root: building without kernel tracing (apt-get install ${need_apt[*]})"
  need_apt=()
fi
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "deps: installing ${need_apt[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # Packages whose install scripts start their service (pcp) fail where
  # systemd is not PID 1 (containers, this VM): give them a systemctl that
  # does nothing; the lab starts what it measures itself.
  shim=$(mktemp -d)
  if [ "$(cat /proc/1/comm 2>/dev/null)" != systemd ]; then
    for tool in systemctl invoke-rc.d deb-systemd-invoke; do
      printf '#!/bin/sh\nexit 0\n' > "$shim/$tool"
      chmod +x "$shim/$tool"
    done
  fi
  # (A package left half-configured by an earlier run is configured first.)
  PATH="$shim:$PATH" dpkg --configure -a
  PATH="$shim:$PATH" apt-get install -y -qq --no-install-recommends "${need_apt[@]}"
  rm -rf "$shim"
fi

if [ "${1:-test}" = test ] && ! cargo fuzz --version >/dev/null 2>&1; then
  echo "deps: installing cargo-fuzz"
  cargo install cargo-fuzz --locked --quiet
fi

if [ "${1:-test}" = deb ] && ! cargo deb --version >/dev/null 2>&1; then
  echo "deps: installing cargo-deb"
  cargo install cargo-deb --locked --quiet --version 3.8.0
fi
