"""Harbor task folders read as Harbor reads them, and the reward read as untrusted input
(no Docker)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from benchmarks.harbor.benchmark import image_map
from benchmarks.harbor.tasks import load_task, load_tasks
from benchmarks.harbor.verifier import MAX_REWARD_KEYS, parse_reward
from harness.core.errors import RefusalError
from harness.sandbox.images.folder import mapped_dockerfile

DATA = Path(__file__).resolve().parents[2] / "data" / "harbor"
TASKS = DATA / "tasks"


def test_the_four_task_folders_and_harbors_example_are_read() -> None:
    tasks = {t.name: t for t in load_tasks(TASKS)}
    assert sorted(tasks) == ["partial-credit", "slow-verifier", "sum-numbers", "write-greeting"]
    greeting = tasks["write-greeting"]
    # the canary line is not part of what the agent reads (Harbor strips it)
    assert greeting.instruction == "Write the line `hello, harbor` to /app/greeting.txt.\n"
    assert greeting.config.environment.memory_mb == 512 and greeting.agent_timeout_s == 120
    assert greeting.config.metadata["difficulty"] == "easy" and greeting.has_solution
    # legacy names as Harbor takes them: version, memory = "1G"
    assert tasks["sum-numbers"].config.environment.memory_mb == 1024
    assert tasks["slow-verifier"].config.verifier.timeout_sec == 3.0
    [upstream] = load_tasks(DATA / "upstream" / "hello-workdir")
    assert upstream.config.environment.workdir == "/custom-workdir"
    assert upstream.config.environment.storage_mb == 10240
    assert (DATA / "upstream" / "LICENSE").read_text().lstrip().startswith("Apache License")


def test_no_agent_timeout_in_the_task_takes_harbors_former_default(tmp_path: Path) -> None:
    task = tmp_path / "t"
    shutil.copytree(TASKS / "write-greeting", task)
    (task / "task.toml").write_text("[agent]\n")
    assert load_task(task).agent_timeout_s == 600.0


@pytest.mark.parametrize(("broken", "says"), [
    (lambda t: (t / "task.toml").write_text("[agent\n"), "task.toml is not TOML"),
    (lambda t: (t / "task.toml").write_text("[verifier]\ntimeout_sec = -1\n"),
     "task.toml verifier.timeout_sec"),
    (lambda t: (t / "task.toml").write_text('[environment]\nmemory = "lots"\n'), "memory_mb"),
    (lambda t: (t / "instruction.md").unlink(), "no instruction.md"),
    (lambda t: shutil.rmtree(t / "tests"), "no tests/test.sh"),
    (lambda t: (t / "task.toml").write_text('[verifier.env]\nKEY = "${OPENAI_API_KEY}"\n'),
     "reads ${OPENAI_API_KEY} from this machine"),
])
def test_a_broken_task_folder_is_one_line_naming_it(tmp_path: Path, broken, says: str) -> None:
    task = tmp_path / "t"
    shutil.copytree(TASKS / "write-greeting", task)
    broken(task)
    with pytest.raises(RefusalError) as err:
        load_task(task)
    text = str(err.value)
    assert says in text and str(task) in text and "\n" not in text
    assert err.value.reason == "harbor_task_invalid" and err.value.exit_code == 2


def test_a_folder_without_tasks_is_refused(tmp_path: Path) -> None:
    with pytest.raises(RefusalError, match=r"no task\.toml"):
        load_tasks(tmp_path)
    with pytest.raises(RefusalError, match="no such folder"):
        load_tasks(tmp_path / "missing")


def test_an_env_template_with_a_default_takes_the_default() -> None:
    from benchmarks.harbor.tasks import resolve_env

    assert resolve_env({"A": "${EXPECTED:-4}", "B": "x${Y:-}y"}, "w") == {"A": "4", "B": "xy"}


@pytest.mark.parametrize(("name", "raw", "want"), [
    ("reward.txt", b"1\n", ({"reward": 1.0}, None)),
    ("reward.txt", b" 0.25 ", ({"reward": 0.25}, None)),
    ("reward.json", b'{"reward": 0.5, "files": 2}', ({"reward": 0.5, "files": 2.0}, None)),
    ("reward.txt", b"", (None, "reward_empty")),
    ("reward.txt", b"nan", (None, "reward_invalid")),
    ("reward.txt", b"1e999", (None, "reward_invalid")),
    ("reward.txt", b"<script>alert(1)</script>", (None, "reward_invalid")),
    ("reward.json", b'{"reward": true}', (None, "reward_invalid")),
    ("reward.json", b'{"reward": {"nested": 1}}', (None, "reward_invalid")),
    ("reward.json", b"[1]", (None, "reward_invalid")),
    ("reward.json", b"{}", (None, "reward_invalid")),
    ("reward.json", b"\xff\xfe{", (None, "reward_invalid")),
    ("reward.json", b'{"reward": NaN}', (None, "reward_invalid")),
])
def test_a_reward_file_is_parsed_strictly(name: str, raw: bytes, want) -> None:
    assert parse_reward(name, raw) == want


def test_a_reward_with_too_many_keys_is_not_a_reward() -> None:
    many = "{" + ",".join(f'"k{i}": 1' for i in range(MAX_REWARD_KEYS + 1)) + "}"
    assert parse_reward("reward.json", many.encode()) == (None, "reward_invalid")


def test_the_image_map_rewrites_only_the_from_lines_it_names() -> None:
    text = "FROM ubuntu:24.04 AS build\nRUN echo FROM ubuntu:24.04\nfrom --platform=linux/amd64 " \
           "ubuntu:24.04\nFROM debian:12\n"
    got = mapped_dockerfile(text, {"ubuntu:24.04": "local/base:1"})
    assert got.splitlines() == ["FROM local/base:1 AS build", "RUN echo FROM ubuntu:24.04",
                                "from --platform=linux/amd64 local/base:1", "FROM debian:12"]
    assert image_map(["a=b", "c:1=d/e:2"]) == {"a": "b", "c:1": "d/e:2"}
    with pytest.raises(RefusalError, match="write it as IMAGE=LOCAL_IMAGE"):
        image_map(["ubuntu"])


def test_a_folder_with_neither_dockerfile_nor_image_or_with_steps_is_refused(tmp_path) -> None:
    task = tmp_path / "t"
    shutil.copytree(TASKS / "write-greeting", task)
    (task / "environment" / "Dockerfile").unlink()
    with pytest.raises(RefusalError, match="no environment/Dockerfile"):
        load_task(task)
    (task / "task.toml").write_text('[environment]\ndocker_image = "x:1"\n\n[[steps]]\nname = "a"\n')
    with pytest.raises(RefusalError, match="multi-step"):
        load_task(task)


@pytest.mark.parametrize(("args", "says"), [
    ((), "benchmarks/harbor needs --harbor-tasks DIR"),
    (("--harbor-tasks", "no/such/folder"), "no such folder"),
    (("--harbor-tasks", str(TASKS), "--harbor-image-map", "ubuntu"), "IMAGE=LOCAL_IMAGE"),
])
def test_the_command_line_refuses_bad_harbor_input_in_one_line(tmp_path, args, says) -> None:
    from tests.support.suite import run_pytest

    run = run_pytest("benchmarks/harbor", tmp_path / "run", *args, timeout=120)
    assert run.rc == 2, run.out
    lines = [line for line in run.out.splitlines() if says in line]
    assert len(lines) == 1 and "Traceback" not in run.out, run.out


def test_a_session_over_every_benchmark_collects_no_harbor_item_without_tasks() -> None:
    from tests.support.suite import FORK_SERVER, QUIET_PLUGINS, REPO_ROOT, run_env

    done = FORK_SERVER.run([*QUIET_PLUGINS, "--collect-only", "-q"], REPO_ROOT, run_env(), 120)
    assert done.returncode == 0, done.output[-2000:]
    assert "benchmarks/harbor" not in done.output


@pytest.mark.parametrize(("broken", "says"), [
    (lambda t: ((t / "instruction.md").unlink(), (t / "instruction.md").symlink_to(
        "/etc/hostname")), "instruction.md is a symbolic link"),
    (lambda t: (t / "instruction.md").write_bytes(b"\xff\xfe bad"), "instruction.md is not UTF-8"),
    (lambda t: (t / "task.toml").write_text("[agent]\ntimeout_sec = inf\n"), "timeout_sec"),
    (lambda t: (t / "task.toml").write_text("[environment]\ncpus = 0.0001\n"), "cpus"),
])
def test_a_task_folder_that_would_mislead_is_refused_at_load(tmp_path, broken, says) -> None:
    task = tmp_path / "t"
    shutil.copytree(TASKS / "write-greeting", task)
    broken(task)
    with pytest.raises(RefusalError) as err:
        load_task(task)
    assert says in str(err.value), str(err.value)


def test_a_task_folder_named_past_an_instance_id_is_refused(tmp_path) -> None:
    task = tmp_path / ("x" * 65)
    shutil.copytree(TASKS / "write-greeting", task)
    with pytest.raises(RefusalError, match="rename the folder"):
        load_task(task)


def test_tags_that_are_not_a_list_are_no_keywords(tmp_path) -> None:
    from benchmarks.harbor.benchmark import HarborBenchmark

    task = tmp_path / "t"
    shutil.copytree(TASKS / "write-greeting", task)
    (task / "task.toml").write_text('[metadata]\ntags = "abc"\n')

    class Config:
        def getoption(self, name: str) -> str:
            return str(task)

    [spec] = HarborBenchmark().instances(Config())
    assert list(spec.keywords) == []
