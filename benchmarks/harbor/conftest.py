"""The Harbor task format as a pytest benchmark: its options and its declaration. Without
``--harbor-tasks`` a session over every benchmark (``pytest`` in the root) collects none of
it; naming its folder without ``--harbor-tasks`` is refused (one line, exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.harbor.benchmark import HarborBenchmark, image_map
from benchmarks.harbor.tasks import load_tasks
from harness.api import RefusalError, names_folder

BENCHMARK = HarborBenchmark()
HERE = Path(__file__).resolve().parent


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("harbor", "Harbor task format (benchmarks/harbor)")
    group.addoption("--harbor-tasks", default=None, metavar="DIR",
                    help="a Harbor task folder (task.toml, instruction.md, environment/, "
                         "tests/, solution/), or a folder of them")
    group.addoption("--harbor-image-map", action="append", default=[], metavar="IMAGE=LOCAL",
                    help="build a Dockerfile's FROM IMAGE from LOCAL instead (an engine "
                         "without a registry; repeatable); recorded with the run's settings")


def unlisted(config: pytest.Config) -> bool:
    return not config.getoption("harbor_tasks", None) and not names_folder(config, HERE)


def pytest_harness_adapters(config: pytest.Config) -> list[HarborBenchmark]:
    return [] if unlisted(config) else [BENCHMARK]


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    if unlisted(config) and (collection_path == HERE or HERE in collection_path.parents):
        return True
    return None


def pytest_configure(config: pytest.Config) -> None:
    """The task folders and the image map checked before anything runs: one line, exit 2."""
    if config.option.help or config.option.version or unlisted(config):
        return
    try:
        root = config.getoption("harbor_tasks")
        if not root:
            raise RefusalError("benchmarks/harbor needs --harbor-tasks DIR: a Harbor task "
                               "folder, or a folder of them", stage="options",
                               reason="harbor_option_invalid")
        load_tasks(Path(root))
        image_map(config.getoption("harbor_image_map"))
    except RefusalError as exc:
        pytest.exit(str(exc), returncode=exc.exit_code)
