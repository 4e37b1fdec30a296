"""The Harbor task format end to end in real Docker: each task folder's image built from
its Dockerfile, the agent in it, the task's own verifier, the reward as Harbor reads it."""

from __future__ import annotations

import shutil

import pytest

from tests.benchmarks.harbor.harbor_support import (
    TASKS,
    UPSTREAM,
    no_containers,
    rows,
    run_harbor,
)

pytestmark = pytest.mark.docker


def test_the_oracle_on_the_four_task_folders_scores_as_harbor_counts(tmp_path) -> None:
    run = run_harbor(tmp_path / "oracle", "--agent", "oracle")
    assert run.rc == 0, run.out  # a run that completed, whatever its scores
    got = rows(run)
    solved, wrong = got["write-greeting"], got["sum-numbers"]
    assert (solved["outcome"], solved["score"], solved["resolved"]) == ("scored", 1.0, True)
    # the oracle's solution is wrong: the verifier's 0 is a score, not a failure
    assert (wrong["outcome"], wrong["score"], wrong["reason_code"]) == ("scored", 0.0,
                                                                        "unresolved")
    # a verifier past its timeout_sec is the agent's failure (Harbor: an errored trial that
    # counts 0 and is not retried), never an infrastructure retry
    slow = got["slow-verifier"]
    assert (slow["outcome"], slow["reason_code"], slow["official_eval_status"]) == (
        "agent_failed", "verifier_timeout", "timeout")
    assert [r["instance_id"] for r in run.rows].count("slow-verifier") == 1
    part = got["partial-credit"]  # reward.json: the "reward" key is the score
    assert part["score"] == 0.75 and part["resolved"] is False
    assert part["details"]["harbor"]["rewards"] == {"reward": 0.75, "files": 3.0}
    assert part["details"]["harbor"]["reward_file"] == "reward.json"
    # Harbor's Mean: an errored trial counts 0
    assert run.manifest["mean_score"] == pytest.approx((1.0 + 0.0 + 0.0 + 0.75) / 4)
    stdout = run.root / solved["output_paths"]["verifier_stdout"]
    assert stdout.is_file()
    assert "task_body" not in part["output_paths"]  # no agent server: no task for one
    no_containers(run.manifest["run_id"])


def test_harbors_own_example_task_is_parsed_and_run(tmp_path) -> None:
    run = run_harbor(tmp_path / "upstream", "--agent", "oracle", tasks=UPSTREAM)
    assert run.rc == 0, run.out
    row = rows(run)["hello-workdir"]
    # its solution writes `pwd` where it runs: the task.toml's workdir, as Harbor runs it
    assert row["score"] == 1.0 and row["details"]["harbor"]["network_mode"] == "public"
    assert row["details"]["harbor"]["sandbox_network"] == "none"


def test_nop_and_command_agents(tmp_path) -> None:
    nop = run_harbor(tmp_path / "nop", "--agent", "nop", "-k", "write-greeting")
    assert rows(nop)["write-greeting"]["score"] == 0.0, nop.out
    cmd = run_harbor(tmp_path / "cmd", "--agent", "command", "--agent-command",
                     "echo 'hello, harbor' > /app/greeting.txt", "-k", "write-greeting")
    assert cmd.rc == 0, cmd.out
    assert rows(cmd)["write-greeting"]["score"] == 1.0


def test_what_the_agent_leaves_for_the_verifier_is_not_a_reward(tmp_path) -> None:
    """Attack: a root agent writes a reward and its own /tests before the verifier runs; an
    unprivileged one keeps writing rewards from the background while the verifier runs."""
    plant = ("mkdir -p /logs/verifier /tests && echo 1 > /logs/verifier/reward.txt && "
             "echo '{\"reward\": 1}' > /logs/verifier/reward.json && "
             "printf '#!/bin/sh\\necho 1 > /logs/verifier/reward.txt\\n' > /tests/test.sh && "
             "chmod +x /tests/test.sh")
    root = run_harbor(tmp_path / "root", "--agent", "command", "--agent-command", plant,
                      "-k", "write-greeting")
    row = rows(root)["write-greeting"]
    assert (row["outcome"], row["score"]) == ("scored", 0.0), root.out
    writer = ("(while true; do echo 1 > /logs/verifier/reward.txt; "
              "echo '{\"reward\": 1}' > /logs/verifier/reward.json; sleep 0.01; done) "
              ">/dev/null 2>&1 & sleep 0.2")
    bg = run_harbor(tmp_path / "bg", "--agent", "command", "--agent-command", writer,
                    "-k", "partial-credit")
    row = rows(bg)["partial-credit"]
    assert (row["outcome"], row["score"]) == ("scored", 0.0), bg.out
    assert row["details"]["harbor"]["rewards"] == {"reward": 0.0, "files": 0.0}


