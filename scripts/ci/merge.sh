#!/usr/bin/env bash
# The campaign's final job: merge the shards' run roots, gate against the leaderboard,
# report, and write the leaderboard package. The CI workflow's merge job and the Kubernetes
# merge Job both run this (docs/guides/ci.md).
#
# Environment: BENCHMARK, SHARDS_DIR (the unpacked artifacts: each shard's run roots and the
# marker naming its latest; or a folder of one run root per shard), OUT (the merged run root, new), DRY_RUN, SUBMIT_ATTEMPT (with K
# attempts per task the leaderboard takes one, the same for every task: default 1).
set -euo pipefail
BENCHMARK=${BENCHMARK:-programbench}
SHARDS_DIR=${SHARDS_DIR:-runs}
OUT=${OUT:-merged}

# Each shard's latest run root: the one its marker names (scripts/ci/artifact.sh), else,
# without markers, every run root in SHARDS_DIR (the Kubernetes merge links them there).
roots=()
for marker in "$SHARDS_DIR"/shard-*.latest; do
  [ -f "$marker" ] || continue
  shard=${marker##*/shard-}; shard=${shard%.latest}
  root=$(scripts/ci/artifact.sh latest "$SHARDS_DIR" "$shard")
  [ -n "$root" ] && roots+=("$root")
done
if [ "${#roots[@]}" -eq 0 ]; then
  for root in "$SHARDS_DIR"/*/; do
    [ -f "$root/run_manifest.json" ] && roots+=("${root%/}")
  done
fi
[ "${#roots[@]}" -gt 0 ] || { echo "merge: no shard run root under $SHARDS_DIR" >&2; exit 2; }

# Refuses overlap, gaps and differing options: a shard that did not finish fails the job
# (re-run it: it resumes from its artifact).
harness merge "${roots[@]}" --output "$OUT"

if [ "$BENCHMARK" = programbench ] && [ -f gate/reference.json ]; then
  harness programbench gate "$OUT" --reference gate/reference.json | tee "$OUT/gate.txt"
else
  echo "no gate: gate/reference.json is not in the repository" | tee "$OUT/gate.txt"
fi
harness report "$OUT"

if [ "$BENCHMARK" = programbench ] && [ "${DRY_RUN:-false}" != true ]; then
  # The official package and its Tier-0 verify; a run that is not reportable is refused.
  harness programbench submission "$OUT" --output "$OUT-submission" --attempt "${SUBMIT_ATTEMPT:-1}"
fi
