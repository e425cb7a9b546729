#!/usr/bin/env bash
# Runs one cargo-fuzz target for MINUTES minutes on the stable toolchain and prints
# libFuzzer's final stats (executions, speed, new inputs, peak RSS).
#
#   fuzz/run.sh TARGET MINUTES [libFuzzer flags...]
#
# New inputs go to fuzz/corpus-run/TARGET (not checked in); fuzz/corpus/TARGET is read as
# seeds. Environment: FUZZ_FLAGS adds cargo-fuzz flags (e.g. "-s none" for no sanitizer),
# UNDERTEXT_FUZZ_TOLERATE=name lets an open finding pass (see README.md).
set -euo pipefail

if [[ $# -lt 2 || ! $2 =~ ^[0-9]+$ ]]; then
    echo "usage: $0 TARGET MINUTES [libFuzzer flags...]" >&2
    exit 2
fi
target=$1
minutes=$2
shift 2
cd "$(dirname "$0")"

command -v cargo-fuzz >/dev/null || {
    echo "cargo-fuzz is missing: cargo install cargo-fuzz --locked" >&2
    exit 2
}

work=corpus-run/$target
mkdir -p "$work" "corpus/$target" target
log=target/run-$target.log

# cargo-fuzz passes nightly-only flags (-Zsanitizer=...); RUSTC_BOOTSTRAP=1 lets the stable
# toolchain accept them.
set +e
# shellcheck disable=SC2086 # FUZZ_FLAGS is a list of flags
RUSTC_BOOTSTRAP=1 cargo fuzz run ${FUZZ_FLAGS:-} "$target" "$work" "corpus/$target" -- \
    -max_total_time=$((minutes * 60)) -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=2048 \
    -print_final_stats=1 "$@" >"$log" 2>&1
rc=$?
set -e

if [[ $rc -ne 0 ]]; then
    echo "== $target FAILED (exit $rc); full log: fuzz/$log"
    grep -E -A3 "panicked at|ERROR: |SUMMARY: |Test unit written to|Failing input" "$log" || tail -40 "$log"
fi
grep -E "^Done [0-9]+ runs|^stat::" "$log" || true
execs=$(grep -oE "^stat::number_of_executed_units: [0-9]+" "$log" | grep -oE "[0-9]+$" || true)
echo "== $target: ${execs:-unknown} executions in $minutes min; working corpus fuzz/$work:" \
    "$(find "$work" -type f | wc -l) files, $(du -sh "$work" | cut -f1)"
exit $rc
