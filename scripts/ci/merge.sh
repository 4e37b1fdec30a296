#!/usr/bin/env bash
# The campaign's final job: merge the shards' run roots, gate against the leaderboard,
# report, and write the leaderboard package. The CI workflow's merge job and the Kubernetes
# merge Job both run this (docs/guides/ci.md).
#
# Environment: BENCHMARK, SHARDS_DIR (a folder holding one run root per shard, e.g. the
# downloaded artifacts), OUT (the merged run root, new), DRY_RUN, SUBMIT_ATTEMPT (with K
# attempts per task the leaderboard takes one, the same for every task: default 1).
set -euo pipefail
BENCHMARK=${BENCHMARK:-programbench}
SHARDS_DIR=${SHARDS_DIR:-runs}
OUT=${OUT:-merged}

roots=()
for root in "$SHARDS_DIR"/*/; do
  [ -f "$root/run_manifest.json" ] && roots+=("${root%/}")
done
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
