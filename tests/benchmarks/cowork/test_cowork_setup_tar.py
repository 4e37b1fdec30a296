"""One copy per container set-up: :func:`harness.sandbox.pack.join_tars` and the Cowork set-up
tar (:func:`benchmarks.cowork_bench.phases.setup_tar`), without Docker."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

from benchmarks.cowork_bench.containers import AGENT_ID
from benchmarks.cowork_bench.phases import InstanceEnv, setup_tar, support_tar, task_tar
from benchmarks.cowork_bench.seed import SeedRecord, SeedTar
from benchmarks.cowork_bench.tasks import load_task
from harness.sandbox.pack import NewDir, join_tars, pack_bytes, pack_dirs, pack_tree
from tests.benchmarks.cowork.cowork_helpers import FIXTURE

Entry = tuple[str, str, int, int, int]  # name, type, uid, gid, mode


def entries(data: bytes) -> list[Entry]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return [(m.name, m.type.decode(), m.uid, m.gid, m.mode) for m in tar.getmembers()]


def test_join_tars_keeps_every_member_in_order_with_its_owner_mode_and_data(
    tmp_path: Path,
) -> None:
    tree = tmp_path / "lib"
    (tree / "pkg").mkdir(parents=True)
    (tree / "pkg" / "m.py").write_text("x = 1\n")
    (tree / "pkg" / "m.py").chmod(0o640)
    os.link(tree / "pkg" / "m.py", tree / "pkg" / "same.py")
    (tree / "up").symlink_to("../../elsewhere")
    long_name = "d" * 120  # a PAX header of its own
    (tree / long_name).write_text("long")
    dirs = pack_dirs([NewDir("/workspace", mtime=1234.0), NewDir("/workspace/logs", 1000, 1001,
                                                                  0o700)])  # fmt: skip
    one = pack_bytes("/workspace/spec.json", b"{}", mode=0o600, uid=0, gid=0)
    trees = pack_tree([(tree, "workspace/lib")], uid=1000, gid=1000)
    joined = join_tars([dirs, one, trees])

    assert entries(joined) == entries(dirs) + entries(one) + entries(trees)
    got = entries(joined)
    assert got[:3] == [("workspace", "5", 0, 0, 0o755), ("workspace/logs", "5", 1000, 1001, 0o700),
                       ("workspace/spec.json", "0", 0, 0, 0o600)]  # fmt: skip
    assert ("workspace/lib/pkg/m.py", "0", 1000, 1000, 0o640) in got
    assert len(joined) % tarfile.RECORDSIZE == 0
    with tarfile.open(fileobj=io.BytesIO(joined)) as tar:
        assert tar.getmember("workspace").mtime == 1234
        assert tar.getmember("workspace/logs").mtime == 0  # NewDir's default, as before
        assert tar.extractfile("workspace/spec.json").read() == b"{}"  # type: ignore[union-attr]
        link = tar.getmember("workspace/lib/pkg/same.py")
        assert link.islnk() and link.linkname == "workspace/lib/pkg/m.py"
        assert tar.getmember("workspace/lib/up").linkname == "../../elsewhere"
        assert tar.extractfile(f"workspace/lib/{long_name}").read() == b"long"  # type: ignore[union-attr]
    assert entries(join_tars([])) == [] and entries(join_tars([pack_tree([])])) == []


def _env(iid: str, seed: SeedTar | None = None) -> InstanceEnv:
    task = load_task(FIXTURE, iid)
    return InstanceEnv(task, FIXTURE, FIXTURE, "net", None, None, "img", seed=seed)  # type: ignore[arg-type]


def _seed() -> SeedTar:
    data = pack_bytes("/opt/agent_seed/run.sh", b"echo hi\n", mode=0o755, uid=0, gid=0)
    record = SeedRecord(repo_dir="/r", commit="c" * 40, dirty=False, files=1, bytes=8,
                        tar_sha256="sha256:0")  # fmt: skip
    return SeedTar(record, data)


def test_the_setup_tar_is_the_separate_copies_under_workspace_with_their_owners() -> None:
    iid = "excel-sales-summary"
    for agent in (True, False):
        env = _env(iid, _seed())
        got = entries(setup_tar(env, agent, sanitised=agent))
        uid = AGENT_ID if agent else 0
        assert got[:5] == [
            ("workspace", "5", 0, 0, 0o755), ("workspace/dumps", "5", 0, 0, 0o755),
            ("workspace/dumps/workspace", "5", uid, uid, 0o755),
            ("workspace/dumps/agent", "5", uid, uid, 0o755),
            ("workspace/dumps/eval_scratch", "5", 0, 0, 0o755),
        ]  # fmt: skip
        prefixed = [(f"workspace/{n}", *rest) for n, *rest in entries(support_tar(str(FIXTURE)))]
        task = [(f"workspace/{n}", *rest) for n, *rest in entries(task_tar(env, agent))]
        seed = [("opt/agent_seed/run.sh", "0", 0, 0, 0o755)] if agent else []
        assert got[5:] == prefixed + task + seed


def test_the_agent_containers_setup_tar_has_no_groundtruth_or_evaluator() -> None:
    names = [n for n, *_ in entries(setup_tar(_env("excel-sales-summary"), True, True))]
    arc = "workspace/tasks/finalpool/excel-sales-summary"
    assert f"{arc}/preprocess/main.py" in names and f"{arc}/initial_workspace" in names
    assert not [n for n in names if "groundtruth_workspace" in n or "/evaluation" in n]
    full = [n for n, *_ in entries(setup_tar(_env("excel-sales-summary"), False, False))]
    assert f"{arc}/evaluation/main.py" in full
    assert not [n for n in full if n.startswith("opt/")]  # the seed is the agent's only
