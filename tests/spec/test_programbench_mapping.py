"""Issue 43 (10): the ProgramBench mapping names only options that exist. Every ``--flag`` in
its right-hand column is an option of ``pytest benchmarks/programbench`` or of the
``harness programbench`` command the row names; every specification flag the issue lists
has a row."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.spec.refusals import REPO
from tests.support.suite import run_cli

MAPPING = REPO / "docs" / "programbench-adapter-mapping.md"
SPEC_FLAGS = ("--difficulty", "--slice", "--instance-id", "--ouroboros-url", "--timeout-sec",
              "--skip-pull", "--redo-existing", "--settings-path", "--solve-model",
              "--dry-run", "--eval", "--cpus", "--memory", "--repo-dir", "--allow-dirty-seed")
SPEC_NAMES = ("ouroboros_task_body.json", "requested_task_ids", "OUROBOROS_BENCH_RUNS_ROOT",
              "PROGRAMBENCH_PYTHON", "PROGRAMBENCH_DOCKER_CPUS", "OBO_ALLOW_EVOLVED_VOLUME")


def _rows() -> list[tuple[str, str]]:
    rows = []
    for line in MAPPING.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if line.startswith("| ") and len(cells) == 2 and not set(cells[0]) <= {"-"}:
            rows.append((cells[0], cells[1]))
    return rows


def _help(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "pytest", *args, "--help"], cwd=REPO,
                          capture_output=True, text=True, timeout=120, check=False)
    return done.stdout


def test_every_option_the_mapping_names_exists() -> None:
    pytest_help = _help("benchmarks/programbench")
    tools = {name: run_cli("programbench", name, "--help").stdout
             for name in ("prepare", "export", "gate")}
    missing = []
    for spec, ours in _rows():
        tool = next((t for t in tools if f"harness programbench {t}" in ours), None)
        known = pytest_help + (tools[tool] if tool else "")
        for flag in set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]+)", ours)):
            if not re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", known):
                missing.append((spec, flag))
    assert missing == []


def test_every_specification_flag_and_name_has_a_row() -> None:
    left = " ".join(spec for spec, _ in _rows())
    assert [f for f in SPEC_FLAGS if f not in left] == []
    assert [n for n in SPEC_NAMES if n not in left] == []
