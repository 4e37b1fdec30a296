#!/usr/bin/env bash
# One shard of a paid benchmark campaign. The CI workflow's shard job
# (.github/workflows/benchmark.yml) and the Kubernetes Indexed Job's pod
# (deploy/kubernetes/campaign.yaml) both run this script with the same environment, so their
# command lines are the same (tests/test_ci_workflow.py and tests/test_kubernetes.py check it).
# docs/guides/ci.md is the recipe. Every refusal here is one line on stderr and exit 2.
#
# Environment (the workflow's inputs; empty means the default):
#   BENCHMARK SELECT EXTRA_ARGS AGENT AGENT_COMMAND GATEWAY_URL MODEL_UPSTREAM SOLVE_MODEL
#   ATTEMPTS WORKERS TASK_TIMEOUT_MIN PER_TASK_LIMIT_USD MODEL_PRICES BUDGET_USD
#   UNKNOWN_COST_USD METER
#   IMAGE_CEILING_GB KEY_ENV AGENT_KEY (the key, moved to $KEY_ENV) HARNESS_CAMPAIGN_URL
#   AGENT_REPO_DIR AGENT_REF SHARD (I/N) RUN_ROOT RESUME_FROM_DIR CUSTODY_IDENTITY DRY_RUN
set -euo pipefail

refuse() { echo "shard ${SHARD:-?}: $*" >&2; exit 2; }

BENCHMARK=${BENCHMARK:-programbench}
AGENT=${AGENT:-mini-swe-agent}
ATTEMPTS=${ATTEMPTS:-1}
WORKERS=${WORKERS:-4}
TASK_TIMEOUT_MIN=${TASK_TIMEOUT_MIN:-60}
KEY_ENV=${KEY_ENV:-HARNESS_MODEL_API_KEY}
METER=${METER:-none}
AGENT_REPO_DIR=${AGENT_REPO_DIR:-.}
[ -n "${SHARD:-}" ] || refuse "SHARD is empty: give I/N"
[ -n "${RUN_ROOT:-}" ] || refuse "RUN_ROOT is empty: give the shard's run folder"
CUSTODY_IDENTITY=${CUSTODY_IDENTITY:-github:${GITHUB_REPOSITORY:-local}/${GITHUB_RUN_ID:-0}/shard-${SHARD/\//-of-}}

# The key reaches the run only as an environment variable, never argv or a file.
if [ -n "${AGENT_KEY:-}" ]; then export "$KEY_ENV=$AGENT_KEY"; fi
unset AGENT_KEY
paid=yes; case "$AGENT" in oracle|nop) paid=no;; esac
dry=no; [ "${DRY_RUN:-false}" = true ] && dry=yes

# -n sized to the runner: at most one worker per CPU and per 4 GiB of memory.
cpus=$(nproc)
mem4=$(awk '/^MemTotal:/ {print int($2 / 4194304)}' /proc/meminfo)
n=$WORKERS
[ "$cpus" -lt "$n" ] && n=$cpus
[ "$mem4" -lt "$n" ] && n=$mem4
[ "$n" -ge 1 ] || n=1
[ "$n" = "$WORKERS" ] || echo "shard $SHARD: -n $n, not $WORKERS: the runner has $cpus CPU(s) and $((mem4 * 4)) GiB (the plan assumed $WORKERS workers)"

args=(--shard "$SHARD" --run-root "$RUN_ROOT" --junitxml "$RUN_ROOT/junit.xml"
      --agent "$AGENT" --attempts "$ATTEMPTS" -n "$n" --pull missing
      --agent-repo "$AGENT_REPO_DIR" --custody-identity "$CUSTODY_IDENTITY")
[ -n "${AGENT_REF:-}" ] && args+=(--expect-agent-commit "$AGENT_REF")
[ -n "${SELECT:-}" ] && args+=(-k "$SELECT")
[ -n "${SOLVE_MODEL:-}" ] && args+=(--solve-model "$SOLVE_MODEL")
[ "$BENCHMARK" = programbench ] && args+=(--pb-task-timeout "$((TASK_TIMEOUT_MIN * 60))")
[ -n "${IMAGE_CEILING_GB:-}" ] && args+=(--image-disk-ceiling-gb "$IMAGE_CEILING_GB")

# A per-task limit for every paid agent kind; the command agents enforce it in the model
# gateway, so they need --model-upstream.
limit=()
[ "$paid" = yes ] && [ -n "${PER_TASK_LIMIT_USD:-}" ] && limit=(--per-task-limit-usd "$PER_TASK_LIMIT_USD")
case "$AGENT" in
  gateway)
    [ -n "${GATEWAY_URL:-}" ] || refuse "agent gateway needs gateway_url (the agent server on this runner)"
    args+=(--gateway-url "$GATEWAY_URL");;
  command|host-command)
    [ -n "${AGENT_COMMAND:-}" ] || refuse "agent $AGENT needs agent_command"
    args+=(--agent-command "$AGENT_COMMAND")
    if [ -n "${MODEL_UPSTREAM:-}" ]; then
      args+=(--model-upstream "$MODEL_UPSTREAM" --model-key-env "$KEY_ENV")
    elif [ "$paid" = yes ] && [ "$dry" = no ]; then
      refuse "agent $AGENT spends money: give model_upstream, so the model gateway enforces per_task_limit_usd and counts the cost"
    else
      limit=()  # nothing sees its model calls: no limit to enforce (a dry run, or unpaid)
    fi;;
