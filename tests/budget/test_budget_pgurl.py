"""Campaign URLs (issue 27, point 2): parsed without psycopg2, shown without the password."""

from __future__ import annotations

import argparse

import pytest

from harness.budget.pgurl import check_option, is_campaign_url, parse


def test_the_campaign_name_is_ours_and_never_reaches_libpq() -> None:
    url = parse("postgresql://ci@db.example:5433/harness?sslmode=require&campaign=pb-2026")
    assert url.name == "pb-2026" and not url.has_password
    assert url.dsn == "postgresql://ci@db.example:5433/harness?sslmode=require"
    assert (
        url.redacted == "postgresql://ci@db.example:5433/harness?sslmode=require&campaign=pb-2026"
    )
    assert url.cli_arg == url.redacted
    assert parse("postgres:///harness").name == "default"
    assert (
        parse("postgresql://h1:5432,h2:5433/db?campaign=x").dsn == "postgresql://h1:5432,h2:5433/db"
    )


@pytest.mark.parametrize(
    ("given", "password"),
    [
        ("postgresql://ci:s3cret-pw@db/harness?campaign=x", "s3cret-pw"),
        ("postgresql://ci:p%40ss%2Fword@db/harness", "p@ss/word"),
        ("postgresql://ci@db/harness?password=s3cret-pw&campaign=x", "s3cret-pw"),
        ("postgresql://ci:a@b@db/harness", "a@b"),
    ],
)
def test_a_password_is_redacted_everywhere_it_can_be(given: str, password: str) -> None:
    url = parse(given)
    assert url.has_password
    assert password not in url.redacted and "***" in url.redacted
    assert password not in repr(url) and password not in str(url)
    assert password in url.dsn or password.replace("@", "%40").replace("/", "%2F") in url.dsn
    assert url.scrub(f"error near {password}!") == "error near ***!"
    encoded = given.split("//", 1)[1]
    assert password not in url.scrub(encoded)


def test_env_reads_the_url_from_the_environment() -> None:
    url = parse("env:CAMPAIGN", {"CAMPAIGN": "postgresql://ci:pw-1234567@db/h?campaign=a\n"})
    assert url.env == "CAMPAIGN" and url.name == "a" and url.has_password
    assert url.cli_arg == "env:CAMPAIGN" and "pw-1234567" not in url.redacted
    with pytest.raises(ValueError, match=r"\$NOPE is not set"):
        parse("env:NOPE", {})
    with pytest.raises(ValueError) as bad:
        parse("env:CAMPAIGN", {"CAMPAIGN": "mysql://u:hunter2-secret@h/db"})
    assert "hunter2-secret" not in str(bad.value) and "$CAMPAIGN" in str(bad.value)


def test_malformed_urls_are_refused_naming_the_form() -> None:
    for bad in ("postgresql://h/db?campaign=no spaces", "postgresql://h/db#frag"):
        with pytest.raises(ValueError):
            parse(bad)
    with pytest.raises(ValueError) as refused:
        parse("postgresql://u:hunter2-secret@h/db#x")
    assert "hunter2-secret" not in str(refused.value)
    assert is_campaign_url("postgresql://h/db") and is_campaign_url("env:CAMPAIGN_URL")
    assert not is_campaign_url("campaign.json") and not is_campaign_url("env:not a name")


def test_the_run_option_refuses_a_password_on_the_command_line() -> None:
    assert check_option("postgresql://ci@db/h?campaign=x") == "postgresql://ci@db/h?campaign=x"
    assert check_option("env:CAMPAIGN_URL") == "env:CAMPAIGN_URL"  # read when the run starts
    with pytest.raises(argparse.ArgumentTypeError) as refused:
        check_option("postgresql://ci:s3cret-pw@db/h")
    message = str(refused.value)
    assert "s3cret-pw" not in message and "PGPASSWORD" in message and "env:NAME" in message
    with pytest.raises(argparse.ArgumentTypeError):
        check_option("postgresql://db/h?password=s3cret-pw")
    with pytest.raises(argparse.ArgumentTypeError):
        check_option("env:bad name")
