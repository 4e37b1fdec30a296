"""Which earlier attempts' gateway tasks a fresh attempt must settle first (issue 14 point 1)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from harness.agents.gateway.checkpoint import AgentFolder, write_checkpoint
from harness.agents.gateway.orphans import orphan_checkpoints as found_in


def _ctx(tmp: Path, ancestors: list[Path]) -> SimpleNamespace:
    inst = tmp / "run" / "bench" / "i1"
    inst.mkdir(parents=True)
    return SimpleNamespace(benchmark="bench", instance_id="i1", instance_dir=inst,
                           run=SimpleNamespace(plan=SimpleNamespace(
                               ancestors=[str(a) for a in ancestors])))


def orphan_checkpoints(ctx: SimpleNamespace) -> list[str]:
    return found_in(AgentFolder.of(ctx.instance_dir, None), benchmark=ctx.benchmark,
                    instance_id=ctx.instance_id, ancestors=ctx.run.plan.ancestors)


def test_ancestor_and_own_checkpoints_are_named_and_the_own_one_moved_aside(tmp_path) -> None:
    old, older, empty = tmp_path / "r1", tmp_path / "r0", tmp_path / "r-empty"
    for root, task in ((old, "task-a"), (older, "task-b")):
        (root / "bench" / "i1").mkdir(parents=True)
        write_checkpoint(root / "bench" / "i1" / "task_checkpoint.json", task, "running", None,
                         "http://127.0.0.1:1", 1)
    ctx = _ctx(tmp_path, [old, older, empty])
    own = ctx.instance_dir / "task_checkpoint.json"
    write_checkpoint(own, "task-c", "running", None, "http://127.0.0.1:1", 1)

    found = orphan_checkpoints(ctx)

    assert found[:2] == [str(old / "bench/i1/task_checkpoint.json"),
                         str(older / "bench/i1/task_checkpoint.json")]
    assert len(found) == 3 and Path(found[2]).parent == ctx.instance_dir
    assert not own.exists()  # the new attempt submits fresh instead of reattaching
    assert "task-c" in Path(found[2]).read_text()


def test_a_first_attempt_has_none(tmp_path) -> None:
    assert orphan_checkpoints(_ctx(tmp_path, [])) == []
