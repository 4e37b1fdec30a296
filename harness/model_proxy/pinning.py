"""The model under test is pinned: the model gateway forwards a call only when it names the
declared model (``--solve-model``) or a helper named with ``--allow-model``; any other
call gets 403 ``model_not_allowed`` and nothing reaches the upstream.

**The comparison.** A name is made *canonical* before it is compared: Unicode NFKC,
surrounding whitespace removed, case folded (``" GPT-4o\\n"`` and ``gpt-4o`` are one name).
A declared name also stands for itself without its leading routing prefixes
(:data:`ROUTING_PREFIXES`, litellm's provider names): a declared
``openrouter/anthropic/claude-sonnet-4.5`` allows ``anthropic/claude-sonnet-4.5`` and
``claude-sonnet-4.5``. The reverse does not hold: a request that puts a prefix before a
declared name (``openai/gpt-4o`` or ``acme/gpt-4o`` when ``gpt-4o`` is declared) names
another model, since an upstream routes by that prefix. What goes upstream is the declared
spelling that matched, never the agent's own: the provider sees exactly a name the operator
wrote.

**What names a model.** Only the body's top-level ``"model"``, plus ``"models"``
(OpenRouter's fallback list) and ``"fallbacks"`` (LiteLLM's), whose entries must each be
allowed. A request is refused as ambiguous when the body has no model or a model that is
not one string, when a top-level key names the model twice (a duplicated key, or a key that
differs from ``model``/``models``/``fallbacks`` only by case, width or spaces: some JSON
decoders match keys without regard to case), when the query string carries a model
parameter, or when a header's name mentions a model. The body forwarded is the parsed one,
serialized again, so a key seen twice could never reach the upstream in two readings anyway.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

MODEL_KEY = "model"
LIST_KEYS = ("models", "fallbacks")  # OpenRouter's and LiteLLM's fallback model lists
ROUTING_PREFIXES = frozenset(
    {
        "anthropic",
        "azure",
        "bedrock",
        "deepseek",
        "fireworks_ai",
        "gemini",
        "groq",
        "hosted_vllm",
        "litellm_proxy",
        "mistral",
        "openai",
        "openrouter",
        "together_ai",
        "vertex_ai",
        "xai",
    }
)
MAX_LABEL = 120  # characters of a name kept in the record and the message (then "...")
REFUSAL_CODE = "model_not_allowed"


def canonical(name: str) -> str:
    """The form two names are compared in (NFKC, stripped, case folded)."""
    return unicodedata.normalize("NFKC", name).strip().casefold()


def spellings(name: str) -> list[str]:
    """``name`` and what it is without each of its leading routing prefixes, in order:
    ``openrouter/openai/gpt-4o`` -> itself, ``openai/gpt-4o``, ``gpt-4o``."""
    out = [name.strip()]
    rest = out[0]
    while "/" in rest:
        head, tail = rest.split("/", 1)
        if canonical(head) not in ROUTING_PREFIXES or not tail.strip():
            break
        rest = tail.strip()
        out.append(rest)
    return out


def label(value: Any) -> str:
    """A name as the record and the messages show it: bounded, control and invisible
    characters escaped (``gpt-4o\\u200b`` stays visibly different from ``gpt-4o``)."""
    if value is None:
        return "(none)"
    if not isinstance(value, str):
        return f"({type(value).__name__})"
    text = "".join(
        c if c.isprintable() and unicodedata.category(c) != "Cf" else f"\\u{ord(c):04x}"
        for c in value[:MAX_LABEL]
    )
    if len(text) > MAX_LABEL or len(value) > MAX_LABEL:
        return text[:MAX_LABEL] + "..."
    return text


def recorded(value: Any) -> str:
    """The name a refused call is recorded under: the :func:`label` of its canonical form
    (``" GPT-4o-Mini"`` and ``gpt-4o-mini`` are one model asked)."""
    return label(canonical(value) if isinstance(value, str) else value)


@dataclass(frozen=True)
class Refused:
    """A call the pin refuses: the name asked (:func:`recorded`) and the message."""

    asked: str
    message: str


def load_json_object(raw: bytes) -> tuple[Any, list[tuple[str, Any]]]:
    """The parsed body, and every (key, value) of the keys its top-level object holds more
    than once (the parsed body keeps only the last). ValueError when it is not JSON."""
    seen: list[list[tuple[str, Any]]] = []

    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        counts: dict[str, int] = {}
        for key, _ in pairs:
            counts[key] = counts.get(key, 0) + 1
        seen.append([(k, v) for k, v in pairs if counts[k] > 1])
        return dict(pairs)

    obj = json.loads(raw or b"{}", object_pairs_hook=hook)
    return obj, (seen[-1] if isinstance(obj, dict) and seen else [])


class ModelPin:
    """The models a gateway forwards: the declared one first, then the helpers."""

    def __init__(self, declared: str, helpers: Sequence[str] = ()) -> None:
        names: list[str] = []
        for name in (declared, *helpers):
            if not isinstance(name, str) or not canonical(name):
                raise ValueError(f"--allow-model/--solve-model {name!r}: give a model name")
            if name.strip() not in names:
                names.append(name.strip())
        self.allowed: tuple[str, ...] = tuple(names)
        self._by_canonical: dict[str, str] = {}
        for name in self.allowed:
            for spelling in spellings(name):
                self._by_canonical.setdefault(canonical(spelling), spelling)

    def match(self, name: Any) -> str | None:
        """The declared spelling ``name`` stands for, None when it names another model."""
        if not isinstance(name, str) or not canonical(name):
            return None
        return self._by_canonical.get(canonical(name))

    def allows(self, name: Any) -> bool:
        return self.match(name) is not None

    def _refuse(self, asked: str, why: str) -> Refused:
        allowed = ", ".join(repr(n) for n in self.allowed)
        return Refused(
            asked,
            f"{REFUSAL_CODE}: {why} (this run forwards only the model "
            f"under test: allowed {allowed})",
        )

    def _named(self, value: Any) -> Iterable[Any]:
        return value if isinstance(value, list) else [value]

    def _ambiguous(self, asked: Any, others: Iterable[Any], why: str) -> Refused:
        """Refused as ambiguous: recorded under the first name in play that is not allowed
        (the model smuggled), else under the body's own, marked."""
        for value in (asked, *others):
            for name in self._named(value):
                if not self.allows(name):
                    return self._refuse(recorded(name), why)
        return self._refuse(f"{recorded(asked)} (ambiguous)", why)

    def check(
        self,
        body: dict[str, Any],
        duplicated: Iterable[tuple[str, Any]] = (),
        query: str = "",
        headers: Iterable[tuple[str, str]] = (),
    ) -> tuple[dict[str, Any], Refused | None]:
        """The body to forward (model names replaced by their declared spellings), or the
        refusal. ``duplicated``: the body's repeated top-level keys with each value
        (:func:`load_json_object`); ``query``: the request's query string."""
        asked = body.get(MODEL_KEY)
        shown = label(asked)
        watched = {MODEL_KEY, *LIST_KEYS}
        twice = [(k, v) for k, v in duplicated if canonical(k) in watched]
        if twice:
            why = f"the body names {twice[0][0]!r} more than once"
            return body, self._ambiguous(asked, [v for _, v in twice], why)
        for key in body:
            if key not in watched and canonical(key) in watched:
                why = (
                    f"the body's key {label(key)!r} is not {canonical(key)!r}: "
                    f'name the model once, in "model"'
                )
                return body, self._ambiguous(asked, [body[key]], why)
        for key, value in parse_qsl(query, keep_blank_values=True):
            if MODEL_KEY in canonical(key):
                why = (
                    f"the query string names a model ({label(key)}={label(value)}): "
                    f'the body\'s "model" alone chooses it'
                )
                return body, self._ambiguous(asked, [value], why)
        for name, value in headers:
            if MODEL_KEY in canonical(name):
                why = (
                    f"the header {label(name)!r} names a model: "
                    f'the body\'s "model" alone chooses it'
                )
                return body, self._ambiguous(asked, [value], why)
        if asked is None:
            return body, self._refuse(
                shown, "the request names no model (an upstream would pick its default)"
            )
        if not isinstance(asked, str):
            return body, self._refuse(shown, '"model" must be one name')
        forwarded = self.match(asked)
        if forwarded is None:
            return body, self._refuse(recorded(asked), f"model {shown!r} is not allowed")
        out = {**body, MODEL_KEY: forwarded}
        for key in LIST_KEYS:
            if key not in body:
                continue
            entries = body[key]
            if not isinstance(entries, list) or not all(isinstance(e, str) for e in entries):
                return body, self._refuse(shown, f"{key!r} must be a list of model names")
            matched = [self.match(e) for e in entries]
            for entry, found in zip(entries, matched, strict=True):
                if found is None:
                    return body, self._refuse(
                        recorded(entry), f"model {label(entry)!r} (in {key!r}) is not allowed"
                    )
            out[key] = matched
        return out, None


def pin_for(declared: str | None, helpers: Sequence[str] = ()) -> ModelPin | None:
    """The pin of ``--solve-model`` and ``--allow-model``; None without a declared model."""
    if not declared:
        return None
    return ModelPin(declared, helpers)