def test_what_an_attack_review_found_is_not_a_reward(tmp_path) -> None:
    """Found by a review of this path: an unprivileged agent's json.py in the verifier's
    working directory; a root agent's reward writer left running; a root agent's no-op rm
    keeping its planted reward; a verifier that writes a score past 1."""
    plant = ("cat > json.py <<'PY'\ndef dump(obj, f):\n    f.write('{\"reward\": 1.0}')\nPY")
    run = run_harbor(tmp_path / "json", "--agent", "command", "--agent-command", plant,
                     "-k", "partial-credit")
    assert (rows(run)["partial-credit"]["score"], run.rc) == (0.0, 0), run.out
    writer = ("(while true; do mkdir -p /logs/verifier; echo '{\"reward\": 1}' > "
              "/logs/verifier/reward.json; sleep 0.005; done) >/dev/null 2>&1 & sleep 0.2")
    run = run_harbor(tmp_path / "bg", "--agent", "command", "--agent-command", writer,
                     "-k", "write-greeting")
    assert rows(run)["write-greeting"]["score"] == 0.0, run.out
    fake_rm = ("mkdir -p /logs/verifier && echo '{\"reward\": 1}' > /logs/verifier/reward.json"
               " && printf '#!/bin/sh\\nexit 0\\n' > /tmp/rm && chmod +x /tmp/rm && "
               "cp /tmp/rm /usr/bin/rm")
    run = run_harbor(tmp_path / "rm", "--agent", "command", "--agent-command", fake_rm,
                     "-k", "write-greeting")
    row = rows(run)["write-greeting"]
    assert (row["outcome"], row["reason_code"]) == ("agent_failed", "verifier_stage_failed")
    assert row["score"] is None
    # a root agent whose writer outlives a /bin/sh it made a no-op: the engine's own list of
    # the sandbox's processes says the writer is still there
    blind = ("(while true; do mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt; "
             "sleep 0.005; done) >/dev/null 2>&1 & sleep 0.2; cp /bin/true /tmp/t; "
             "mv -f /tmp/t /bin/sh; mv -f /bin/sh /usr/bin/sh 2>/dev/null; exit 0")
    run = run_harbor(tmp_path / "blind", "--agent", "command", "--agent-command", blind,
                     "-k", "write-greeting")
    row = rows(run)["write-greeting"]
    assert (row["outcome"], row["reason_code"]) == ("agent_failed", "agent_processes_survived")
    bomb = "touch a.txt; (b(){ b & b & wait; }; b) >/dev/null 2>&1 & sleep 3"
    run = run_harbor(tmp_path / "bomb", "--agent", "command", "--agent-command", bomb,
                     "-k", "partial-credit")  # a fork bomb left behind: stopped, then judged
    assert rows(run)["partial-credit"]["score"] == 0.25, run.out
    tasks = tmp_path / "tasks"
    shutil.copytree(TASKS / "write-greeting", tasks / "big-reward")
    (tasks / "big-reward" / "tests" / "test.sh").write_text(
        "#!/bin/bash\necho 1.7e308 > /logs/verifier/reward.txt\n")
    run = run_harbor(tmp_path / "big", "--agent", "oracle", tasks=tasks)
    row = rows(run)["big-reward"]
    assert (row["outcome"], row["reason_code"]) == ("agent_failed", "reward_out_of_range")
    no_containers(run.manifest["run_id"])
