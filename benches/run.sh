#!/usr/bin/env bash
# Runs every Undertext bench with short settings, one bench binary at a time (never two heavy
# benches together), then says where criterion put the results.
#
#   benches/run.sh                 # all benches
#   BENCHES="get_blob" benches/run.sh   # only these bench files
#   benches/run.sh undertext       # extra arguments go to criterion (here: an id filter)
#
# Env: BENCHES (space-separated bench names; default every file in benches/benches/),
# BENCH_MANIFEST (workspace Cargo.toml, default: this repo's), UNDERTEXT_BENCH_TMPDIR (where
# the stores live; default <target>/bench-tmp, must not be a tmpfs), UNDERTEXT_TRANSCRIPTS.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
manifest="${BENCH_MANIFEST:-$root/Cargo.toml}"
short=(--warm-up-time 1 --measurement-time 3)

# Default: every bench file, in name order (durable_put, get_blob, reopen, ...).
benches=()
if [[ -n "${BENCHES:-}" ]]; then
    read -ra benches <<<"$BENCHES"
else
    for f in "$root"/benches/benches/*.rs; do benches+=("$(basename "$f" .rs)"); done
fi

for bench in "${benches[@]}"; do
    echo "=== $bench ($(date -u +%FT%TZ))"
    cargo bench --manifest-path "$manifest" -p undertext-benches --bench "$bench" -- "${short[@]}" "$@"
done

target="$(cargo metadata --manifest-path "$manifest" --format-version 1 --no-deps \
    | grep -o '"target_directory":"[^"]*"' | cut -d'"' -f4)"
echo
echo "criterion results: $target/criterion/<group>/<bench id>/new/estimates.json"
echo "  groups: $(ls -d "$target"/criterion/*/ 2>/dev/null | tr '\n' ' ')"