esac
args+=("${limit[@]}")
# The price of each model call: without one a call's cost is unknown, and the per-task limit
# stops the agent at its first call (the gateway agent's server reports its own cost).
case "$AGENT" in
  mini-swe-agent|command|host-command)
    [ -n "${MODEL_PRICES:-}" ] && args+=(--model-prices "$MODEL_PRICES");;
esac

# Money: every shard admits its instances against ONE campaign in PostgreSQL, so the ceiling
# holds for the whole matrix; without a meter each instance of unknown cost is charged the
# unknown-cost allowance.
if [ -n "${HARNESS_CAMPAIGN_URL:-}" ]; then
  args+=(--campaign-url env:HARNESS_CAMPAIGN_URL --campaign-budget-usd "${BUDGET_USD:-100}" --meter "$METER")
  [ -n "${UNKNOWN_COST_USD:-}" ] && args+=(--unknown-cost-allowance-usd "$UNKNOWN_COST_USD")
elif [ "$paid" = yes ] && [ "$dry" = no ]; then
  refuse "agent $AGENT spends money: add the HARNESS_CAMPAIGN_URL secret (postgresql://...) so every shard shares one ceiling"
fi
if [ "$paid" = yes ] && [ "$dry" = no ] && [ -z "${!KEY_ENV:-}" ]; then
  refuse "the model key is empty: add the secret named by key_secret (it reaches the run as \$$KEY_ENV)"
fi

# A shard that ran before (an earlier attempt of this workflow run, or the run named by
# resume_from) resumes: its settled units are carried, not paid again.
if [ -n "${RESUME_FROM_DIR:-}" ] && [ -f "$RESUME_FROM_DIR/run_manifest.json" ]; then
  echo "shard $SHARD: resuming $RESUME_FROM_DIR"
  args+=(--resume-from "$RESUME_FROM_DIR")
fi
[ "$dry" = yes ] && args+=(--dry-run)

extra=()
[ -n "${EXTRA_ARGS:-}" ] && read -r -a extra <<< "$EXTRA_ARGS"

mkdir -p "$(dirname "$RUN_ROOT")"
# The gateway agent's server runs on this runner, beside the engine it execs into.
server=
if [ "$AGENT" = gateway ] && [ -n "${AGENT_COMMAND:-}" ] && [ "$dry" = no ]; then
  # its own process group (every process it starts ends with it), without the campaign's URL
  setsid env -u HARNESS_CAMPAIGN_URL bash -c "$AGENT_COMMAND" > "$RUN_ROOT.agent-server.log" 2>&1 &
  server=$!
  trap '[ -n "$server" ] && kill -- -"$server" 2>/dev/null || true' EXIT
  python3 - "$GATEWAY_URL" <<'PY' || refuse "the agent server did not answer $GATEWAY_URL/api/health within 60 s (see $RUN_ROOT.agent-server.log)"
import sys, time, urllib.request
for _ in range(120):
    try:
        urllib.request.urlopen(sys.argv[1].rstrip("/") + "/api/health", timeout=2)
        sys.exit(0)
    except OSError:
        time.sleep(0.5)
sys.exit(1)
PY
fi

python3 -m pytest "benchmarks/$BENCHMARK" "${args[@]}" "${extra[@]}" &
run=$!
# As a container's PID 1 (the Kubernetes pod) bash ignores a signal it has no trap for:
# pass SIGTERM/SIGINT on to the run, which stops, records, finalizes (exit 3); then wait.
trap 'kill -TERM "$run" 2>/dev/null || true' TERM INT
rc=0
wait "$run" || rc=$?
while kill -0 "$run" 2>/dev/null; do rc=0; wait "$run" || rc=$?; done
exit "$rc"
