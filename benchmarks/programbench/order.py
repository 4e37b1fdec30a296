"""``instance_order.json``: the pydantic record of a selection's run order."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from benchmarks.programbench import programbench_version


class InstanceOrder(BaseModel):
    """``instance_order.json``: the selected ids in run order (the seed's four keys first)."""

    model_config = ConfigDict(extra="forbid")

    count: int
    shuffle: bool
    shuffle_seed: int | None
    instance_ids: list[str]
    filter: str | None = None
    slice: str | None = None
    include_fixture: bool = False
    programbench_version: str = Field(default_factory=programbench_version)
