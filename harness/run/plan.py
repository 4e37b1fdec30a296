"""Selection, shards, run ids and the config fingerprint: pure logic, no pytest import."""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.run.model import in_shard, shard_of  # noqa: F401  (a unit's shard: the model's)

if TYPE_CHECKING:  # the file models load when a run is planned, not at collection
    from harness.core.models import Plan, ShardSpec

SHARD_RE = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")
RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
MARKER_ARG_RE = re.compile(r"\b([A-Za-z_]\w*)\(\s*(?:'([^'=()]*)'|\"([^\"=()]*)\")\s*\)")
TASK_ID_RE = re.compile(r"^[A-Za-z0-9._-]+$")


class PlanError(ValueError):
    """Bad input for planning; the message names the input and the fix."""


def parse_shard(text: str | None) -> ShardSpec | None:
    if text is None or text == "":
        return None
    match = SHARD_RE.match(text)
    if not match:
        raise PlanError(f"--shard {text!r} is malformed: use I/N, e.g. --shard 2/8")
    index, count = int(match.group(1)), int(match.group(2))
    if count < 1 or not 1 <= index <= count:
        raise PlanError(f"--shard {text!r} is out of range: I must be between 1 and N (N >= 1)")
    from harness.core.models import ShardSpec

    return ShardSpec(index=index, count=count)


def validate_run_id(run_id: str) -> str:
    if not RUN_ID_RE.match(run_id):
        raise PlanError(
            f"--run-id {run_id!r} is invalid: use letters, digits, '.', '_' and '-' "
            f"(at most 128, starting with a letter or digit)"
        )
    return run_id


def new_run_id(prefix: str = "run") -> str:
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    return f"{prefix}-{stamp}-{secrets.token_hex(3)}"


def default_runs_root(env: Mapping[str, str] | None = None) -> Path:
    """``$BENCH_RUNS_ROOT``, else the specification's ``$OUROBOROS_BENCH_RUNS_ROOT``, else
    ``./bench_runs`` (when both are set, ``BENCH_RUNS_ROOT`` wins)."""
    env = os.environ if env is None else env
    base = env.get("BENCH_RUNS_ROOT") or env.get("OUROBOROS_BENCH_RUNS_ROOT")
    return Path(base) if base else Path.cwd() / "bench_runs"


def normalize(value: Any) -> Any:
    """Normalize an option value so equal configurations hash equally."""
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): normalize(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [normalize(v) for v in value]
    if isinstance(value, set | frozenset):
        return sorted(normalize(v) for v in value)
    return value


def fingerprint(config: Mapping[str, Any]) -> str:
    blob = json.dumps(normalize(config), sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(blob.encode("utf-8")).hexdigest()


def config_differences(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """Names of the fields whose normalized values differ (missing counts as different)."""
    a, b = normalize(dict(old)), normalize(dict(new))
    return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))


def rewrite_marker_args(expr: str) -> str:
    """Let ``-m "difficulty('easy')"`` select: pytest matches marker keyword arguments only,
    so a positional string argument becomes ``difficulty(value='easy')``."""

    def sub(match: re.Match[str]) -> str:
        value = match.group(2) if match.group(2) is not None else match.group(3)
        return f"{match.group(1)}(value='{value}')"

    return MARKER_ARG_RE.sub(sub, expr)


# ``-k foo@2`` (pytest's -k grammar has no '@'): each attempt item carries the keyword
# ``foo:2:`` and ``foo@2`` in a -k expression is read as it; ``@2`` alone, every 2nd attempt.
KEYWORD_ATTEMPT_RE = re.compile(r"([A-Za-z0-9._-]*)@([1-9][0-9]*)(?![0-9])")


def attempt_keyword(task_id: str, sample: int) -> str:
    """The -k keyword of attempt ``sample`` at a task (see :func:`rewrite_attempt_keywords`)."""
    return f"{task_id}:{sample}:"


def rewrite_attempt_keywords(expr: str) -> str:
    """Let ``-k "foo@2"`` select attempt 2 of task foo, and ``-k "@2"`` every second attempt."""
    return KEYWORD_ATTEMPT_RE.sub(lambda m: attempt_keyword(m.group(1), int(m.group(2))), expr)


def parse_count(flag: str, raw: object, *, minimum: int, example: str) -> int:
    """An integer option at least ``minimum`` (PlanError naming the flag otherwise)."""
    try:
        value = int(str(raw))
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise PlanError(f"{flag} {raw!r} is not an integer >= {minimum}; pass e.g. {example}")
    return value


def select_keys(collected: Iterable[str], plan: Plan) -> list[str]:
    """The collected keys this run keeps: in its shard and in its frozen selection."""
    wanted = set(plan.selection) if plan.selection is not None else None
    return [key for key in collected
            if in_shard(key, plan.shard) and (wanted is None or key in wanted)]


def read_task_file(path: str | Path) -> list[str]:
    """The instance ids a ``--task-file`` lists, in order, each once.

    Two forms: plain text, one id a line (``#`` starts a comment, blank lines are ignored),
    as the Cowork specification's task files; or JSON, a list of ids or an object whose
    values are lists of ids, as the ProgramBench gate's ``--tasks`` file
    (``{"smoke": [...], "unseen": [...]}``), so the gate's list selects the run it gates.
    A missing, unreadable, malformed or empty file raises :class:`PlanError`.
    """
    flag = f"--task-file {path}"
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PlanError(f"{flag}: no such file; pass a file listing one instance id a "
                        f"line") from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise PlanError(f"{flag}: cannot read it ({reason}); pass a readable text file "
                        f"listing one instance id a line") from None
    body = text.lstrip()
    if body.startswith(("{", "[")):
        entries = _json_task_ids(flag, body)
    else:
        entries = []
        for number, line in enumerate(text.splitlines(), 1):
            value = line.split("#", 1)[0].strip()
            if value:
                entries.append((f"line {number}", value))
    ids: list[str] = []
    for where, value in entries:
        if not TASK_ID_RE.match(value) or value in (".", ".."):
            raise PlanError(f"{flag}: {where}: {value!r} is not an instance id (letters, "
                            f"digits, '.', '_' and '-'; one id a line, '#' for comments)")
        if value not in ids:
            ids.append(value)
    if not ids:
        raise PlanError(f"{flag} lists no instance id; write one id a line")
    return ids


def _json_task_ids(flag: str, body: str) -> list[tuple[str, str]]:
    try:
        data = json.loads(body)
    except ValueError as exc:
        raise PlanError(f"{flag}: not valid JSON ({exc}); a task file is one id a line, or "
                        f"a JSON list of ids, or an object of lists such as the gate's "
                        f"--tasks file") from None
    groups = data.items() if isinstance(data, dict) else [("list", data)]
    out: list[tuple[str, str]] = []
    for name, values in groups:
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise PlanError(f"{flag}: {name!r} must be a list of instance ids")
        out.extend((f"{name!r}", v.strip()) for v in values)
    return out


def unknown_ids(wanted: Iterable[str], known: Iterable[str]) -> list[str]:
    """The wanted ids that are not known, in the order wanted."""
    have = set(known)
    return [i for i in dict.fromkeys(wanted) if i not in have]
