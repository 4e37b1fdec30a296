"""The docs (issue 47): the site builds with ``mkdocs build --strict`` (no broken link, no
orphan page), the reference pages are what ``scripts/gen_reference.py`` generates, every
command in the README and the guides names only options that exist, and the README's
commands run, in dry-run form where a real run needs an agent server."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest
from pytest_codeblocks import extract_from_file

from tests.support.suite import REPO_ROOT, run_cli, run_pytest

DOCS = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").rglob("*.md"))]
GENERATED = REPO_ROOT / "docs" / "reference"
OPTION = re.compile(r"(?<![\w/-])(--[a-z][a-z0-9-]*)")


def _commands(path: Path) -> list[tuple[int, list[str]]]:
    """(line, words) of every ``pytest``/``harness`` command in the file's bash blocks."""
    out = []
    for block in extract_from_file(path):
        if block.syntax not in ("bash", "sh", "shell"):
            continue
        code = re.sub(r"\\\n\s*", " ", block.code)  # a command continued over lines
        for offset, raw in enumerate(code.splitlines()):
            for part in raw.split("&&"):
                line = re.split(r"\s#\s", part, maxsplit=1)[0].strip().rstrip("\\").strip()
                line = line.removeprefix("python3 -m ").removeprefix("python -m ")
                if line.startswith(("pytest ", "harness ")):
                    try:
                        words = shlex.split(line)
                    except ValueError:
                        continue
                    out.append((block.lineno + offset, words))
    return out


