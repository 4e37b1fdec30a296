"""A machine that plays what users do to runs, in orders nobody wrote down (issue 41).

Hypothesis's stateful testing drives a benchmark (:class:`Bench`: the selftest benchmark,
no Docker, in :class:`JointMachine`; the Harbor task format in real Docker in
:class:`tests.runner.joint_harbor.HarborJointMachine`, issue 42) through runs with K
attempts, sharded or not, paid on a campaign or not, SIGKILLs at random points, resumes
that raise K or narrow the selection, moves of a chain to another machine (its tip packed
and unpacked elsewhere as a CI artifact, ``scripts/ci/artifact.sh``, the originals gone),
merges of shards and reports. After every step it checks the invariants of
:func:`check_chain` and :func:`check_merge` against the run model
(:class:`harness.run.model.RunModel`), the money of each paid chain against its rows
(:func:`check_money`), and the bench's own (:meth:`Bench.check_engine`: on Docker, no
container left that a finished run should have removed). A failing example prints as the sequence of rules
(``state.resume(...)``) Hypothesis replays.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from harness.core.models import ShardSpec
from harness.run.model import RunModel, shard_of
from tests.support.forkrun import ForkedProcess
from tests.support.suite import Run, Suite, run_cli

# Deterministic work: the same unit scores the same in every run. "sleep" gives a kill time
# to land in the middle of a run; "infra" never settles, so every resume runs it again.
# Each unit's agent reports a cost ("cost": binary fractions, so sums are exact), charged on
# a paid chain's campaign.
TASKS: list[dict[str, Any]] = [
    {"id": "p1", "work": "partial", "score": 0.25, "cost": 0.25},
    {"id": "p2", "work": "sleep", "seconds": 0.15, "then": "partial", "score": 0.5,
     "cost": 0.5},
    {"id": "s3", "work": "succeed", "cost": 0.125},
    {"id": "f4", "work": "fail", "cost": 0.0625},
    {"id": "a5", "work": "agent_fail", "cost": 0.375},
    {"id": "i6", "work": "infra", "cost": 0.03125},
]
# A paid chain's campaign: a ceiling no example reaches, each unit held at RESERVE_USD until
# it settles (a unit of unknown cost, or a dead run's hold, is charged at least that).
RESERVE_USD = 1.0
CAMPAIGN = ("--campaign-budget-usd", "1000", "--per-task-reserve-usd", str(RESERVE_USD),
            "--unknown-cost-allowance-usd", str(RESERVE_USD))
SETTLED = {"scored", "agent_failed"}
# A step's bound: generous, so a loaded machine (CI's slow tier beside other jobs) is not
# taken for a broken joint (a timeout in one example makes Hypothesis's replay diverge)
STEP_TIMEOUT_S = 600
NOT_FINAL = {"blocked", "not_attempted"}
ARTIFACT = Path(__file__).resolve().parents[2] / "scripts" / "ci" / "artifact.sh"


class Bench(Protocol):
    """What the machine plays: a benchmark's runs, its tasks, and its own invariant."""

    tasks: tuple[str, ...]  # the tasks of a whole selection (pytest ids, ``-k`` names)
    narrow: str  # ``-k`` of a narrowed resume: some of the tasks
    kill_scale: float  # a drawn kill (0.05 to 0.6) times this is seconds into a run
    pays: bool  # its units report costs (the machine then also plays paid chains)

    def run(self, *args: str, timeout: float) -> Run:
        """A run to its end (``args`` after the bench's own options)."""
        ...

    def start(self, *args: str) -> tuple[ForkedProcess, Path]:
        """A run started, leading its own session (a kill signals its process group)."""
        ...

    def check_engine(self) -> None:
        """The bench's own invariant after every step (none without Docker)."""
        ...

    def teardown(self) -> None:
        ...


class SelftestBench:
    """The selftest benchmark's :data:`TASKS` (no Docker): a kill lands 0.05 to 0.6 s in."""

    tasks = tuple(t["id"] for t in TASKS)
    narrow = "p1 or s3 or i6"
    kill_scale = 1.0
    pays = True

    def __init__(self, path: Path) -> None:
        self.suite = Suite(path)
        self.suite.tasks(TASKS)

    def run(self, *args: str, timeout: float) -> Run:
        return self.suite.run(*args, timeout=timeout)

    def start(self, *args: str) -> tuple[ForkedProcess, Path]:
        return self.suite.start(*args)

    def check_engine(self) -> None:
        pass

    def teardown(self) -> None:
        pass


