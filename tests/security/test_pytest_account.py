"""The host's check of a results file against pytest's own account (issue 40, class 3): a
file with more passes than pytest counted, or passes and no account under the eval call's
key, is not scored. The separated judge keeps the program from killing pytest; this check
stays as the second wall, and is tested here without Docker."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from benchmarks.programbench.official_eval import (
    BuildNeedsRoot,
    VerdictMismatch,
    check_build_user,
    check_pytest_account,
)

KEY = "0123456789abcdef0123456789abcdef"
XML = ('<testsuites><testsuite><testcase classname="t" name="a"/>'
       '<testcase classname="t" name="b"/><testcase classname="t" name="c">'
       '<failure message="x"/></testcase></testsuite></testsuites>')


def _result(account: str) -> SimpleNamespace:
    return SimpleNamespace(log=[
        {"step": "run_tests", "branch": "b1", "output": f"3 passed\n{account}\n"},
        {"step": "results_read", "branch": "b1", "output": XML},
    ])


@pytest.mark.parametrize("account", [f"HX-PYTEST-ACCOUNT {KEY} passed=2",
                                     f"HX-PYTEST-ACCOUNT {KEY} passed=3"])
def test_a_file_within_pytests_account_is_scored(account: str) -> None:
    check_pytest_account(_result(account), KEY)


def test_the_account_names_the_test_plugins_pytest_resolved() -> None:
    """Issue 45: the grader's plugins (rerunfailures among them) and their versions go into
    the row's eval details; a line without them (an older guard) still counts."""
    line = (f"HX-PYTEST-ACCOUNT {KEY} passed=2 plugins=pytest==8.3.4,"
            "pytest-rerunfailures==16.6.1,pytest-timeout==2.3.1")
    assert check_pytest_account(_result(line), KEY) == {
        "pytest": "8.3.4", "pytest-rerunfailures": "16.6.1", "pytest-timeout": "2.3.1"}
    assert check_pytest_account(_result(f"HX-PYTEST-ACCOUNT {KEY} passed=2 plugins=-"),
                                KEY) == {}
    with pytest.raises(VerdictMismatch):  # the plugins never excuse a count past pytest's
        check_pytest_account(_result(f"HX-PYTEST-ACCOUNT {KEY} passed=1 plugins=pytest==8"),
                             KEY)


@pytest.mark.parametrize("account", [
    f"HX-PYTEST-ACCOUNT {KEY} passed=1",  # the file gained a pass after pytest wrote it
    "",  # pytest never gave its account (killed)
    "HX-PYTEST-ACCOUNT - passed=2",  # an account without the call's key: forged
    f"HX-PYTEST-ACCOUNT {KEY[::-1]} passed=2",
])
def test_a_file_past_pytests_account_is_refused(account: str) -> None:
    with pytest.raises(VerdictMismatch, match="changed after pytest wrote it"):
        check_pytest_account(_result(account), KEY)


def _built(error_code: str | None, output: str) -> SimpleNamespace:
    return SimpleNamespace(error_code=error_code, log=[{"step": "compile", "output": output}])


def test_a_failed_build_denied_a_write_is_refused_by_name() -> None:
    with pytest.raises(BuildNeedsRoot, match="'/usr/local/bin/x': Permission denied"):
        check_build_user(_built("compile_failed", "install: cannot create regular file "
                                                  "'/usr/local/bin/x': Permission denied\n"))


@pytest.mark.parametrize(("code", "output"), [
    ("compile_failed", "error[E0308]: mismatched types\n"),  # an ordinary failure: its 0
    (None, "mkdir: cannot create directory '/etc/x': Permission denied\n"),  # built anyway
])
def test_other_builds_keep_the_official_verdict(code: str | None, output: str) -> None:
    check_build_user(_built(code, output))
