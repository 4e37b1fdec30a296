"""Every option of the runner, in one place (issue 42), and :class:`RunOptions`, the typed
view of those the controller reads.

One ``pytest_addoption`` registers them, in the ``--help`` groups they always had (the
runner's ``benchmark runner``, ``campaign budgets and reservations``, ``the agent under
test`` and ``model gateway pacing``); the plugins keep their hooks and fixtures and read the
values. A benchmark's own options stay with the benchmark (its conftest or adapter), under
its prefix (``--pb-``, ``--cowork-``, ``--harbor-``, ``--selftest-``).

A value that can be judged alone is judged when pytest parses the command line: its
``type=`` callable raises :class:`argparse.ArgumentTypeError`, which pytest prints as one
usage line (``argument --model-rpm: '0' is not a positive number; pass e.g. --model-rpm
60``, exit 4). What needs more than the value stays a refusal at admission, exit 2, with
its reason on record in the run's manifest: the files an option names (``--engines``,
``--image-digest-file``, ``--task-file``, ``--compare-to``), the options judged together
(``--meter-blindness-sec`` against the poll, ``--model-record`` with ``--model-replay``),
and ``--shard``, ``--attempts``, ``--retry-infra``, ``--max-recovery-generations`` and
``--run-id``, refused by the controller (exit 2) before the run root exists.

This module loads at collection: it imports no pydantic model.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest

from harness.agents.kinds import AGENT_KINDS
from harness.budget.pgurl import check_option
from harness.run.plan import default_runs_root, parse_count
from harness.runner.deadlines import DEFAULTS, PHASES, parse_deadlines
from harness.sandbox.images.pull_settings import POLICIES
from harness.sandbox.limits import DEFAULT_MAX_COPY_FILES, DEFAULT_MAX_COPY_MB

GATEWAY_URL_ENV = "HARNESS_GATEWAY_URL"
PROGRESS_MODES = ("auto", "live", "lines", "off")
ORDERS = ("auto", "longest-first", "given")  # --order
REPLAY_ORDERS = ("strict", "sequence")  # --replay-order (harness.model_proxy.tape.ORDERS)
Check = Callable[[str], Any]


# ------------------------------------------------------------------------ type= checks


def _number(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        return math.nan
    return value if math.isfinite(value) else math.nan


def whole(flag: str, least: int, example: str) -> Check:
    """An integer at least ``least``."""

    def check(raw: str) -> int:
        try:
            value = int(raw)
        except ValueError:
            value = least - 1
        if value < least:
            raise argparse.ArgumentTypeError(
                f"{raw!r} is not a whole number of at least {least}; pass e.g. {flag} {example}")
        return value

    return check


def positive(flag: str, example: str, *, keep_text: bool = False) -> Check:
    """A finite number above 0 (``keep_text``: the value as given, e.g. for a value the run's
    configuration records as written)."""

    def check(raw: str) -> float | str:
        value = _number(raw)
        if not value > 0:
            raise argparse.ArgumentTypeError(
                f"{raw!r} is not a positive number; pass e.g. {flag} {example}")
        return raw if keep_text else value

    return check


def non_negative(flag: str, example: str, *, least: float = 0.0) -> Check:
    """A finite number at least 0 (and at least ``least``, for a lease that must renew)."""

    def check(raw: str) -> float:
        value = _number(raw)
        if not value >= 0:
            raise argparse.ArgumentTypeError(
                f"{raw!r} is not a non-negative number; pass e.g. {flag} {example}")
        if value < least:
            raise argparse.ArgumentTypeError(
                f"{raw!r} is too short to renew: pass at least {least:g} to {flag}")
        return value

    return check


def one_of(flag: str, choices: tuple[str, ...]) -> Check:
    """One of ``choices``, named in the refusal."""

    def check(raw: str) -> str:
        if raw not in choices:
            listed = ", ".join(choices[:-1]) + f" or {choices[-1]}"
            raise argparse.ArgumentTypeError(f"{raw!r} is unknown; use {flag} {listed}")
        return raw

    return check


def positive_int(raw: str) -> int:
    """``--max-copy-out-mb``/``--max-copy-out-files``: an integer above 0."""
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{raw!r} is not a positive integer; pass e.g. 1024")
    return value


def ceiling_gb(raw: str) -> float:
    """``--image-disk-ceiling-gb``: a positive number of GiB (fractions allowed)."""
    value = _number(raw)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{raw!r} is not a positive number of GiB (e.g. 12 "
                                         "or 0.5)")
    return value


def phase_timeout(raw: str) -> str:
    """One ``--phase-timeout PHASE=SECONDS`` (kept as given; :func:`parse_deadlines` reads
    them all)."""
    try:
        parse_deadlines([raw])
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--phase-timeout ")) from None
    return raw


def record_budget(raw: str) -> str:
    """``--model-record-budget CALLS,BYTES``: two positive whole numbers (kept as given)."""
    parts = raw.split(",")
    if len(parts) == 2 and all(p.strip().isdigit() and int(p) > 0 for p in parts):
        return raw
    raise argparse.ArgumentTypeError(f"{raw!r}: give CALLS,BYTES as two positive whole "
                                     "numbers, e.g. --model-record-budget 2000,67108864")


# ----------------------------------------------------------------------------- the options


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("harness", "benchmark runner")
    _add_run(group)
    _add_sandbox(group)
    _add_images(group)
    _add_engines(group)
    _add_budget(parser.getgroup("harness budget", "campaign budgets and reservations"))
    _add_agent(parser.getgroup("harness agent", "the agent under test"))
    _add_tapes(parser.getgroup("harness agent"))
    pacing = parser.getgroup("model gateway pacing")
    for dest, (flag, _, integer, text) in PACING.items():
        check = (whole(flag, 0 if dest in ("model_retries", "model_retry_budget") else 1, "4")
                 if integer else positive(flag, "60"))
        pacing.addoption(flag, dest=dest, default=None, metavar="N", type=check, help=text)


def _add_run(group: Any) -> None:
    group.addoption("--run-root", default=None,
                    help="directory of this run (must not exist); default "
                         "$BENCH_RUNS_ROOT (or $OUROBOROS_BENCH_RUNS_ROOT)/<run_id>, else "
                         "./bench_runs/<run_id>")
    group.addoption("--run-id", default=None, help="run id (default <benchmark>-<time>-<hex>)")
    group.addoption("--dry-run", action="store_true", default=False,
                    help="write manifest, plan and each instance's inputs; run no agent")
    group.addoption("--resume-from", default=None, metavar="RUN_ROOT",
                    help="continue an earlier run in a new run root")
    group.addoption("--max-recovery-generations", default="2",
                    help="most resume generations allowed while work remains (default 2)")
    group.addoption("--allow-seed-change", action="store_true", default=False,
                    help="resume although the agent seed commit (--agent-repo HEAD) differs "
                         "from the ancestor's (waiver recorded in the manifest)")
    group.addoption("--allow-runtime-change", action="store_true", default=False,
                    help="resume although the agent server's runtime_version differs from "
                         "the ancestor's (waiver recorded)")
    group.addoption("--allow-image-change", action="store_true", default=False,
                    help="resume although an instance image's digest differs from the one "
                         "the ancestor ran (waiver recorded)")
    group.addoption("--shard", default=None, metavar="I/N",
                    help="run shard I of N: a stable hash of the task id, so every attempt "
                         "of a task is in one shard, also after a resume raises --attempts")
    group.addoption("--instance", action="append", default=[], metavar="ID",
                    help="select an instance by id (repeatable)")
    group.addoption("--task-file", default=None, metavar="FILE",
                    help="select the instances FILE lists: one id a line ('#' comments, "
                         "blank lines ignored), or a JSON list, or the ProgramBench gate's "
                         "--tasks file; an unknown id is refused (exit 2)")
    group.addoption("--all-instances", action="store_true", default=False,
                    help="select every instance the benchmark collects; with --resume-from "
                         "it grows the run from its ancestor's selection to all of them")
    group.addoption("--harness-progress", default="auto", metavar="MODE",
                    type=one_of("--harness-progress", PROGRESS_MODES),
                    help="live progress: auto (live on a terminal, lines otherwise), "
                         "live, lines, off")
    group.addoption("--no-report", action="store_true", default=False,
                    help="do not write the HTML/Markdown report at session end")
    group.addoption("--compare-to", default=None, metavar="RUN_ROOT",
                    help="add a paired comparison with an earlier run to the report")
    group.addoption("--attempts", default=None, metavar="K",
                    help="run each instance K times, each attempt its own item, sandbox, "
                         "row and budget reservation (ids <id>@1 ... <id>@K); default 1, "
                         "or the ancestor's K on --resume-from")
    group.addoption("--retry-infra", default="1", metavar="N",
                    help="run an instance again, up to N times, when it failed on "
                         "infrastructure (never an agent failure nor an interrupt), each try "
                         "its own row, the last one counting (default 1; 0: off)")
    group.addoption("--retry-infra-backoff", default="1", metavar="SEC",
                    type=non_negative("--retry-infra-backoff", "1"),
                    help="wait before the first infrastructure retry, doubled for each "
                         "next one, at most 60 s (default 1)")


def _add_sandbox(group: Any) -> None:
    group.addoption("--keep-sandboxes", action="store_true", default=False,
                    help="leave sandbox containers running after each instance (debugging); "
                         "remove them later with `harness sweep --run RUN_ID`")
    group.addoption("--max-copy-out-mb", type=positive_int, default=DEFAULT_MAX_COPY_MB,
                    metavar="MB",
                    help=f"most bytes of files one instance may copy out of its sandbox "
                         f"(default {DEFAULT_MAX_COPY_MB}); more ends it as an agent failure "
                         f"(submission_too_large)")
    group.addoption("--max-copy-out-files", type=positive_int,
                    default=DEFAULT_MAX_COPY_FILES, metavar="N",
                    help=f"most entries one instance may copy out of its sandbox (default "
                         f"{DEFAULT_MAX_COPY_FILES}); more ends it as an agent failure "
                         f"(too_many_files)")
    group.addoption("--runtime", dest="sandbox_runtime", default=None, metavar="NAME",
                    help="OCI runtime of every agent sandbox, registered with dockerd (e.g. "
                         "runsc: gVisor, see scripts/setup.sh); default: the daemon's "
                         "default runtime")


def _add_images(group: Any) -> None:
    group.addoption("--pull", choices=POLICIES, default="missing",
                    help="pull instance images: missing (default), always (once per run), "
                         "never")
    group.addoption("--pull-jobs", type=int, default=2, metavar="N",
                    help="at most N concurrent image pulls across all workers (default 2)")
    group.addoption("--pull-retries", type=int, default=3, metavar="N",
                    help="retries of a failed pull, with exponential back-off (default 3)")
    group.addoption("--pull-min-free-gb", type=float, default=5.0, metavar="G",
                    help="free disk to keep on Docker's data root after a pull (default 5)")
    group.addoption("--image-mirror", default=None, metavar="HOST[:PORT]",
                    help="pull HOST[:PORT]/<repository>:<tag> instead of the canonical image")
    group.addoption("--image-digest-file", default=None, metavar="FILE",
                    help='JSON {"instance_id": "sha256:..."}: pin instances to exact digests')
    group.addoption("--image-disk-ceiling-gb", type=ceiling_gb, default=None, metavar="G",
                    help="the most disk (GiB) this run's pulled task images may hold at once "
                         "on an engine: each is removed after its instance's eval, a pull "
                         "waits for room, an image bigger than G is refused unpulled "
                         "(image_exceeds_ceiling); default: no ceiling, nothing removed")


def _add_engines(group: Any) -> None:
    group.addoption("--docker-host", action="append", default=[], metavar="URL",
                    help="run instances on this Docker engine (repeatable; unix://, tcp://, "
                         "ssh://); at most the worker count each, as its resources allow")
    group.addoption("--engines", default=None, metavar="FILE",
                    help="TOML/JSON list of engines: url, capacity (the most instances at "
                         "once), labels, cert_path (tcp:// over TLS); and an instance's size")
    group.addoption("--instance-resources", default=None, metavar="SPEC",
                    help="with --docker-host/--engines: what one instance takes on an "
                         "engine, e.g. cpus=4,memory=16g,disk=40g (default cpus=1,memory=1g,"
                         "disk=2g); each engine takes as many as its CPUs, free memory and "
                         "disk allow")
    group.addoption("--order", choices=ORDERS, default="auto",
                    help="instance order: longest-first (estimates from --durations-from or "
                         "difficulty), given; auto (default): longest-first when known")
    group.addoption("--durations-from", action="extend", nargs="+", default=[],
                    metavar="RUN_ROOT", help="earlier run roots whose ledgers give durations")
    defaults = ", ".join(f"{p} {DEFAULTS[p]:g}" if DEFAULTS[p] else f"{p} none"
                         for p in PHASES)
    group.addoption("--phase-timeout", action="append", default=[], metavar="PHASE=SECONDS",
                    type=phase_timeout,
                    help=f"deadline of an instance's phase; past it the instance is "
                         f"infrastructure, phase_timeout naming the phase (repeatable; 0: "
                         f"none; defaults in seconds: {defaults}; agent: the task timeout)")


def _usd(flag: str) -> Check:
    return non_negative(flag, "10")


def _add_budget(group: Any) -> None:
    group.addoption("--campaign-file", default=None, metavar="PATH",
                    help="campaign budget file shared by every run of a campaign")
    group.addoption("--campaign-url", default=None, metavar="URL", type=check_option,
                    help="the campaign in PostgreSQL, shared by runs on several machines: "
                         "postgresql://[user@]host/db?campaign=NAME (the password from "
                         "PGPASSWORD, ~/.pgpass or a service file), or env:NAME")
    group.addoption("--campaign-budget-usd", default=None, metavar="USD",
                    type=_usd("--campaign-budget-usd"),
                    help="the campaign's ceiling (fixed when the campaign file is created)")
    group.addoption("--prior-spend-usd", default=None, metavar="USD",
                    type=_usd("--prior-spend-usd"),
                    help="spend before the campaign file existed (creation only)")
    group.addoption("--per-task-reserve-usd", default=None, metavar="USD",
                    type=_usd("--per-task-reserve-usd"),
                    help="hold this much for each instance in flight (default 0: per-task "
                         "limits are never reserved automatically)")
    group.addoption("--budget-reserve-usd", default="0", metavar="USD",
                    type=_usd("--budget-reserve-usd"),
                    help="one allowance for delayed/in-flight charges, kept unspent below "
                         "the ceiling whatever the concurrency (default 0)")
    group.addoption("--budget-usd", default=None, metavar="USD", type=_usd("--budget-usd"),
                    help="this run's own spend limit")
    group.addoption("--meter", default="none",
                    help="usage meter: openrouter[=URL] | none | a loaded test meter "
                         "(-p harness.testing.fake_meter: fake-file:PATH); a budget "
                         "without a meter needs --unknown-cost-allowance-usd")
    group.addoption("--unknown-cost-allowance-usd", default=None, metavar="USD",
                    type=_usd("--unknown-cost-allowance-usd"),
                    help="held for each instance in flight and charged for one whose cost "
                         "is unknown (a budget without --meter needs it, above 0)")
    group.addoption("--meter-blindness-sec", default="30", metavar="SEC",
                    type=non_negative("--meter-blindness-sec", "30"),
                    help="stop when no meter reading is younger than this (default 30)")
    group.addoption("--meter-poll-sec", default="15", metavar="SEC",
                    type=non_negative("--meter-poll-sec", "15"),
                    help="seconds between meter readings (default 15)")
    group.addoption("--meter-read-timeout-sec", default="5", metavar="SEC",
                    type=non_negative("--meter-read-timeout-sec", "5"),
                    help="bound of one meter reading (default 5)")
    group.addoption("--custody-identity", default=None, metavar="ID",
                    help="this run's name in the campaign across machines, e.g. the CI "
                         "workflow run and shard: a later run with the same identity takes "
                         "a dead entry's custody over, wherever it ran")
    group.addoption("--custody-lease-sec", default="90", metavar="SEC",
                    type=non_negative("--custody-lease-sec", "90", least=4),
                    help="the custody lease, renewed every quarter of it while the run "
                         "lives; another machine counts the run dead once it expired "
                         "(default 90, at least 4)")
    group.addoption("--min-free-disk-gb", default=None, metavar="GIB",
                    type=non_negative("--min-free-disk-gb", "20"),
                    help="refuse to start an instance below this much free disk")


def _add_agent(group: Any) -> None:
    group.addoption("--agent", default=None, metavar="KIND",
                    help=f"agent kind: {' | '.join(AGENT_KINDS)} (required except with "
                         f"--dry-run, where task bodies are written for the gateway)")
    group.addoption("--gateway-url", default=None, metavar="URL",
                    help=f"agent server base URL (or ${GATEWAY_URL_ENV})")
    group.addoption("--gateway-poll-sec", default=None, metavar="SEC",
                    type=positive("--gateway-poll-sec", "5"),
                    help="seconds between polls of a gateway task (default 5)")
    group.addoption("--solve-model", default=None, metavar="MODEL",
                    help="the declared model: the server's OUROBOROS_MODEL must be it, and "
                         "the model gateway (--model-upstream) forwards only it")
    group.addoption("--settings-path", default=None, metavar="PATH",
                    help="the agent server's settings.json (with settings_base.json merged): "
                         "its profile and model slots are checked before any task, and "
                         "recorded (extra.settings_profile)")
    group.addoption("--allow-model", action="append", default=[], metavar="NAME",
                    help="a helper model the model gateway forwards besides --solve-model "
                         "(repeatable); any other model gets 403 model_not_allowed")
    group.addoption("--expect-runtime-version", default=None, metavar="VERSION",
                    help="refuse (exit 2) unless the server reports this runtime_version")
    group.addoption("--allow-runtime-skew", action="store_true", default=False,
                    help="waive a runtime_version skew (recorded in the manifest); "
                         "OBO_ALLOW_EVOLVED_VOLUME=1 does the same")
    group.addoption("--agent-command", default=None, metavar="CMD",
                    help="command line of a CLI agent run inside the sandbox")
    group.addoption("--agent-kill-after", default=None, metavar="SEC",
                    type=positive("--agent-kill-after", "10"),
                    help="command agents: seconds between the task timeout's TERM and its "
                         "KILL (default 10)")
    group.addoption("--agent-exec-margin", default=None, metavar="SEC",
                    type=positive("--agent-exec-margin", "30"),
                    help="command agents: seconds after timeout + kill-after before the "
                         "harness itself kills the process tree (default 30)")
    group.addoption("--agent-env", action="append", default=[], metavar="NAME",
                    help="environment variable passed to the command agent (repeatable; "
                         "values come from this environment, never argv)")
    group.addoption("--agent-config", default=None, metavar="FILE",
                    help="mini-swe-agent: YAML merged over the pinned programbench.yaml")
    group.addoption("--model-upstream", default=None, metavar="URL",
                    help="command and host-command agents: start the model gateway, "
                         "forwarding to this OpenAI/Anthropic-compatible base URL")
    group.addoption("--model-key-env", default=None, metavar="NAME",
                    help="the gateway's provider key comes from $NAME "
                         "(default HARNESS_MODEL_API_KEY; never passed to the sandbox)")
    group.addoption("--model-prices", default=None, metavar="FILE",
                    help="USD per million tokens per model (JSON), for calls whose "
                         "response carries no cost")
    # kept as written: the run's configuration records it (and a resume compares it)
    group.addoption("--per-task-limit-usd", default=None, metavar="USD",
                    type=positive("--per-task-limit-usd", "2", keep_text=True),
                    help="stop an instance's agent once it spent this much (model "
                         "gateway, mini-swe-agent, gateway tasks); refused for an agent "
                         "whose spend the harness cannot see")


def _add_tapes(group: Any) -> None:
    group.addoption("--model-record", default=None, metavar="DIR",
                    help="store every model call of every instance in DIR (request, "
                         "response, usage, cost; command agents behind --model-upstream, "
                         "mini-swe-agent)")
    group.addoption("--model-record-budget", default=None, metavar="CALLS,BYTES",
                    type=record_budget,
                    help="with --model-record: the most calls and bytes one instance may "
                         "record (default 2000,64MiB as 2000,67108864); the next call past "
                         "either is refused with 402 record_budget_reached")
    group.addoption("--model-replay", default=None, metavar="DIR",
                    help="serve every model call from the records in DIR (a --model-record "
                         "run's); no upstream, no key; a call with no record gets 409 "
                         "replay_miss")
    group.addoption("--replay-order", default=None, metavar="ORDER",
                    type=one_of("--replay-order", REPLAY_ORDERS),
                    help="with --model-replay: strict (default: a call gets the record of "
                         "the same request) or sequence (each instance's calls get the "
                         "recorded responses in order; every differing request is kept)")
    group.addoption("--agent-repo", default=None, metavar="DIR",
                    help="source checkout of the agent under test, recorded for provenance")
    group.addoption("--allow-dirty-seed", action="store_true", default=False,
                    help="allow a dirty --agent-repo checkout")
    group.addoption("--expect-agent-commit", default=None, metavar="SHA",
                    help="refuse unless --agent-repo's HEAD is this commit")


# The model gateway's pacing (harness.runner.pacing_plugin):
# option dest -> (flag, default, integer, help)
PACING: dict[str, tuple[str, float | None, bool, str]] = {
    "model_concurrency": ("--model-concurrency", None, True,
                          "model calls in flight at once across the run, all instances and "
                          "workers (default: no cap)"),
    "model_rpm": ("--model-rpm", None, False,
                  "model calls sent per minute across the run (default: no limit)"),
    "model_wait_max_s": ("--model-wait-max-s", 600.0, False,
                         "the longest one model call waits for its turn and out 429s before "
                         "the agent gets the provider's answer (default 600)"),
    "model_retries": ("--model-retries", 3, True,
                      "retries of one model call after a 5xx or a failed connection "
                      "(default 3)"),
    "model_retry_budget": ("--model-retry-budget", 200, True,
                           "retries of model calls across the whole run (default 200)"),
    "model_stream_idle_s": ("--model-stream-idle-s", 120.0, False,
                            "cut a model stream silent this long; the instance is "
                            "infrastructure when the agent cannot go on (default 120)"),
}


# ---------------------------------------------------------------------- the typed view

T = TypeVar("T")


def read_once(config: pytest.Config, key: pytest.StashKey[T],
              read: Callable[[pytest.Config], T]) -> T:
    """``read(config)``, made once a process and kept on ``config`` under ``key`` (a typed
    view of some options: the agent's, the budget's)."""
    found = config.stash.get(key, None)
    if found is None:
        found = config.stash[key] = read(config)
    return found


@dataclass(frozen=True)
class RunOptions:
    """The options the controller reads, typed, read once from a parsed ``config``."""

    run_root: str | None
    run_id: str | None
    runs_root: Path
    dry_run: bool
    resume_from: str | None
    max_recovery_generations: int
    shard_text: str | None
    progress: str = "auto"
    report: bool = True
    compare_to: str | None = None
    retry_infra: int = 1
    instances: tuple[str, ...] = ()  # --instance with --task-file's ids
    selectors: Mapping[str, Any] = field(default_factory=dict)

    @property
    def shard_given(self) -> bool:
        return bool(self.shard_text)

    @property
    def selectors_given(self) -> bool:
        return bool(self.selectors)

    @classmethod
    def of(cls, config: pytest.Config, selectors: Mapping[str, Any] | None = None
           ) -> RunOptions:
        """The options of ``config``; ``--max-recovery-generations`` and ``--retry-infra``
        not an integer >= 0 are a :class:`~harness.run.plan.PlanError` (exit 2)."""
        opt = config.option
        return cls(
            run_root=opt.run_root, run_id=opt.run_id, runs_root=default_runs_root(),
            dry_run=bool(opt.dry_run), resume_from=opt.resume_from,
            max_recovery_generations=parse_count(
                "--max-recovery-generations", opt.max_recovery_generations, minimum=0,
                example="--max-recovery-generations 2"),
            shard_text=opt.shard, progress=opt.harness_progress, report=not opt.no_report,
            compare_to=opt.compare_to,
            retry_infra=parse_count("--retry-infra", opt.retry_infra, minimum=0,
                                    example="--retry-infra 1"),
            instances=tuple(opt.instance or ()),
            selectors=dict(selectors or {}))