def unit(iid: str) -> str:
    """A row's unit named for any K (``p1`` of a K=1 run is ``p1@1``)."""
    return iid if "@" in iid else f"{iid}@1"


@dataclass
class Chain:
    """One run and its resumes (nearest last); a shard's chain keeps its shard."""

    roots: list[Path]
    shard: ShardSpec | None = None
    group: int | None = None  # the sharded run the chain is a share of
    killed: list[bool] = field(default_factory=list)
    campaign: Path | None = None  # a paid chain's campaign file (its every run spends there)
    # runs killed before their selection was frozen, each with the number of roots before it
    lost: list[tuple[Path, int]] = field(default_factory=list)

    @property
    def tip(self) -> Path:
        return self.roots[-1]


def readable(root: Path) -> bool:
    """A run root a resume can start from: its manifest names a frozen selection."""
    try:
        manifest = json.loads((root / "run_manifest.json").read_text())
    except (OSError, ValueError):
        return False
    return bool(manifest.get("selection", {}).get("resolved")) and (
        root / "result_index.jsonl").exists()


def model_of(manifest: dict[str, Any]) -> RunModel:
    """The run model of a manifest read as JSON (as any tool reads it)."""
    return RunModel.of_keys(manifest["selection"]["instance_ids"],
                            manifest["extra"].get("attempts") or 1)


def check_chain(chain: Chain) -> None:
    """The invariants of one chain of runs (each planned unit, each row, each execution)."""
    runs = [Run.of(r) for r in chain.roots]
    executed_settled: dict[str, Path] = {}
    settled_scores: dict[str, float | None] = {}
    for run in runs:
        manifest = run.manifest
        model = model_of(manifest)
        keys = manifest["selection"]["instance_ids"]
        # every tool's count is the model's: the selection is every attempt of its tasks
        assert sorted(keys) == sorted(model.units), (run.root, keys)
        assert manifest["selection"]["count"] == len(model.units)
        if chain.shard is not None:  # a shard holds its tasks' every attempt
            assert {shard_of(k, chain.shard.count) for k in keys} <= {chain.shard.index}
        rows = run.rows
        final: dict[str, int] = {}
        carried, ran = set(), set()
        for row in rows:
            iid = row["instance_id"]
            if row["outcome"] == "carried_forward":
                carried.add(iid)
                # a settled score is never rewritten
                assert settled_scores.get(unit(iid), row["score"]) == row["score"], row
            elif row["outcome"] not in NOT_FINAL:
                ran.add(iid)
            if row["outcome"] in SETTLED or row["outcome"] == "carried_forward":
                final[iid] = final.get(iid, 0) + 1
        assert all(n == 1 for n in final.values()), (run.root, final)  # one final row each
        assert not carried & ran, (run.root, carried & ran)  # never carried and run again
        for row in rows:
            if row["outcome"] in SETTLED:
                u = unit(row["instance_id"])
                # no paid unit runs twice across the chain
                assert u not in executed_settled, (u, executed_settled.get(u), run.root)
                executed_settled[u] = run.root
                settled_scores[u] = row["score"]


def merged_scores(root: Path) -> dict[str, float | None]:
    return {unit(r["instance_id"]): r["score"] for r in Run.of(root).latest.values()}


