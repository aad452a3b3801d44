#!/usr/bin/env bash
# Runs every fuzz target for a fixed budget (seconds each), starting from the
# committed seeds. A crash fails the run and leaves its input in fuzz/artifacts/.
# RUSTC_BOOTSTRAP lets the machine's stable toolchain accept cargo-fuzz's
# flags, so no nightly toolchain (which a fresh machine cannot download) is needed.
set -euo pipefail
budget="${1:-20}"
cd "$(dirname "$0")/../fuzz"
export RUSTC_BOOTSTRAP=1
targets=$(cargo fuzz list)
cargo fuzz build --release --sanitizer none
for t in $targets; do
  mkdir -p "corpus/$t"
  seeds="seeds/$t"
  [ -d "$seeds" ] || seeds=""
  echo "fuzz: $t for ${budget}s"
  log="target/fuzz-$t.log"
  mkdir -p target
  if ! cargo fuzz run --release --sanitizer none "$t" "corpus/$t" $seeds -- \
      -max_total_time="$budget" -max_len=4096 -print_final_stats=1 >"$log" 2>&1; then
    tail -n 40 "$log"
    echo "fuzz: $t failed; the input is saved under fuzz/artifacts/$t"
    exit 1
  fi
  grep -E 'stat::number_of_executed_units' "$log" || true
done
echo "fuzz: all targets ran ${budget}s without a failure"
