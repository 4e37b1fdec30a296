"""The joint machine on the Harbor task format (issue 42): every rule and invariant of
:class:`tests.runner.joint_machine.JointMachine`, played on Harbor runs in real Docker.

The bench is three of the committed task folders (``tests/data/harbor/tasks``) and the
command agent, whose one line of bash does the same in every run: write-greeting solved
(1.0), partial-credit three files of four (0.75), sum-numbers the agent's failure (it exits
3: ``agent_failed``). Every unit settles, so a resume runs only what a kill left unsettled.
A unit takes about two seconds, a run of K=1 about ten: a drawn kill (0.05 to 0.6) lands
1 to 12 seconds into a run, before its selection is frozen, mid-unit or after its end.

Its own invariant (:meth:`HarborBench.check_engine`, after every step): no container of a
run of the machine is left on the engine, but a killed run's, and only until the start-up
sweep of a later run that finished (``sweeps.startup.stale_runs_swept`` in its manifest)
proved its owner dead and removed it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import docker

from harness.sandbox import labels as L
from harness.sandbox.cleanup import sweep
from tests.benchmarks.harbor.harbor_support import TARGET, TASKS, map_args
from tests.runner.joint_machine import JointMachine
from tests.support.forkrun import ForkedProcess
from tests.support.suite import (
    FORK_SERVER,
    NO_RETRY_BACKOFF,
    QUIET_PLUGINS,
    REPO_ROOT,
    Run,
    private_basetemp,
    run_env,
    run_pytest,
)

# What the agent does in every unit, told apart by the task's working directory and files.
SOLVE = ("case \"$PWD\" in "
         "/data) touch a.txt b.txt c.txt ;; "
         "*) if [ -f numbers.txt ]; then exit 3; "
         "else echo 'hello, harbor' > greeting.txt; fi ;; "
         "esac")
# Each task's final row in every run (its score, its outcome).
SCORES = {"partial-credit": (0.75, "scored"), "sum-numbers": (0.0, "agent_failed"),
          "write-greeting": (1.0, "scored")}


class HarborBench:
    """Harbor runs of :data:`SCORES`'s task folders (copied into the machine's folder)."""

    tasks = tuple(sorted(SCORES))
    narrow = "write-greeting or partial-credit"
    kill_scale = 20.0
    pays = False  # its command agent reports no cost (the Harbor budget scenario pays)

    def __init__(self, path: Path) -> None:
        self.path = path
        self.folder = path / "tasks"
        for name in self.tasks:
            shutil.copytree(TASKS / name, self.folder / name)
        self.counter = 0
        self.started: list[Path] = []  # every run root, in the order the runs started
        self.swept: dict[Path, bool] = {}  # a finished run: did its start-up sweep run

    def options(self) -> list[str]:
        """The bench's options, before a step's own (argparse keeps the last)."""
        return ["--harbor-tasks", str(self.folder), *map_args(), "--agent", "command",
                "--agent-command", SOLVE, "--no-report", *NO_RETRY_BACKOFF]

    def new_root(self) -> Path:
        self.counter += 1
        root = self.path / "runs" / f"r{self.counter}"
        self.started.append(root)
        return root

    def run(self, *args: str, timeout: float) -> Run:
        return run_pytest(TARGET, self.new_root(), *self.options(), *args, timeout=timeout)

    def start(self, *args: str) -> tuple[ForkedProcess, Path]:
        root = self.new_root()
        proc = FORK_SERVER.spawn(
            "pytest", [*QUIET_PLUGINS, "-q", TARGET, "--run-root", str(root),
                       *private_basetemp(self.path), *self.options(), *args],
            REPO_ROOT, run_env(), self.path / f".{root.name}-output.txt")
        return proc, root

    def leftover(self) -> dict[Path, dict[str, str]]:
        """The machine's containers on the engine (name: run id), by the run root they are
        labelled with (where the run started, wherever a move took it since)."""
        found = docker.from_env().api.containers(all=True, filters={"label": L.RUN})
        left: dict[Path, dict[str, str]] = {}
        for c in found:
            root = Path(c["Labels"].get(L.RUN_ROOT, "/"))
            if self.path in root.parents:
                name = str(c["Names"][0]).lstrip("/")
                left.setdefault(root, {})[name] = c["Labels"][L.RUN]
        return left

    def check_engine(self) -> None:
        for root in self.started:  # read once a run ended, before a move takes it away
            manifest = root / "run_manifest.json"
            if root not in self.swept and manifest.is_file():
                read = json.loads(manifest.read_text())
                if read.get("exit_code") is not None:
                    startup = (read["extra"].get("sweeps") or {}).get("startup") or {}
                    self.swept[root] = "stale_runs_swept" in startup
        last_sweep = max((i for i, r in enumerate(self.started) if self.swept.get(r)),
                         default=-1)
        for root, names in self.leftover().items():
            assert root in self.started, (root, names, "not a run of the machine")
            # a finished run removed its own; a later finished run swept a killed one's
            assert root not in self.swept, (root, names, "a finished run left containers")
            assert self.started.index(root) > last_sweep, (
                root, names, f"left after the start-up sweep of {self.started[last_sweep]}")

    def teardown(self) -> None:
        """What the last kills left (their sandboxes would end at their TTL)."""
        for run_id in {i for names in self.leftover().values() for i in names.values()}:
            sweep(run_id)


class HarborJointMachine(JointMachine):
    """The joint machine's rules and invariants on Harbor runs (real Docker)."""

    bench: HarborBench

    def make_bench(self) -> HarborBench:
        return HarborBench(self.dir)
