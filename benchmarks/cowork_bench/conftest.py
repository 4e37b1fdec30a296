"""Cowork Bench as a pytest benchmark: options, the adapter, admission.

    pytest benchmarks/cowork_bench --cowork-root PATH --agent oracle -n 2
    pytest benchmarks/cowork_bench --cowork-root PATH --dry-run

See ``adapter.py`` (options, provenance gate) and ``instance.py`` (one instance).

Without ``--cowork-root`` the benchmark cannot be listed. Named on the command line (its
folder or a file in it) that is a refusal (one line, exit 2); collected as part of a wider
folder (``pytest benchmarks``, ``pytest`` from the repository root) it collects nothing and
says so in one line naming the flag, and the rest of the run goes on.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from benchmarks.cowork_bench import BENCHMARK
from benchmarks.cowork_bench.adapter import CoworkAdapter
from benchmarks.cowork_bench.options import CoworkOptions, add_options
from harness.api import BenchmarkAdapter, RefusalError, RunContext, names_folder

ADAPTER_KEY = pytest.StashKey[CoworkAdapter]()
UNLISTED_KEY = pytest.StashKey[bool]()
HERE = Path(__file__).resolve().parent
NOT_LISTED = (
    f"{BENCHMARK}: not listed: pass --cowork-root PATH (a Cowork Bench checkout, "
    f"e.g. tests/fixtures/cowork_mini) to run it"
)


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)
    parser.getgroup("cowork_bench").addoption(
        "--cowork-build-image",
        action="store_true",
        default=False,
        dest="cowork_build_image",
        help="build the checkout's own Dockerfile (untouched) and the harness's layer on it "
        "(agent user, MCP supervisor, mcp-call) and run the agent and eval containers in it; "
        "a clean commit's image is reused (see `harness cowork build-image`)",
    )


def check_build_image(config: pytest.Config) -> None:
    """``--cowork-build-image`` names the runtime image: not with ``--cowork-image`` too."""
    if config.getoption("cowork_build_image", False) and config.getoption("cowork_image", None):
        raise RefusalError(
            "--cowork-build-image and --cowork-image both choose the runtime image: give one",
            stage="options",
            reason="bad_option",
        )


def named(config: pytest.Config) -> bool:
    """The command line names this benchmark's folder or something in it."""
    return names_folder(config, HERE)


def unlisted(config: pytest.Config) -> bool:
    """No ``--cowork-root`` and not named: collect nothing (one line says so, once)."""
    if UNLISTED_KEY not in config.stash:
        skip = not config.getoption("cowork_root", None) and not named(config)
        config.stash[UNLISTED_KEY] = skip
        if skip and not hasattr(config, "workerinput") and not config.option.help:
            sys.stderr.write(NOT_LISTED + "\n")
            sys.stderr.flush()
    return config.stash[UNLISTED_KEY]


def adapter_of(config: pytest.Config) -> CoworkAdapter:
    if ADAPTER_KEY not in config.stash:
        config.stash[ADAPTER_KEY] = CoworkAdapter(config)
    return config.stash[ADAPTER_KEY]


def pytest_harness_adapters(config: pytest.Config) -> list[BenchmarkAdapter]:
    return [] if unlisted(config) else [adapter_of(config)]


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    if unlisted(config) and (collection_path == HERE or HERE in collection_path.parents):
        return True
    return None


def pytest_configure(config: pytest.Config) -> None:
    """Validate the options before anything uses them: one line, exit 2."""
    if config.option.help or config.option.version or unlisted(config):
        return
    try:
        CoworkOptions.from_config(config)
        check_build_image(config)
    except RefusalError as exc:
        pytest.exit(str(exc), returncode=exc.exit_code)


def pytest_harness_admit(config: pytest.Config, run: RunContext) -> None:
    adapter = run.adapters.get(BENCHMARK)
    if isinstance(adapter, CoworkAdapter):
        adapter.admit(run)
