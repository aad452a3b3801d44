#!/usr/bin/env bash
# Runs `bash SCRIPT ARGS…` as root of a throw-away copy of this machine:
# an overlay of / whose changes live in a tmpfs at WORK/NAME, with /proc of
# the caller's PID namespace, /dev and /sys bound, /run and /tmp empty, and
# WORK/ctl bound at /ctl (how the caller hands files in and reads results).
# Call it inside `unshare --mount --pid --fork` (and a network namespace of
# its own): the mounts, and every process started, end with it.
# Used by scripts/deb-test.sh and scripts/rehearse.sh.
set -euo pipefail
w=${1:?usage: $0 WORK NAME SCRIPT [ARGS…]} n=${2:?} ; shift 2
mkdir -p "$w/$n"
mount -t tmpfs tmpfs "$w/$n"
mkdir -p "$w/$n/upper" "$w/$n/work" "$w/$n/root"
mount -t overlay overlay -o lowerdir=/,upperdir="$w/$n/upper",workdir="$w/$n/work" "$w/$n/root"
r="$w/$n/root"
mount -t proc proc "$r/proc"
mount --rbind /dev "$r/dev"
mount --rbind /sys "$r/sys"
mount -t tmpfs tmpfs "$r/run"
mount -t tmpfs tmpfs "$r/tmp"
mkdir -p "$r/ctl"
mount --bind "$w/ctl" "$r/ctl"
exec chroot "$r" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root bash "$@"
