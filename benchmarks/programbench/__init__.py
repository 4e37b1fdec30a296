"""ProgramBench adapter: tasks, instruction, gateway task body, submission, official eval.

Modules are imported on demand; importing this package is cheap (no Docker, no CLI).
"""

BENCHMARK = "programbench"
FIXTURE_ID = "testorg__calculator.abc1234"
CLEANROOM_TAG = "task_cleanroom_v6"
# Near-resolved ("almost"): at least 95% of the scored tests pass (ProgramBench's notion).
NEAR_RESOLVED_AT = 0.95
DEFAULT_TIMEOUT_SEC = 21600  # the official 6 h wall clock of the mini-SWE-agent baseline
DISABLED_TOOLS = ("claude_code_edit",)  # the solve task: benches measure one model


def programbench_version() -> str:
    """Version of the installed ``programbench`` distribution (e.g. ``1.2.5``)."""
    from importlib.metadata import version  # here: the eval's docker policy shim imports
    # this package on every docker call, and importlib.metadata is most of a cold start

    return version("programbench")
