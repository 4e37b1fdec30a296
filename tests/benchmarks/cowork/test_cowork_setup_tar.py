"""One copy per container set-up: :func:`harness.sandbox.pack.join_tars` and the Cowork set-up
tar (:func:`benchmarks.cowork_bench.phases.setup_tar`), without Docker."""

from __future__ import annotations

import io
import os
import tarfile
from collections.abc import Sequence
from pathlib import Path

from benchmarks.cowork_bench.containers import AGENT_ID
from benchmarks.cowork_bench.phases import InstanceEnv, setup_tar, support_tar, task_tar
from benchmarks.cowork_bench.seed import SeedRecord, SeedTar
from benchmarks.cowork_bench.tasks import load_task
from harness.sandbox.pack import (
    NewDir,
    _members_bytes,
    _parsed_end,
    join_tars,
    pack_bytes,
    pack_dirs,
    pack_tree,
)
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


def _tar(fmt: int, add: Sequence[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tar:
        for info, data in add:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def _info(
    name: str, kind: bytes = tarfile.REGTYPE, size: int = 0, pax: dict[str, str] | None = None
) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.size, info.pax_headers = kind, size, dict(pax or {})
    if kind in (tarfile.SYMTYPE, tarfile.LNKTYPE):
        info.linkname = "target/" + "t" * 150
    return info


def _pax_size_only(data: bytes, name: str) -> bytes:
    """``data`` with ``name``'s ustar size field zeroed: only its PAX ``size`` record holds it."""
    out = bytearray(data)
    pos = 0
    while True:
        header = out[pos : pos + tarfile.BLOCKSIZE]
        size = int(header[124:136].split(b"\0")[0].strip() or b"0", 8)
        if header[:100].rstrip(b"\0") == name.encode() and header[156:157] == tarfile.REGTYPE:
            out[pos + 124 : pos + 136] = b"%011o\0" % 0
            out[pos + 148 : pos + 156] = b" " * 8
            out[pos + 148 : pos + 156] = b"%06o\0 " % sum(out[pos : pos + tarfile.BLOCKSIZE])
            return bytes(out)
        pos += tarfile.BLOCKSIZE + -(-size // tarfile.BLOCKSIZE) * tarfile.BLOCKSIZE


def test_join_tars_finds_each_parts_end_as_tarfile_does() -> None:
    zeros = bytes(3000)  # data ending in whole zero blocks, like an end marker
    members: list[tuple[tarfile.TarInfo, bytes | None]] = [
        (_info("a" * 150, size=len(zeros)), zeros), (_info("ünï"), b""),
        (_info("d", tarfile.DIRTYPE), None), (_info("s", tarfile.SYMTYPE), None),
        (_info("h", tarfile.LNKTYPE), None), (_info("f", tarfile.FIFOTYPE), None),
        (_info("x", size=5), b"hello"),
    ]  # fmt: skip
    parts = [_tar(fmt, members) for fmt in (tarfile.PAX_FORMAT, tarfile.GNU_FORMAT)]
    parts.append(_tar(tarfile.USTAR_FORMAT, [(_info("u", size=2), b"ok")]))
    pax_sized = [
        (_info("p", size=700, pax={"size": "700"}), b"p" * 700),
        (_info("q", size=1), b"q"),
    ]
    parts.append(_pax_size_only(_tar(tarfile.PAX_FORMAT, pax_sized), "p"))
    joined = join_tars(parts)
    expected = [m for part in parts for m in entries(part)]
    assert entries(joined) == expected
    with tarfile.open(fileobj=io.BytesIO(joined)) as tar:
        hellos = [tar.extractfile(m) for m in tar.getmembers() if m.name == "x"]
        assert [f.read() for f in hellos if f is not None] == [b"hello"] * 2
        assert tar.extractfile("p").read() == b"p" * 700  # type: ignore[union-attr]
        assert tar.extractfile("q").read() == b"q"  # type: ignore[union-attr]
    assert [_members_bytes(p).nbytes for p in parts] == [_parsed_end(p) for p in parts]
