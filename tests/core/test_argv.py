from harness.core.argv import without_options


def test_options_and_their_values_are_dropped_in_both_spellings() -> None:
    kept, found = without_options(
        ["-x", "--run-root", "r", "--resume-from=old", "-k", "a", "--run-rootx", "v"],
        {"--run-root", "--resume-from"})
    assert kept == ["-x", "-k", "a", "--run-rootx", "v"]
    assert found == {"--run-root", "--resume-from"}
