"""``--settings-path``: the agent server's settings profile, checked before any task burns.

A benchmark may pin the server's profile (``BenchmarkAdapter.server_profile``: the settings
keys and values it decides, and ``solve_task_disabled_tools``). ProgramBench's specification
does: the server reads ``data/settings.json``, into which ``settings_base.json`` is merged,
with ``OUROBOROS_TASK_REVIEW_MODE=required``, ``OUROBOROS_RUNTIME_MODE=pro``,
``OUROBOROS_MAX_WORKERS=4``, ``OUROBOROS_SAFETY_MODE=light``, the solve task without
``claude_code_edit``, and ``--solve-model`` as the expected ``OUROBOROS_MODEL``.

:func:`check_profile` reads the file, checks those decisions and every model slot the file
sets (its form, and that the live server runs the same values), and returns what it checked
for the manifest (``extra.settings_profile``). A problem is one line naming the key and the
fix. Secrets in the file are never read into the record: only the decision keys and the
model slots are kept.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from harness.agents.gateway.preflight import MODEL_SLOT_KEYS, PRIMARY_SLOT, model_form_problem
from harness.agents.gateway.preflight import detect_routing as routing_of
from harness.core.errors import RefusalError

STAGE = "settings_profile"
# A pinned profile measures the single-model harness: its solve task disables these.
SINGLE_MODEL_TOOLS = ("claude_code_edit",)


class ProfileCheck(BaseModel):
    """``extra.settings_profile``: the file checked, its sha256, the values that decide."""

    path: str
    sha256: str
    decisions: dict[str, Any] = Field(default_factory=dict)
    model_slots: dict[str, Any] = Field(default_factory=dict)
    solve_task_disabled_tools: list[str] = Field(default_factory=list)
    problems: list[str] = Field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def read_profile(path: str | Path) -> tuple[dict[str, Any], str]:
    """The settings object of ``path`` and its sha256; a refusal when unreadable."""
    try:
        raw = Path(path).read_bytes()
        data = json.loads(raw)
    except (OSError, ValueError) as exc:
        raise RefusalError(f"--settings-path {path}: cannot read it as JSON ({exc}); pass the "
                           f"server's data/settings.json", stage=STAGE,
                           reason="settings_path_unreadable") from None
    if not isinstance(data, dict):
        raise RefusalError(f"--settings-path {path}: not a JSON object of settings; pass the "
                           f"server's data/settings.json", stage=STAGE,
                           reason="settings_path_unreadable")
    return data, hashlib.sha256(raw).hexdigest()


def _decision_problems(settings: Mapping[str, Any], decisions: Mapping[str, str],
                       path: str) -> list[str]:
    out = []
    for key, want in decisions.items():
        have = settings.get(key)
        if have is None or str(have).strip().lower() != want.lower():
            out.append(f"{key}={have!r} in {path}; the benchmark's profile needs {want!r}: "
                       f"set it (or merge settings_base.json) and restart the server")
    return out


def _slot_problems(settings: Mapping[str, Any], live: Mapping[str, Any] | None,
                   solve_model: str | None, path: str) -> list[str]:
    out = []
    routing = routing_of(live if live is not None else settings)
    primary = settings.get(PRIMARY_SLOT)
    if solve_model and primary != solve_model:
        out.append(f"{PRIMARY_SLOT}={primary!r} in {path}; --solve-model expects "
                   f"{solve_model!r}: set {PRIMARY_SLOT} to it, or pass --solve-model {primary}")
    for key in MODEL_SLOT_KEYS:
        value = settings.get(key)
        if value in (None, "", []):
            continue
        for item in [value] if isinstance(value, str) else list(value):
            problem = model_form_problem(str(item), routing)
            if problem:
                out.append(f"{key} in {path}: {problem}")
        if live is not None and live.get(key) != value:
            out.append(f"{key}={live.get(key)!r} on the running server, {value!r} in {path}: "
                       f"restart the server with this profile")
    return out


def check_profile(path: str | Path, *, solve_model: str | None,
                  live: Mapping[str, Any] | None, decisions: Mapping[str, str],
                  must_disable: Sequence[str] = (),
                  disabled_tools: Sequence[str] = ()) -> ProfileCheck:
    """Check the profile at ``path`` (pure but for reading it); ``live``: the running
    server's ``/api/settings`` (None in a dry run without a server); ``decisions``: the keys
    the benchmarks pin; ``must_disable``: tools their solve task must disable, and
    ``disabled_tools`` what it does disable."""
    settings, digest = read_profile(path)
    where = str(path)
    check = ProfileCheck(
        path=str(Path(path).absolute()), sha256=digest,
        decisions={k: settings.get(k) for k in decisions},
        model_slots={k: settings[k] for k in MODEL_SLOT_KEYS if k in settings},
        solve_task_disabled_tools=list(disabled_tools))
    check.problems += _decision_problems(settings, decisions, where)
    check.problems += _slot_problems(settings, live, solve_model, where)
    check.problems += [f"the solve task does not disable {tool}; the profile measures the "
                       f"single-model harness" for tool in must_disable
                       if tool not in disabled_tools]
    return check


def require_profile(check: ProfileCheck) -> ProfileCheck:
    if check.ok:
        return check
    more = f" (and {len(check.problems) - 1} more in the manifest)" if len(
        check.problems) > 1 else ""
    raise RefusalError(f"settings profile: {check.problems[0]}{more}", stage=STAGE,
                       reason="settings_profile_mismatch")
