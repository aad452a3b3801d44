#!/usr/bin/env bash
# The Debian package as an operator meets it (`make debtest`, part of `make
# test`): lintian; then, inside a throw-away overlay of this machine's root
# (its own mount and network namespaces, so nothing of the host changes and
# nothing listens on the host's ports): install, the units verified, the
# packaged `up` service run by hand as its unit would (user kansoku, the
# unit's capabilities, the unit's command line, the shipped configuration)
# until it serves and traces, an upgrade that keeps data and the edited
# configuration, remove (data and configuration kept), purge (data kept).
# Usage: scripts/deb-test.sh DIR (holding kansoku_*.deb, from `make deb`).
set -euo pipefail
dir=$(realpath "${1:?usage: $0 DIR-with-the-deb}")
deb=$(ls "$dir"/kansoku_*_amd64.deb | sort -V | tail -n 1)
[ -f "$deb" ] || { echo "deb-test: no kansoku_*_amd64.deb in $dir (run make deb)" >&2; exit 1; }
echo "deb-test: $deb"

# Lintian, as Debian's archive would run it: errors fail, warnings show.
lintian --fail-on error --allow-root "$deb"

# A newer build of the same package for the upgrade: its version bumped.
work=$(mktemp -d /tmp/kansoku-debtest.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/ctl"
dpkg-deb -R "$deb" "$work/newer"
version=$(dpkg-deb -f "$deb" Version)
sed -i "s/^Version: .*/Version: ${version}+upgrade1/" "$work/newer/DEBIAN/control"
dpkg-deb -b -Zgzip "$work/newer" "$work/ctl/newer.deb" >/dev/null
cp "$deb" "$work/ctl/first.deb"

cat > "$work/ctl/inside.sh" <<'EOF'
set -euo pipefail
trap 'echo "deb-test: FAILED at line $LINENO of the steps inside" >&2' ERR
step() { echo "deb-test: $*"; }
fail() { echo "deb-test: FAILED: $*" >&2; exit 1; }
ip link set lo up
export DEBIAN_FRONTEND=noninteractive
dpkg -i /ctl/first.deb >/ctl/dpkg.log 2>&1 || { cat /ctl/dpkg.log; fail "dpkg -i"; }
step "installed $(dpkg-query -W -f '${Package} ${Version}' kansoku)"
id kansoku >/dev/null || fail "no user kansoku"
[ "$(stat -c '%U %a' /var/lib/kansoku)" = "kansoku 700" ] || fail "/var/lib/kansoku: $(stat -c '%U %a' /var/lib/kansoku)"
[ -L /etc/systemd/system/multi-user.target.wants/kansoku-up.service ] || fail "kansoku-up.service is not enabled"
[ ! -e /etc/systemd/system/multi-user.target.wants/kansoku-agent.service ] || fail "kansoku-agent.service is enabled"
man -w kansoku-up >/dev/null || fail "no manual page kansoku-up"
kansoku config check || fail "the shipped configuration does not check"
# (It also checks each ExecStart is executable and each man: page exists.)
systemd-analyze verify /usr/lib/systemd/system/kansoku-up.service /usr/lib/systemd/system/kansoku-agent.service \
  /usr/lib/systemd/system/kansoku-server.service >/ctl/verify.log 2>&1 || { cat /ctl/verify.log; fail "systemd-analyze verify"; }
! grep -i 'kansoku' /ctl/verify.log || fail "systemd-analyze verify warned about our units"
step "units verified, user and data directory made, kansoku-up enabled"

# The up service as systemd would run it: its user, its capabilities, its
# command line (plus the sampling the capabilities are for).
unit=/usr/lib/systemd/system/kansoku-up.service
exec_start=$(sed -n 's/^ExecStart=//p' "$unit")
caps=$(sed -n 's/^AmbientCapabilities=//p' "$unit" | tr ' ' '\n' | sed 's/^CAP_//' | tr 'A-Z' 'a-z' | sed 's/^/+/' | paste -sd, -)
cd /var/lib/kansoku
setpriv --reuid kansoku --regid kansoku --init-groups --inh-caps "$caps" --ambient-caps "$caps" \
  $exec_start --perf 99 --processes 1s 2>/ctl/up.log &
pid=$!
trap 'kill -KILL "$pid" 2>/dev/null || true' EXIT
grep -q -m1 'listening on' < <(timeout 60 tail --pid="$pid" -n +1 -f /ctl/up.log) || { cat /ctl/up.log; fail "kansoku up did not start"; }
status=$(curl -sf http://127.0.0.1:7070/api/v1/status) || fail "no /api/v1/status"
kill -TERM "$pid"; wait "$pid" || { cat /ctl/up.log; fail "kansoku up did not stop cleanly"; }
grep -E ' (WARN|ERROR) ' /ctl/up.log && fail "kansoku up complained under its unit's capabilities"
grep -q 'trace: kernel event histograms' /ctl/up.log || fail "the tracer did not start"
grep -q 'perf: sampling every CPU' /ctl/up.log || fail "perf sampling did not start"
grep -q 'exits from taskstats' /ctl/up.log || fail "taskstats did not start"
[ "$(stat -c %U /var/lib/kansoku/wal 2>/dev/null || stat -c %U "$(ls -d /var/lib/kansoku/* | head -1)")" = kansoku ] || fail "data not written as kansoku"
step "kansoku up ran as kansoku with $caps: served, traced, sampled, stopped"

# The operator's edit of the configuration survives the upgrade, and the data.
printf '\n# an operator'"'"'s edit\n' >> /etc/kansoku/kansoku.toml
before=$(cd /var/lib/kansoku && find . -type f -exec sha256sum {} + | sort)
dpkg -i --force-confold /ctl/newer.deb >/ctl/dpkg.log 2>&1 || { cat /ctl/dpkg.log; fail "upgrade"; }
[ "$(cd /var/lib/kansoku && find . -type f -exec sha256sum {} + | sort)" = "$before" ] || fail "the upgrade changed the data"
grep -q "an operator's edit" /etc/kansoku/kansoku.toml || fail "the upgrade lost the edited configuration"
step "upgraded to $(dpkg-query -W -f '${Version}' kansoku): data and edited configuration kept"

dpkg -r kansoku >/ctl/dpkg.log 2>&1 || { cat /ctl/dpkg.log; fail "dpkg -r"; }
[ ! -e /usr/bin/kansoku ] || fail "dpkg -r left the binary"
[ -f /etc/kansoku/kansoku.toml ] || fail "dpkg -r removed the configuration"
[ "$(cd /var/lib/kansoku && find . -type f -exec sha256sum {} + | sort)" = "$before" ] || fail "dpkg -r changed the data"
dpkg -P kansoku >/ctl/dpkg.log 2>&1 || { cat /ctl/dpkg.log; fail "dpkg -P"; }
[ ! -e /etc/kansoku/kansoku.toml ] || fail "dpkg -P left the configuration"
[ ! -e /etc/systemd/system/multi-user.target.wants/kansoku-up.service ] || fail "dpkg -P left the unit enabled"
[ "$(cd /var/lib/kansoku && find . -type f -exec sha256sum {} + | sort)" = "$before" ] || fail "dpkg -P changed the data"
step "removed (configuration and data kept), purged (data kept in /var/lib/kansoku)"
EOF

# In a throw-away overlay of this machine (scripts/overlay-chroot.sh) with a
# network namespace of its own. (Not a PID namespace: taskstats, which the
# up service's --processes uses, answers only in the initial one; the
# steps stop what they start.)
unshare --mount --net --fork "$(dirname "$(realpath "$0")")/overlay-chroot.sh" "$work" deb /ctl/inside.sh
echo "deb-test: ok"
