#!/usr/bin/env bash
# Runs every cargo-fuzz target for MINUTES minutes each, one after the other (the machines
# have 2 cores), through run.sh, and prints one line per target with its executions.
#
#   fuzz/campaign.sh [MINUTES] [TARGET...]     # default 10 minutes, every target
#
# Exits non-zero if any target failed (its log: fuzz/target/run-TARGET.log).
set -uo pipefail
cd "$(dirname "$0")"
minutes=${1:-10}
shift || true
targets=("$@")
if [[ ${#targets[@]} -eq 0 ]]; then
    mapfile -t targets < <(sed -n 's/^name = "\(.*\)"$/\1/p' Cargo.toml | grep -v '^undertext-fuzz$')
fi
failed=0
summary=()
for t in "${targets[@]}"; do
    echo "== fuzzing $t for $minutes min"
    out=$(./run.sh "$t" "$minutes")
    rc=$?
    echo "$out"
    line=$(echo "$out" | grep -E "^== $t: " | tail -1)
    if [[ $rc -ne 0 ]]; then
        failed=1
        summary+=("$t: FAILED (fuzz/target/run-$t.log)")
    else
        summary+=("${line#== }")
    fi
done
echo "== fuzz campaign, $minutes min per target"
printf '%s\n' "${summary[@]}"
exit $failed
