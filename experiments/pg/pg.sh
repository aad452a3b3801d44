#!/usr/bin/env bash
# The pgbench experiment's server: Debian's PostgreSQL in a cluster of its
# own under /tmp/kansoku-exp-pg (owned by the postgres user; KANSOKU_PG_STATE
# names another folder, e.g. on a delayed disk), on port 15432 and a socket
# in that folder; never the system's cluster.
# Usage: pg.sh init SCALE | start 'SETTINGS' | stop | destroy
set -euo pipefail
state=${KANSOKU_PG_STATE:-/tmp/kansoku-exp-pg}
port=15432
bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
[ -n "$bin" ] || { echo "PostgreSQL is not installed: apt-get install postgresql (scripts/deps.sh bench)" >&2; exit 1; }
as_pg() { su postgres -s /bin/sh -c "$*"; }
case "$1" in
  init)
    rm -rf "$state"; mkdir -p "$state"; chown postgres: "$state"
    as_pg "$bin/initdb -D $state/data -A trust -U postgres" >/dev/null
    as_pg "$bin/pg_ctl -D $state/data -o '-p $port -k $state -c listen_addresses=' -w -l $state/log start" >/dev/null
    as_pg "$bin/createdb -h $state -p $port bench"
    as_pg "pgbench -h $state -p $port -i -q -s ${2:-10} bench" 2>&1 | tail -1
    as_pg "$bin/pg_ctl -D $state/data -m fast -w stop" >/dev/null ;;
  start)
    as_pg "$bin/pg_ctl -D $state/data -o '-p $port -k $state -c listen_addresses= ${2:-}' -w -l $state/log start" >/dev/null ;;
  stop)
    as_pg "$bin/pg_ctl -D $state/data -m fast -w stop" >/dev/null || true ;;
  destroy)
    "$0" stop; rm -rf "$state" ;;
  *) echo "usage: $0 init SCALE|start SETTINGS|stop|destroy" >&2; exit 2 ;;
esac
