"""The Kubernetes campaign (``deploy/kubernetes``) against the CI workflow it mirrors.

The manifests are rendered as a user applies them (``envsubst '$SHARDS $IMAGE'``), each pod's
environment is built as the kubelet builds it (the ConfigMap, the Secret, the downward API,
the Job's ``JOB_COMPLETION_INDEX``; ``$(NAME)`` expanded in the command), and the pods'
shell wrappers are run with bash in a temporary checkout whose ``scripts/ci/shard.sh`` and
``merge.sh`` are stubs printing the environment they were given. The campaign volume is a
temporary folder. No cluster, registry or Docker engine is needed.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from harness.runner.engine_admission import relay_refusal, remote
from tests.support.ci_workflow import commit_all, defaults, load

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy" / "kubernetes"
SHARDS = 3
IMAGE = "registry.example/harness:test"
# Fake secret values: given to the pods through the Secret, never in a manifest.
SECRETS = {"HARNESS_CAMPAIGN_URL": "postgresql://bench:fake-pass-41@db.example/campaign",
           "AGENT_KEY": "sk-fake-k8s-key-0123456789abcdef"}
STUB = "#!/usr/bin/env bash\nenv -0\n"  # the stub scripts: their environment, NUL-separated


# -- rendering ---------------------------------------------------------------------------


def render(name: str, **values: str) -> list[dict[str, Any]]:
    """The manifest's documents after ``envsubst '$SHARDS $IMAGE'`` (only those two)."""
    values = {"SHARDS": str(SHARDS), "IMAGE": IMAGE, **values}
    text = re.sub(r"\$(?:\{(SHARDS|IMAGE)\}|(SHARDS|IMAGE)(?![A-Za-z0-9_]))",
                  lambda m: values[m.group(1) or m.group(2)], (DEPLOY / name).read_text())
    return [d for d in yaml.safe_load_all(text) if d]


