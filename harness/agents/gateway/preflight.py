"""Checks of the agent server before a run starts: runtime identity and the measured model.

* :func:`attest_runtime` reads ``GET /api/health`` into a ``runtime_attestation.v1`` record.
  Reasons, checked in order: ``runtime_unreachable``, ``runtime_version_absent``,
  ``commit_unavailable`` (the expected version comes from an agent repo whose HEAD cannot
  be read), ``runtime_skew``. Only skew can be waived (``--allow-runtime-skew``). Refusal
  exits 3 (stage ``runtime_attestation``).
* :func:`check_target_actor` compares ``GET /api/settings`` with ``--solve-model``: every
  model slot must name it, in the id form the server accepts (reference §3 step 3: a direct
  provider rewrites ``openai/x`` to ``openai::x``, a router keeps ``provider/model``). Any
  mismatch refuses with exit 2 (stage ``target_actor_preflight``), naming each slot.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, Field

from harness.agents.gateway.client import GatewayClient, GatewayError
from harness.agents.provenance import SHA_RE
from harness.core.errors import RefusalError

RUNTIME_SKEW_WAIVER = "--allow-runtime-skew"

# Text model slots of the server's settings (reference §2.1 ``model_slots``).
MODEL_SLOT_KEYS: tuple[str, ...] = (
    "OUROBOROS_MODEL",
    "OUROBOROS_MODEL_LIGHT",
    "OUROBOROS_MODEL_VISION",
    "OUROBOROS_MODEL_CONSCIOUSNESS",
    "OUROBOROS_MODEL_FALLBACKS",
    "OUROBOROS_MODEL_DEEP_SELF_REVIEW",
    "OUROBOROS_WEBSEARCH_MODEL",
    "OUROBOROS_REVIEW_MODEL",
    "OUROBOROS_REVIEW_MODELS",
    "OUROBOROS_REVIEWER_MODEL",
    "OUROBOROS_SCOPE_REVIEW_MODEL",
)
PRIMARY_SLOT = "OUROBOROS_MODEL"
# Providers whose ``provider/model`` ids a direct-provider server rewrites to ``provider::``.
MIGRATED_PROVIDERS = frozenset({"openai", "anthropic", "cloudru", "minimax"})
# Settings that make the server route ids through a router (ids stay ``provider/model``).
ROUTER_KEYS = (
    "OPENROUTER_API_KEY",
    "OPENAI_BASE_URL",
    "OPENAI_COMPATIBLE_BASE_URL",
    "LLM_BASE_URL",
)


class RuntimeAttestation(BaseModel):
    schema_: str = Field(default="runtime_attestation.v1", alias="schema")
    checked_at_unix: float
    base_url: str
    runtime_version: str | None = None
    repo_dir: str | None = None
    repo_head: str | None = None
    repo_version: str | None = None
    expected_version: str | None = None
    http_error: str | None = None
    override_env: str = RUNTIME_SKEW_WAIVER
    override_set: bool = False
    override_waives: list[str] = Field(default_factory=lambda: ["runtime_skew"])
    overridden: bool = False
    reason: str | None = None
    ok: bool = False


def _sha_parts(version: str) -> set[str]:
    """Git SHAs inside a version string (``6.97.2+3f1c2a9``, ``v1.0-3-g3f1c2a9``, a SHA)."""
    out: set[str] = set()
    for part in re.split(r"[+\-]", version.lower()):
        for candidate in (part, part[1:] if part.startswith("g") else ""):
            if SHA_RE.match(candidate):
                out.add(candidate)
    return out


def version_matches(runtime: str, expected: str) -> bool:
    """Equal (a leading ``v`` ignored), or both name the same git commit (one SHA is a
    prefix of the other, at least 7 hex digits)."""
    a, b = runtime.strip().lstrip("v"), expected.strip().lstrip("v")
    if a == b:
        return True
    return any(x.startswith(y) or y.startswith(x) for x in _sha_parts(a) for y in _sha_parts(b))


def attest_runtime(
    client: GatewayClient,
    *,
    expected_version: str | None = None,
    repo_dir: str | None = None,
    repo_head: str | None = None,
    repo_version: str | None = None,
    allow_skew: bool = False,
    budget_s: float = 10.0,
) -> RuntimeAttestation:
    """Read the runtime's identity. The expected version is ``expected_version`` or, when an
    agent repo is named, its HEAD (or its VERSION file)."""
    att = RuntimeAttestation(
        checked_at_unix=time.time(),
        base_url=client.base_url,
        repo_dir=repo_dir,
        repo_head=repo_head,
        repo_version=repo_version,
        expected_version=expected_version,
        override_set=allow_skew,
    )
    try:
        health = client.health(budget_s=budget_s)
    except GatewayError as exc:
        att.http_error, att.reason = str(exc)[:500], "runtime_unreachable"
        return att
    att.runtime_version = health.runtime_version or None
    if not att.runtime_version:
        att.reason = "runtime_version_absent"
        return att
    candidates = [v for v in (expected_version,) if v]
    if not candidates and repo_dir is not None:
        if not repo_head:
            att.reason = "commit_unavailable"
            return att
        candidates = [v for v in (repo_head, repo_version) if v]
        att.expected_version = repo_head
    if candidates and not any(version_matches(att.runtime_version, c) for c in candidates):
        att.reason = "runtime_skew"
        if allow_skew:
            att.overridden, att.ok = True, True
        return att
    att.ok = True
    return att


def require_runtime(att: RuntimeAttestation) -> RuntimeAttestation:
    """Raise the refusal (exit 2) for a failed attestation; return it when it passed."""
    if att.ok:
        return att
    messages = {
        "runtime_unreachable": f"agent server {att.base_url} is unreachable ({att.http_error})",
        "runtime_version_absent": f"agent server {att.base_url} reports no runtime_version "
        "in /api/health",
        "commit_unavailable": f"the HEAD of the agent repo {att.repo_dir} cannot be read, so "
        "the runtime cannot be attested",
        "runtime_skew": f"agent server runs {att.runtime_version!r}, expected "
        f"{att.expected_version!r}; pass {RUNTIME_SKEW_WAIVER} to run anyway",
    }
    reason = att.reason or "runtime_unreachable"
    raise RefusalError(
        f"runtime attestation failed: {messages.get(reason, reason)}",
        stage="runtime_attestation",
        reason=reason,  # a refusal like every other: exit 2 (docs/exit-codes.md)
    )


# -- target actor ----------------------------------------------------------------------


class SlotMismatch(BaseModel):
    slot: str
    expected: str
    actual: Any = None
    problem: Literal["absent", "different_model", "rejected_form"]
    hint: str | None = None


class TargetActor(BaseModel):
    """The measured model as the running server sees it (the manifest's target actor)."""

    model: str
    routing: Literal["direct", "router"]
    model_slots: dict[str, Any] = Field(default_factory=dict)
    mismatches: list[SlotMismatch] = Field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.mismatches


def _present(value: Any) -> bool:
    return value not in (None, "", False, [], {})


def detect_routing(settings: Mapping[str, Any]) -> Literal["direct", "router"]:
    """``router`` when a router key or an OpenAI-compatible base URL is configured."""
    return "router" if any(_present(settings.get(key)) for key in ROUTER_KEYS) else "direct"


def model_form_problem(model: str, routing: Literal["direct", "router"]) -> str | None:
    """Why the server would reject or rewrite ``model`` (None when the form is accepted)."""
    if "::" in model:
        provider, _, name = model.partition("::")
        if routing == "router":
            return (
                f"{model!r} is a direct-provider id but the server routes through a "
                f"router: use {provider}/{name!s}"
            )
        return None
    if "/" in model:
        provider, _, name = model.partition("/")
        if routing == "direct" and provider.lower() in MIGRATED_PROVIDERS:
            return (
                f"the server would rewrite {model!r} to {provider}::{name} (direct "
                f"provider, no router configured): use {provider}::{name}"
            )
    return None


def _slot_values(value: Any) -> list[str]:
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    if isinstance(value, Sequence):
        return [str(v).strip() for v in value if str(v).strip()]
    return [str(value)]


def check_target_actor(
    settings: Mapping[str, Any],
    solve_model: str,
    *,
    slots: Sequence[str] | None = None,
    routing: Literal["auto", "direct", "router"] = "auto",
) -> TargetActor:
    """Compare the server's model slots with ``solve_model`` (pure)."""
    mode = detect_routing(settings) if routing == "auto" else routing
    keys = (
        list(slots)
        if slots is not None
        else [k for k in MODEL_SLOT_KEYS if k == PRIMARY_SLOT or _present(settings.get(k))]
    )
    actor = TargetActor(
        model=solve_model, routing=mode, model_slots={k: settings.get(k) for k in keys}
    )
    problem = model_form_problem(solve_model, mode)
    if problem:
        actor.mismatches.append(
            SlotMismatch(
                slot="--solve-model",
                expected=solve_model,
                actual=solve_model,
                problem="rejected_form",
                hint=problem,
            )
        )
    for key in keys:
        value = settings.get(key)
        if not _present(value):
            actor.mismatches.append(SlotMismatch(slot=key, expected=solve_model, problem="absent"))
            continue
        for item in _slot_values(value):
            form = model_form_problem(item, mode)
            if form:
                actor.mismatches.append(
                    SlotMismatch(
                        slot=key,
                        expected=solve_model,
                        actual=item,
                        problem="rejected_form",
                        hint=form,
                    )
                )
            elif item != solve_model and key == PRIMARY_SLOT:  # the other slots are the
                # profile's (--settings-path), as the specification validates them
                actor.mismatches.append(
                    SlotMismatch(
                        slot=key, expected=solve_model, actual=item, problem="different_model"
                    )
                )
    return actor


def require_target_actor(actor: TargetActor) -> TargetActor:
    if actor.ok:
        return actor
    parts = []
    for m in actor.mismatches:
        if m.problem == "absent":
            parts.append(f"{m.slot} is not set")
        elif m.problem == "rejected_form":
            parts.append(f"{m.slot}: {m.hint}")
        else:
            parts.append(f"{m.slot}={m.actual!r}")
    raise RefusalError(
        f"agent server settings do not match --solve-model {actor.model!r}: " + "; ".join(parts),
        stage="target_actor_preflight",
        reason="target_actor_mismatch",
        exit_code=2,
    )


def read_settings(client: GatewayClient, *, budget_s: float = 10.0,
                  record: Callable[[dict[str, Any]], None] | None = None,
                  stage: str = "target_actor_preflight") -> Mapping[str, Any]:
    """The running server's ``/api/settings`` (secrets masked by the server); unreachable is
    refused (exit 2): a run must not start against a server it cannot verify. ``record``
    gets ``{"error": ...}`` first, so the caller can put it on disk."""
    try:
        return client.settings(budget_s=budget_s).values()
    except GatewayError as exc:
        if record is not None:
            record({"error": str(exc)[:500]})
        raise RefusalError(
            f"--gateway-url {client.base_url}: cannot read the agent server's settings "
            f"({exc}); start the server or fix the URL",
            stage=stage,
            reason="settings_unavailable",
            exit_code=2,
        ) from exc


def preflight_target_actor(
    client: GatewayClient,
    solve_model: str,
    *,
    budget_s: float = 10.0,
    record: Callable[[dict[str, Any]], None] | None = None,
    settings: Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> TargetActor:
    """Compare ``/api/settings`` (read here unless given: :func:`read_settings`) with the
    solve model and refuse (exit 2) on any mismatch.

    ``record`` (when given) receives what was found *before* any refusal, so the caller can
    put it on disk first: the actor (``TargetActor.model_dump(mode="json")``) or
    ``{"error": ...}`` when the settings could not be read.
    """
    if settings is None:
        settings = read_settings(client, budget_s=budget_s, record=record)
    actor = check_target_actor(settings, solve_model, **kwargs)
    if record is not None:
        record(actor.model_dump(mode="json"))
    return require_target_actor(actor)