class JointMachine(RuleBasedStateMachine):
    """Rules are what users do; invariants hold after every one. :meth:`make_bench` is
    what they play (a subclass gives another bench and keeps every rule and invariant)."""

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="joint-"))
        self.bench = self.make_bench()
        self.wholes: dict[tuple[str, ...], Path] = {}  # the unsharded runs merges compare to
        self.chains: list[Chain] = []
        self.groups = 0
        self.merges = 0
        self.reports = 0
        self.merged: list[Path] = []
        self.moves = 0
        self.campaigns = 0
        self.in_merges: set[int] = set()  # id() of the chains a merge names by path

    def make_bench(self) -> Bench:
        return SelftestBench(self.dir)

    def teardown(self) -> None:
        try:
            self.bench.teardown()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    # what users do ----------------------------------------------------------------------
    @precondition(lambda self: len(self.chains) < 5)
    @rule(k=st.integers(1, 3), kill=st.none() | st.floats(0.05, 0.6))
    def run(self, k: int, kill: float | None) -> None:
        self._start(Chain([]), ["--attempts", str(k)], kill)

    @precondition(lambda self: len(self.chains) < 5 and self.bench.pays)
    @rule(k=st.integers(1, 3), kill=st.none() | st.floats(0.05, 0.6))
    def run_paid(self, k: int, kill: float | None) -> None:
        """A run on a campaign of its own; its resumes spend there too (a killed run's
        custody is taken over by the resume, wherever the chain moved)."""
        self.campaigns += 1
        chain = Chain([], campaign=self.dir / f"campaign-{self.campaigns}.json")
        self._start(chain, ["--attempts", str(k)], kill)

    @precondition(lambda self: len(self.chains) < 4)
    @rule(k=st.integers(1, 2), kill=st.none() | st.floats(0.05, 0.6))
    def run_sharded(self, k: int, kill: float | None) -> None:
        self.groups += 1
        for i in (1, 2):
            chain = Chain([], ShardSpec(index=i, count=2), self.groups)
            self._start(chain, ["--attempts", str(k), "--shard", f"{i}/2"],
                        kill if i == 2 else None)

    @precondition(lambda self: bool(self.chains))
    @rule(data=st.data(), grow=st.integers(0, 2), narrow=st.booleans(),
          kill=st.none() | st.floats(0.05, 0.6))
    def resume(self, data: st.DataObject, grow: int, narrow: bool, kill: float | None) -> None:
        chain = data.draw(st.sampled_from(self.chains))
        if not chain.roots:  # killed before its selection was frozen: nothing to resume
            return
        args = ["--resume-from", str(chain.tip)]
        k = Run.of(chain.tip).manifest["extra"].get("attempts") or 1
        if grow:
            args += ["--attempts", str(k + grow)]
        if narrow:
            args += ["-k", self.bench.narrow]
        self._start(chain, args, kill)

    @precondition(lambda self: self.groups > 0)
    @rule(data=st.data())
    def merge(self, data: st.DataObject) -> None:
        group = data.draw(st.integers(1, self.groups))
        shards = [c for c in self.chains if c.group == group and c.roots]
        self.merges += 1
        out = self.dir / f"merged-{self.merges}"
        self.merged.append(out)  # drawn from by report whether or not the merge succeeds
        self.in_merges |= {id(c) for c in shards}
        proc = run_cli("merge", *(str(c.tip) for c in shards), "--output", str(out),
                       timeout=STEP_TIMEOUT_S)
        check_merge(self._whole, len(self.bench.tasks), shards, proc, out)

    @precondition(lambda self: bool(self.chains))
    @rule(data=st.data())
    def move(self, data: st.DataObject) -> None:
        """A chain's tip packed as a CI artifact and unpacked on another machine; the
        originals are gone, so every later resume, merge and report finds the chain by name
        (a chain a merge names by path stays: that merge would lose its shard)."""
        chain = data.draw(st.sampled_from(self.chains))
        if not chain.roots or id(chain) in self.in_merges:
            return
        self.moves += 1
        packed = subprocess.run(["bash", str(ARTIFACT), "pack", str(chain.tip),
                                 str(self.moves)], capture_output=True, text=True, timeout=120)
        assert packed.returncode == 0, packed.stderr
        tar = chain.tip.parent / f"shard-{self.moves}.tar"
        machine = self.dir / f"machine-{self.moves}"
        (machine / "download").mkdir(parents=True)
        tar.rename(machine / "download" / tar.name)
        unpacked = subprocess.run(["bash", str(ARTIFACT), "unpack", str(machine / "download"),
                                   str(machine / "runs")], capture_output=True, text=True,
                                  timeout=120)
        assert unpacked.returncode == 0, unpacked.stderr
        ancestors = Run.of(chain.tip).manifest["resume"]["ancestors"]
        travels = {chain.tip.name, *(Path(a).name for a in ancestors)}
        assert {r.name for r in chain.roots} <= travels, (chain.roots, ancestors)
        gone = self.dir / f"gone-{self.moves}"
        gone.mkdir()
        for old in chain.roots:
            old.rename(gone / old.name)  # the first machine is gone
        chain.roots = [machine / "runs" / r.name for r in chain.roots]
        assert all(readable(r) for r in chain.roots), "the chain did not travel whole"

    @precondition(lambda self: bool(self.chains))
    @rule(data=st.data())
    def report(self, data: st.DataObject) -> None:
        pool: list[Chain | Path] = [*self.chains, *self.merged]
        chosen = data.draw(st.sampled_from(pool))
        if isinstance(chosen, Chain) and not chosen.roots:  # killed before it had a root
            return
        root = chosen.tip if isinstance(chosen, Chain) else chosen
        if not root.exists():  # a merge refused: nothing written
            return
        self.reports += 1
        out = self.dir / f"report-{self.reports}"
        proc = run_cli("report", str(root), "--output", str(out), "--resamples", "50",
                       timeout=STEP_TIMEOUT_S)
        assert proc.returncode == 0, proc.stderr
        check_report(root, json.loads((out / "report.json").read_text()))

    # -------------------------------------------------------------------------------------
    def _start(self, chain: Chain, args: list[str], kill: float | None) -> None:
        if chain.campaign is not None:
            args = ["--campaign-file", str(chain.campaign), *CAMPAIGN, *args]
        if kill is None:
            run = self.bench.run(*args, timeout=STEP_TIMEOUT_S)
            root = run.root
        else:
            proc, root = self.bench.start(*args)
            self._wait_to_kill(proc, root, kill)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate(timeout=STEP_TIMEOUT_S)
        if readable(root):
            chain.roots.append(root)
            chain.killed.append(kill is not None)
        else:  # a paid one may have taken the chain's custody over before it died
            chain.lost.append((root, len(chain.roots)))
        # every chain started is kept, with or without a root: what Hypothesis draws from
        # (self.chains, self.merges) must not depend on where a kill landed, or its replay
        # of an example diverges (FlakyStrategyDefinition)
        if chain not in self.chains:
            self.chains.append(chain)

    def _wait_to_kill(self, proc: ForkedProcess, root: Path, kill: float) -> None:
        """Where a kill lands: ``kill`` times the bench's scale, in seconds, into the run."""
        time.sleep(kill * self.bench.kill_scale)

    def _whole(self, *args: str) -> Path:
        """The root of the unsharded run of ``args`` (one per example: the agent is
        deterministic, and a Docker run costs seconds)."""
        if args not in self.wholes:
            self.wholes[args] = self.bench.run(*args, timeout=STEP_TIMEOUT_S).root
        return self.wholes[args]

    @invariant()
    def chains_hold(self) -> None:
        for chain in self.chains:
            check_chain(chain)

    @invariant()
    def engine_holds(self) -> None:
        self.bench.check_engine()

    @invariant()
    def money_holds(self) -> None:
        for chain in self.chains:
            if chain.campaign is not None and chain.roots:
                check_money(chain)