def one(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    [doc] = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


def step(wf: dict[str, Any], job: str, script: str) -> dict[str, Any]:
    [found] = [s for s in wf["jobs"][job]["steps"] if str(s.get("run", "")).strip() == script]
    return found


def input_defaults(wf: dict[str, Any]) -> dict[str, str]:
    """The workflow's inputs' defaults as the runner renders them (booleans: true/false)."""
    return {name: str(value).lower() if isinstance(value, bool) else str(value)
            for name, value in defaults(wf).items()}


def kubelet_expand(text: str, env: Mapping[str, str]) -> str:
    """The kubelet's expansion of a command (k8s.io/.../third_party/forked/golang/expansion):
    ``$$`` is ``$``, ``$(NAME)`` a defined variable's value, anything else as written."""
    out, i = [], 0
    while i < len(text):
        if text[i] == "$" and i + 1 < len(text):
            if text[i + 1] == "$":
                out.append("$")
                i += 2
                continue
            if text[i + 1] == "(":
                end = text.find(")", i + 2)
                if end != -1:
                    name = text[i + 2:end]
                    out.append(env.get(name, f"$({name})"))
                    i = end + 1
                    continue
        out.append(text[i])
        i += 1
    return "".join(out)


def pod_env(container: dict[str, Any], configmaps: Mapping[str, Mapping[str, str]], *,
            pod: str, job: str, index: int | None = None) -> dict[str, str]:
    """The container's environment as the kubelet gives it (the Secret holds ``SECRETS``)."""
    env: dict[str, str] = {}
    if index is not None:
        env["JOB_COMPLETION_INDEX"] = str(index)  # the Job controller's, for Indexed Jobs
    for source in container.get("envFrom", []):
        env.update(configmaps[source["configMapRef"]["name"]])
    fields = {"metadata.name": pod,
              "metadata.labels['batch.kubernetes.io/job-name']": job}
    for var in container.get("env", []):
        ref = var.get("valueFrom")
        if ref is None:
            env[var["name"]] = kubelet_expand(str(var["value"]), env)
        elif "secretKeyRef" in ref:  # the Secret the README creates
            key = ref["secretKeyRef"]
            if key["name"] == "benchmark-campaign" and key["key"] in SECRETS:
                env[var["name"]] = SECRETS[key["key"]]
            else:
                assert key.get("optional"), f"the pod cannot start without {key}"
        elif "configMapKeyRef" in ref:
            key = ref["configMapKeyRef"]
            env[var["name"]] = configmaps[key["name"]][key["key"]]
        else:
            env[var["name"]] = fields[ref["fieldRef"]["fieldPath"]]
    return env


def mounts(container: dict[str, Any]) -> dict[str, str]:
    return {m["mountPath"]: m["name"] for m in container.get("volumeMounts", [])}


# -- the campaign, as the tests play it ---------------------------------------------------


class Campaign:
    """The rendered manifests, a temporary checkout with stub scripts, and the campaign
    volume as a temporary folder."""

    def __init__(self, tmp: Path) -> None:
        self.docs = render("campaign.yaml")
        self.merge_docs = render("merge.yaml")
        self.configmap = one(self.docs, "ConfigMap", "benchmark-campaign")["data"]
        self.job = one(self.docs, "Job", "benchmark-shards")
        self.merge_job = one(self.merge_docs, "Job", "benchmark-merge")
        self.pod = self.job["spec"]["template"]["spec"]
        [self.shard] = self.pod["containers"]
        [self.merger] = self.merge_job["spec"]["template"]["spec"]["containers"]
        self.checkout = tmp / "checkout"
        ci = self.checkout / "scripts" / "ci"
        ci.mkdir(parents=True)
        for name in ("shard.sh", "merge.sh"):
            (ci / name).write_text(STUB)
            (ci / name).chmod(0o755)
        self.head = commit_all(self.checkout, "stub")
        # CAMPAIGN_DIR lies on the runs volume; the test's volume is a temporary folder.
        volume = PurePosixPath(next(p for p, v in mounts(self.shard).items() if v == "runs"))
        campaign = PurePosixPath(self.configmap["CAMPAIGN_DIR"])
        assert campaign.is_relative_to(volume), (campaign, volume)
        self.volume = tmp / "volume"
        self.dir = self.volume / campaign.relative_to(volume)
        self.configmaps = {"benchmark-campaign": {**self.configmap,
                                                  "CAMPAIGN_DIR": str(self.dir)}}

    def run(self, container: dict[str, Any], *, pod: str,
            index: int | None = None) -> tuple[dict[str, str], subprocess.CompletedProcess[str]]:
        """Runs the container's command; the stub script's environment, and the process."""
        env = pod_env(container, self.configmaps, pod=pod, job=self.job["metadata"]["name"],
                      index=index)
        argv = [kubelet_expand(a, env) for a in [*container["command"],
                                                 *container.get("args", [])]]
        base = {k: os.environ[k] for k in ("PATH", "HOME") if k in os.environ}
        proc = subprocess.run(argv, cwd=self.checkout, env={**base, **env},
                              capture_output=True, text=True, timeout=30)
        given = dict(e.split("=", 1) for e in proc.stdout.split("\0") if "=" in e)
        return given, proc

    def shard_pod(self, index: int, pod: str) -> dict[str, str]:
        given, proc = self.run(self.shard, pod=pod, index=index)
        assert proc.returncode == 0, proc.stderr
        return given


def finished(root: str | Path) -> None:
    """A run root as the runner leaves it (its manifest written)."""
    Path(root).mkdir(parents=True, exist_ok=True)
    (Path(root) / "run_manifest.json").write_text("{}")


def wrapper(container: dict[str, Any]) -> str:
    assert container["command"][:2] == ["bash", "-c"]
    return str(container["command"][2])


# -- the tests ------------------------------------------------------------------------------


def test_the_pods_run_the_workflows_scripts(tmp_path: Path) -> None:
    c = Campaign(tmp_path)
    wf = load()
    # the workflow's shard and merge jobs run exactly these scripts
    step(wf, "shard", "scripts/ci/shard.sh")
    step(wf, "merge", "scripts/ci/merge.sh")
    for container, script in ((c.shard, "scripts/ci/shard.sh"), (c.merger, "scripts/ci/merge.sh")):
        assert wrapper(container).strip().splitlines()[-1] == f"exec {script}"
        assert os.access(ROOT / script, os.X_OK)
        assert container["image"] == IMAGE
        # the image's checkout, where the scripts are (deploy/kubernetes/Dockerfile)
        workdir = re.findall(r"^WORKDIR\s+(\S+)", (DEPLOY / "Dockerfile").read_text(), re.M)
        assert container["workingDir"] == workdir[-1]
    # ... and reach them: the stubs print what they were given
    given, _ = c.run(c.shard, pod="benchmark-shards-0-aaaaa", index=0)
    assert given["SHARD"] == f"1/{SHARDS}"
    given, _ = c.run(c.merger, pod="benchmark-merge-bbbbb")
    assert "SHARDS_DIR" in given


def test_the_pod_gives_the_script_what_the_workflow_gives_it(tmp_path: Path) -> None:
    c = Campaign(tmp_path)
    wf = load()
    defaults = input_defaults(wf)
    given = c.shard_pod(0, "benchmark-shards-0-aaaaa")
    shard_env = step(wf, "shard", "scripts/ci/shard.sh")["env"]
    checked = []
    for name, value in shard_env.items():
        assert name in given, f"the shard pod does not give {name}"
        m = re.fullmatch(r"\$\{\{\s*inputs\.(\w+)\s*\}\}", str(value))
        if m:  # an input: its default
            assert given[name] == defaults[m.group(1)], name
            checked.append(name)
        elif "secrets" in str(value):  # a secret: from the Secret
            assert given[name] == SECRETS[name], name
            checked.append(name)
    assert {"BENCHMARK", "AGENT", "SOLVE_MODEL", "WORKERS", "BUDGET_USD", "UNKNOWN_COST_USD",
            "IMAGE_CEILING_GB", "KEY_ENV", "DRY_RUN", "AGENT_KEY",
            "HARNESS_CAMPAIGN_URL"} <= set(checked)
    # the workflow's agent step, with agent_repo empty: this checkout, pinned at its HEAD
    assert defaults["agent_repo"] == ""
    assert given["AGENT_REPO_DIR"] == "."
    assert given["AGENT_REF"] == c.head
    assert given["HARNESS_HOST_ID"] == "benchmark-shards-0-aaaaa"  # the pod, not the node
    # the ConfigMap holds nothing the scripts are not given by the workflow (but the
    # wrappers' campaign folder)
    merge_env = step(wf, "merge", "scripts/ci/merge.sh")["env"]
    assert set(c.configmap) - set(shard_env) - set(merge_env) == {"CAMPAIGN_DIR"}
    # the merge pod: the merge step's inputs, with their defaults
    merged, _ = c.run(c.merger, pod="benchmark-merge-bbbbb")
    for name, value in merge_env.items():
        assert name in merged, f"the merge pod does not give {name}"
        m = re.fullmatch(r"\$\{\{\s*inputs\.(\w+)\s*\}\}", str(value))
        if m:
            assert merged[name] == defaults[m.group(1)], name


def test_each_index_is_its_shard_and_a_retried_pod_resumes_the_dead_one(tmp_path: Path) -> None:
    c = Campaign(tmp_path)
    spec = c.job["spec"]
    assert spec["completionMode"] == "Indexed"
    assert spec["completions"] == spec["parallelism"] == SHARDS
    assert spec["backoffLimitPerIndex"] >= 1 and c.pod["restartPolicy"] == "Never"
    # the Job's pod names end in a random suffix: here in the reverse of their start order
    first = {}
    for index in range(SHARDS):
        given = c.shard_pod(index, f"benchmark-shards-{index}-zq8x1")
        assert given["SHARD"] == f"{index + 1}/{SHARDS}"
        assert given["CUSTODY_IDENTITY"] == f"k8s:benchmark-shards/shard-{index + 1}-of-{SHARDS}"
        assert Path(given["RUN_ROOT"]).parent == c.dir / f"shard-{index + 1}"
        assert given["RUN_ROOT"].endswith(f"-benchmark-shards-{index}-zq8x1")
        assert given["RESUME_FROM_DIR"] == ""  # nothing ran before
        first[index] = given
    finished(first[1]["RUN_ROOT"])
    # index 1's pod failed: its replacement resumes it, under the same custody identity
    second = c.shard_pod(1, "benchmark-shards-1-m4k2p")
    assert second["RESUME_FROM_DIR"] == first[1]["RUN_ROOT"]
    assert second["RUN_ROOT"] not in (first[1]["RUN_ROOT"], "")
    assert second["CUSTODY_IDENTITY"] == first[1]["CUSTODY_IDENTITY"]
    assert second["SHARD"] == first[1]["SHARD"]
    # the second died before its manifest: the third resumes the latest that has one, and
    # its own run root comes after both
    Path(second["RUN_ROOT"]).mkdir(parents=True)
    third = c.shard_pod(1, "benchmark-shards-1-g7w3d")
    assert third["RESUME_FROM_DIR"] == first[1]["RUN_ROOT"]
    order = sorted(p.name for p in (c.dir / "shard-2").iterdir())
    assert order == [Path(first[1]["RUN_ROOT"]).name, Path(second["RUN_ROOT"]).name]
    assert Path(third["RUN_ROOT"]).name > order[-1]
    finished(third["RUN_ROOT"])
    assert c.shard_pod(1, "benchmark-shards-1-a9c5t")["RESUME_FROM_DIR"] == third["RUN_ROOT"]
    # another index's roots are not this one's
    assert c.shard_pod(2, "benchmark-shards-2-b6n0e")["RESUME_FROM_DIR"] == ""


def test_a_refusal_fails_its_index_and_other_failures_are_retried(tmp_path: Path) -> None:
    c = Campaign(tmp_path)

    def action(exit_code: int, conditions: tuple[str, ...] = ()) -> str:
        """The Job controller's rule for a failed pod (the first rule that matches)."""
        for rule in c.job["spec"]["podFailurePolicy"]["rules"]:
            codes = rule.get("onExitCodes")
            if codes and codes.get("containerName", "shard") == "shard" and \
                    (exit_code in codes["values"]) == (codes["operator"] == "In"):
                return str(rule["action"])
            if any(p["type"] in conditions for p in rule.get("onPodConditions", [])):
                return str(rule["action"])
        return "Count"

    assert action(2) == "FailIndex"  # a refusal: bad input, refused again
    assert action(1) == action(3) == "Count"  # infra failure, stopped: retried, counted
    assert action(137, ("DisruptionTarget",)) == "Ignore"  # evicted: retried, not counted
    # and the wrapper's own refusal exits 2: an image without its checkout's .git
    subprocess.run(["rm", "-rf", str(c.checkout / ".git")], check=True, timeout=30)
    _, proc = c.run(c.shard, pod="benchmark-shards-0-aaaaa", index=0)
    assert proc.returncode == 2
    assert "is not a git checkout" in proc.stderr


def test_the_merge_reads_each_shards_latest_run_root(tmp_path: Path) -> None:
    c = Campaign(tmp_path)
    roots = {}
    for index, pods in ((0, ["zz"]), (1, ["zz", "mm", "aa"]), (2, ["zz", "mm"])):
        for pod in pods:
            roots[(index, pod)] = c.shard_pod(index, f"benchmark-shards-{index}-{pod}")["RUN_ROOT"]
            finished(roots[(index, pod)])
    Path(roots[(1, "aa")], "run_manifest.json").unlink()  # died before its manifest
    given, proc = c.run(c.merger, pod="benchmark-merge-xyz12")
    assert proc.returncode == 0, proc.stderr
    shards_dir = Path(given["SHARDS_DIR"])
    linked = {p.name: p.resolve() for p in shards_dir.iterdir()
              if (p / "run_manifest.json").is_file()}  # what merge.sh merges
    assert linked == {"shard-1": Path(roots[(0, "zz")]).resolve(),
                      "shard-2": Path(roots[(1, "mm")]).resolve(),
                      "shard-3": Path(roots[(2, "mm")]).resolve()}
    assert shards_dir.is_relative_to(c.dir)  # on the volume: the merged run reads through it
    assert not Path(given["OUT"]).exists() and Path(given["OUT"]).is_relative_to(c.dir)
    # a second merge pod: its own links and output (`harness merge` wants a new --output)
    again, _ = c.run(c.merger, pod="benchmark-merge-abc34")
    assert again["OUT"] != given["OUT"] and again["SHARDS_DIR"] != given["SHARDS_DIR"]
    # a shard without a run root is named (merge.sh then refuses the gap)
    for root in (c.dir / "shard-3").iterdir():
        (root / "run_manifest.json").unlink()
    given, proc = c.run(c.merger, pod="benchmark-merge-def56")
    assert f"shard 3/{SHARDS} has no run root" in proc.stderr
    assert sorted(p.name for p in Path(given["SHARDS_DIR"]).iterdir()) == ["shard-1", "shard-2"]


def test_the_engine_is_the_pods_own_and_local(tmp_path: Path) -> None:
    c = Campaign(tmp_path)
    env = pod_env(c.shard, c.configmaps, pod="p", job="j", index=0)
    host = env["DOCKER_HOST"]
    [dind] = [s for s in c.pod["initContainers"] if s["name"] == "dind"]
    assert dind["restartPolicy"] == "Always"  # a sidecar: stopped when the shard is done
    assert dind["securityContext"]["privileged"] is True
    assert f"--host={host}" in dind["args"]
    # a local engine for the runner's rules: no refusal of the command agent's relay
    assert host.startswith("unix://") and remote([host]) == []
    assert relay_refusal("command", "https://openrouter.ai/api/v1", None, [host],
                         given_by="DOCKER_HOST") is None
    assert relay_refusal("command", "https://openrouter.ai/api/v1", None,
                         ["tcp://localhost:2375"], given_by="DOCKER_HOST") is not None
    # ... and local in fact: the socket, the relays' sockets (the temp folder) and the run
    # roots (host workspaces) are the same volumes at the same paths in both containers
    socket_dir = str(PurePosixPath(host.removeprefix("unix://")).parent)
    shard_mounts, dind_mounts = mounts(c.shard), mounts(dind)
    runs = next(p for p, v in shard_mounts.items() if v == "runs")
    temp = env.get("TMPDIR", "/tmp")  # the container's temp folder (Python's default)
    for path in (socket_dir, temp, runs):
        assert path in shard_mounts and dind_mounts.get(path) == shard_mounts[path], path
    volumes = {v["name"]: v for v in c.pod["volumes"]}
    assert volumes["runs"]["persistentVolumeClaim"]["claimName"] == "benchmark-runs"
    merge_volumes = c.merge_job["spec"]["template"]["spec"]["volumes"]
    assert [v["persistentVolumeClaim"]["claimName"] for v in merge_volumes] == ["benchmark-runs"]
    assert mounts(c.merger) == {runs: "runs"}
    [pvc] = render("volume.yaml")
    assert pvc["kind"] == "PersistentVolumeClaim" and pvc["metadata"]["name"] == "benchmark-runs"
    assert "ReadWriteMany" in pvc["spec"]["accessModes"]


def test_no_secret_value_is_in_the_manifests(tmp_path: Path) -> None:
    c = Campaign(tmp_path)
    texts = {p.name: p.read_text() for p in sorted(DEPLOY.iterdir()) if p.is_file()}
    assert {"campaign.yaml", "merge.yaml", "volume.yaml", "README.md"} <= set(texts)
    docs = [*c.docs, *c.merge_docs, *render("volume.yaml")]
    assert all(d["kind"] != "Secret" for d in docs)  # referred to, never written
    for name, text in texts.items():
        for value in SECRETS.values():
            assert value not in text, name
        assert not re.search(r"postgres(ql)?://[^\s\"']*:[^\s\"'@]*@", text), name  # a password
        assert not re.search(r"\bsk-[A-Za-z0-9_-]{12,}", text), name  # an API key
    secret_names = {*SECRETS, c.configmap["KEY_ENV"]}
    assert not secret_names & set(c.configmap)
    for container in (c.shard, c.merger):
        for var in container.get("env", []):
            if var["name"] in secret_names:
                assert var["valueFrom"]["secretKeyRef"]["name"] == "benchmark-campaign"
    # and the Secret's values reach the shard only as its environment
    given = c.shard_pod(0, "benchmark-shards-0-aaaaa")
    assert given["AGENT_KEY"] == SECRETS["AGENT_KEY"]
