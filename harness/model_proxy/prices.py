"""``--model-prices FILE``: USD per million tokens, per model name.

::

    {"models": {"openai/gpt-4o": {"input_per_mtok": 2.5, "output_per_mtok": 10.0,
                                  "cache_read_per_mtok": 1.25}}}

A model absent from the table has no price: its cost stays unknown (never $0).
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError


class ModelPrice(BaseModel):
    model_config = ConfigDict(extra="forbid")

    input_per_mtok: float = Field(ge=0)
    output_per_mtok: float = Field(ge=0)
    cache_read_per_mtok: float | None = Field(default=None, ge=0)


class ModelPrices(BaseModel):
    model_config = ConfigDict(extra="forbid")

    models: dict[str, ModelPrice] = Field(default_factory=dict)

    def lookup(self, *names: str | None) -> ModelPrice | None:
        """The price of the first name found, trying each name and its last path segment."""
        for name in names:
            if not name:
                continue
            for candidate in (name, name.rsplit("/", 1)[-1]):
                if candidate in self.models:
                    return self.models[candidate]
        return None

    def cost(self, prompt: int, completion: int, *names: str | None,
             cached: int = 0) -> float | None:
        price = self.lookup(*names)
        if price is None:
            return None
        cached = min(max(cached, 0), prompt)
        cache_rate = price.input_per_mtok if price.cache_read_per_mtok is None \
            else price.cache_read_per_mtok
        return ((prompt - cached) * price.input_per_mtok + cached * cache_rate
                + completion * price.output_per_mtok) / 1e6


def load_prices(path: str | Path | None) -> ModelPrices:
    """The table in ``path`` (empty without one); one-line ValueError on a bad file."""
    if not path:
        return ModelPrices()
    try:
        return ModelPrices.model_validate(json.loads(Path(path).read_text()))
    except (OSError, ValueError, ValidationError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"--model-prices {path}: not a price table ({first}); expected "
                         f'{{"models": {{"NAME": {{"input_per_mtok": N, '
                         f'"output_per_mtok": N}}}}}}') from None