def check_money(chain: Chain) -> None:
    """A paid chain's campaign against its runs' rows: a run that finished was charged
    exactly what its rows say (each execution its cost, and the holds of dead runs on the
    unit that ran again) plus what it left open; a killed run at least its rows, and at most
    one unit's charge more (a unit settled as the kill landed, its row lost); a run killed
    before its selection was frozen nothing; each dead run's custody passed to a later run
    of the chain; nothing open once the chain's tip finished, but the empty custody of a
    resume of it killed while admitted (the next resume takes that over)."""
    assert chain.campaign is not None
    state = json.loads(chain.campaign.read_text())
    entries = {r["run_id"]: r for r in [*state["runs"], *state["active_runs"].values()]}
    runs = [Run.of(root) for root in chain.roots]
    ids = [run.manifest["run_id"] for run in runs]
    lost = {json.loads((r / "run_manifest.json").read_text())["run_id"]: after
            for r, after in chain.lost if (r / "run_manifest.json").is_file()}
    # a unit's cost, and a hold for each dead run before it (holds pass on, resume by resume)
    most = max(t["cost"] for t in TASKS) + RESERVE_USD * (len(runs) + len(lost))
    for i, run in enumerate(runs):
        charged = [((r.get("details") or {}).get("budget") or {}).get("charged_usd")
                   for r in run.rows if r["outcome"] != "carried_forward"]
        rows_usd = sum(c for c in charged if c is not None)
        record = entries.get(ids[i])
        if record is None:  # killed before its budget was admitted
            assert chain.killed[i] and not rows_usd, (run.root, charged)
            continue
        if record.get("outcome") not in (None, "taken_over"):  # it finished
            assert abs(record["settled_usd"] - rows_usd - record["abandoned_usd"]) < 1e-9, (
                run.root, record, charged)
            continue
        assert chain.killed[i], (run.root, record, "an unfinished run that was not killed")
        assert rows_usd <= record["settled_usd"] <= rows_usd + most, (run.root, record)
        if record.get("outcome") == "taken_over":
            assert record["taken_over_by"] in [*ids[i + 1:], *lost], (run.root, record, ids)
    for run_id in lost:  # it ran no unit: it passed on what it took over, still holds it,
        entry = entries.get(run_id)  # or (refused after its admission) charged it as left
        if entry is not None:
            assert entry["settled_usd"] == entry.get("abandoned_usd", 0.0), entry
    if Run.of(chain.tip).manifest.get("exit_code") is not None:
        # nothing open but the empty custody of a resume of the tip killed while admitted
        # (the next resume takes it over)
        left = {i: lost.get(i) for i in state["active_runs"]}
        assert all(after == len(runs) for after in left.values()), (chain.tip, left)