@cache
def _pytest_help() -> str:
    done = subprocess.run([sys.executable, "-m", "pytest", "benchmarks/programbench",
                           "benchmarks/cowork_bench", "benchmarks/harbor", "--help", "-p", "no:cacheprovider"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
                          check=False)
    return done.stdout


@cache
def _harness_help(words: tuple[str, ...]) -> str:
    return run_cli(*words, "--help").stdout


def _known(words: list[str]) -> str:
    if words[0] == "pytest":
        return _pytest_help()
    sub = tuple(w for w in words[1:3] if not w.startswith("-"))
    return _harness_help(sub[:1]) + _harness_help(sub) if sub else _harness_help(())


def test_every_documented_command_names_options_that_exist() -> None:
    missing, seen = [], 0
    for path in DOCS:
        for line, words in _commands(path):
            seen += 1
            known = _known(words)
            for flag in {f for w in words for f in OPTION.findall(w.split("=", 1)[0])}:
                if not re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", known):
                    missing.append(f"{path.relative_to(REPO_ROOT)}:{line} {flag}")
    assert seen > 40  # the README's and the guides' commands were read
    assert missing == []


def test_the_reference_pages_are_generated_and_fresh() -> None:
    done = subprocess.run([sys.executable, "scripts/gen_reference.py", "--check"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr


def test_the_site_builds_strict(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d",
                           str(tmp_path / "site")], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=300, check=False,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "site" / "reference" / "options" / "index.html").is_file()


def _readme_runs() -> list[list[str]]:
    """The README's pytest commands, as the dry runs the test makes of them."""
    out = []
    for _line, words in _commands(REPO_ROOT / "README.md"):
        if words[0] == "pytest" and words[1].startswith("benchmarks/"):
            out.append(words[1:])
    return out


@pytest.mark.docker
def test_the_readme_commands_run_in_dry_run_form(tmp_path: Path) -> None:
    """Each README command, with ``--dry-run`` and a fresh ``--run-root`` (no agent server, no
    spend; ``-n`` dropped: one process is enough for a dry run); ``<run_id>`` is the root of
    the first dry run, so the resume resumes a real run."""
    commands = _readme_runs()
    assert len(commands) >= 5, commands
    first: Path | None = None
    for i, args in enumerate(commands):
        args = [a for j, a in enumerate(args) if a != "-n" and (j == 0 or args[j - 1] != "-n")]
        if first is not None:
            args = [a.replace("bench_runs/<run_id>", str(first)) for a in args]
        if any("<" in a for a in args):
            continue
        narrow = ["--pb-slice", "0:1"] if args[0] == "benchmarks/programbench" and not any(
            a.startswith(("--pb-slice", "--resume-from")) for a in args) else []
        run = run_pytest(args[0], tmp_path / f"r{i}", *args[1:], *narrow, "--dry-run",
                         env={"HARNESS_MODEL_API_KEY": "sk-docs-test-not-a-key"})
        assert run.rc == 0, (args, run.out[-2000:])
        first = first or run.root


# What a guide's placeholder stands for in its dry run (issue 47: every command of the README
# and the guides runs). Run roots (``bench_runs/<...>``) become the first dry run's root.
PLACEHOLDERS = {
    "PATH": "tests/fixtures/cowork_mini", "$COWORK_BENCH": "tests/fixtures/cowork_mini",
    "URL": "http://127.0.0.1:9", "$GATEWAY": "http://127.0.0.1:9", "M": "openai/fake-model",
    "path/to/tasks": "tests/data/harbor/tasks", "my-agent": "true",
    "mirror.local/ubuntu:24.04": "harness/base:latest", "TASK_ID": "email-reply-invoice",
}


def _filled(word: str, files: dict[str, Path]) -> str:
    """A placeholder of a documented command as its dry run's value (a file it names is a
    real one in the test's folder; ``$COWORK_RUN=...`` never lands in the work tree)."""
    name, eq, value = word.partition("=")
    if eq and value.startswith("$"):
        return f"{name}={files.get(value, files['$RUN']).as_posix()}"
    word = PLACEHOLDERS.get(word, word)
    for key, path in files.items():
        if word == key or (key.startswith("gate20") and word.startswith("gate20.")):
            return path.as_posix()
    return word


def _guide_runs(files: dict[str, Path]) -> list[tuple[str, list[str]]]:
    """Every documented ``pytest benchmarks/...`` command, placeholders filled in."""
    out = []
    for path in DOCS:
        for line, words in _commands(path):
            if words[0] != "pytest" or not words[1].startswith("benchmarks/"):
                continue
            args: list[str] = []
            for n, word in enumerate(words[1:]):
                if word == "...":
                    if args and args[-1] == "--agent":
                        args.append("nop")
                    continue
                if words[n] in ("-n",) or word in ("-n", "--cowork-build-image"):
                    continue  # one process; the checkout's own image is not built here
                args.append(_filled(word, files))
            out.append((f"{path.relative_to(REPO_ROOT)}:{line}", args))
    return out


@pytest.mark.docker
def test_every_guide_command_runs_in_dry_run_form(tmp_path: Path) -> None:
    """The guides' commands too: each in dry-run form (no agent, no spend, no container),
    its placeholders filled in (a path, a URL, a model, a run root of an earlier dry run)."""
    files = {"gate20": tmp_path / "gate20.txt", "pins.json": tmp_path / "pins.json",
             "prices.json": tmp_path / "prices.json", "$RUN": tmp_path / "named-root",
             "$COWORK_CAMPAIGN": tmp_path / "campaign.json",
             "$COWORK_SEED": tmp_path / "seed"}
    files["gate20"].write_text("abishekvashok__cmatrix.5c082c6\n")
    files["pins.json"].write_text("{}")
    files["prices.json"].write_text('{"models": {}}')
    seed = files["$COWORK_SEED"]  # an agent's checkout: a clean git repository
    for argv in (["init", "-q", str(seed)], ["-C", str(seed), "-c", "user.email=t@t",
                                             "-c", "user.name=t", "commit", "-q",
                                             "--allow-empty", "-m", "seed"]):
        subprocess.run(["git", *argv], check=True, capture_output=True, timeout=60)
    runs = _guide_runs(files)
    assert len(runs) > 30, runs
    first: Path | None = None
    failed = []
    for i, (where, args) in enumerate(runs):
        if first is not None:
            args = [re.sub(r"bench_runs/<[a-z_]+>", str(first), a) for a in args]
        if any(re.search(r"<[a-z_]+>", a) for a in args):
            continue  # a run root before the first dry run made one
        narrow = ["--pb-slice", "0:1"] if args[0] == "benchmarks/programbench" and not any(
            a.startswith(("--pb-slice", "--resume-from")) for a in args) else []
        run = run_pytest(args[0], tmp_path / f"r{i}", *args[1:], *narrow, "--dry-run",
                         env={"HARNESS_MODEL_API_KEY": "sk-docs-test-not-a-key"})
        shutil.rmtree(files["$RUN"], ignore_errors=True)  # a command's own --run-root
        if run.rc not in (0, 5):  # 5: the selection is empty (a -k the fixture run lacks)
            failed.append(f"{where}: {' '.join(args)}: {run.out.strip().splitlines()[-1:]}")
        elif first is None and args[0] == "benchmarks/programbench":
            first = run.root
    assert failed == [], "\n".join(failed)
