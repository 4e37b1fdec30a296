"""The agent's instruction, rendered from ``instruction_template.md`` (kept in the repo)."""

from __future__ import annotations

import re
from functools import lru_cache
from importlib.resources import files

from benchmarks.programbench.tasks import PBInstance

TEMPLATE_NAME = "instruction_template.md"
_PLACEHOLDER = re.compile(r"\{\{\s*([a-z_]+)\s*\}\}")
FIELDS = ("instance_id", "repository", "language", "difficulty")


@lru_cache(maxsize=1)
def load_template() -> str:
    return (files("benchmarks.programbench") / TEMPLATE_NAME).read_text(encoding="utf-8")


def render_instruction(instance: PBInstance, template: str | None = None) -> str:
    """Substitute ``{{instance_id}}``, ``{{repository}}``, ``{{language}}``, ``{{difficulty}}``.

    An unknown placeholder is an error (a typo must not reach the agent).
    """
    text = load_template() if template is None else template
    values = {
        "instance_id": instance.instance_id,
        "repository": instance.repository,
        "language": instance.language_name,
        "difficulty": instance.difficulty if instance.difficulty != "none" else "unrated",
    }

    def _sub(match: re.Match[str]) -> str:
        key = match.group(1)
        if key not in values:
            raise KeyError(f"unknown placeholder {{{{{key}}}}} in the instruction template")
        return values[key]

    return _PLACEHOLDER.sub(_sub, text)