def check_merge(whole: Callable[..., Path], every: int, shards: list[Chain],
                proc: subprocess.CompletedProcess[str], out: Path) -> None:
    """A merge succeeds only on complete work; merged complete work equals the unsharded
    run of the same tasks and K (``whole(*args)``, of ``every`` task unless narrowed; the
    agent is deterministic)."""
    if len(shards) < 2:  # a shard killed before its selection was frozen: no run root
        assert proc.returncode == 2 and "missing" in proc.stderr, proc.stderr
        return
    models = [model_of(Run.of(c.tip).manifest) for c in shards]
    missing = [u for c, m in zip(shards, models, strict=True)
               for u in m.units if u.split("/", 1)[1] not in {
                   k for k, r in Run.of(c.tip).latest.items() if r["outcome"] not in NOT_FINAL}]
    ks = {m.attempts for m in models}
    if len(ks) > 1:  # the shards were resumed to different K: not one run
        assert proc.returncode == 2 and "different --attempts" in proc.stderr, proc.stderr
        return
    if missing:
        assert proc.returncode == 2 and "incomplete:" in proc.stderr, (missing, proc.stderr)
        assert not out.exists()
        return
    assert proc.returncode == 0, proc.stderr
    k = ks.pop()
    want = merged_scores(whole("--attempts", str(k), *selectors(models, every)))
    assert merged_scores(out) == want, (merged_scores(out), want)


def check_report(root: Path, report: dict[str, Any]) -> None:
    """The report counts what the run model says: its units, tasks and K."""
    manifest = Run.of(root).manifest
    model = model_of(manifest)
    head = report["headline"]
    assert head["selected"] == len(model.units), (root, head)
    # the units with a verdict and those left out, by reason, make up the selection; a
    # finished run's manifest gives the same two figures (issue 45)
    excluded = sum(head["excluded_reasons"].values())
    assert head["with_verdict"]["denominator"] + excluded == head["selected"], (root, head)
    verdict = manifest.get("verdict_score")
    if manifest["exit_code"] is not None and verdict is not None:
        assert (verdict["units"], verdict["excluded_reasons"]) == (
            head["with_verdict"]["denominator"], head["excluded_reasons"]), (root, verdict)
    assert sorted(i["key"] for i in report["instances"]) == sorted(model.units)
    samples = report.get("samples")
    if model.attempts > 1 and samples is not None:
        assert samples["k"] == model.attempts and samples["tasks"] == len(model.tasks), root
    else:
        assert samples is None or (model.attempts == 1 and samples["k"] <= 1), root


def selectors(models: list[RunModel], every: int) -> list[str]:
    """``-k`` for the tasks the shards hold (a narrowed resume holds fewer than the bench's
    ``every``)."""
    tasks = sorted({t.split("/", 1)[1] for m in models for t in m.tasks})
    return ["-k", " or ".join(tasks)] if len(tasks) < every else []
