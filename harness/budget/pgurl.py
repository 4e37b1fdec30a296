"""``--campaign-url``: where a PostgreSQL campaign lives, and how it is shown without its
password.

Accepted forms:

* ``postgresql://[user[:password]@][host][:port][/dbname][?param=value&...]`` (or
  ``postgres://``), libpq's URI syntax: libpq also reads the password from ``PGPASSWORD``,
  ``~/.pgpass`` (``PGPASSFILE``) or a service file (``?service=NAME``, ``PGSERVICEFILE``),
  so the URL need not hold one. One parameter is ours, not libpq's: ``campaign=NAME``, the
  campaign's name in that database (default ``default``); it is removed before libpq sees
  the URL.
* ``env:NAME``: the URL is the value of the environment variable ``NAME`` (a CI secret).
  The URL then never reaches a command line, so it may hold a password.

A run refuses a password written on its command line (:func:`check_option`): the pytest
command line is recorded in the run manifest (``argv``) and visible to every local user in
``ps``. Everything recorded or printed uses :attr:`CampaignUrl.redacted` (the password
replaced by ``***``); :meth:`CampaignUrl.scrub` takes the password out of any error text.
Pure: no I/O besides reading the environment, no psycopg2.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import quote, unquote

SCHEMES = ("postgresql://", "postgres://")
ENV_PREFIX = "env:"
CAMPAIGN_PARAM = "campaign"
DEFAULT_CAMPAIGN = "default"
MASK = "***"
SECRET_PARAMS = frozenset({"password", "sslpassword"})
_NAME_RE = re.compile(r"^[A-Za-z0-9._-]{1,128}$")
_ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_URL_RE = re.compile(r"^(postgres(?:ql)?)://([^/?#]*)([^?#]*)(?:\?([^#]*))?$")
FIX = (
    "keep the password out of the URL: PGPASSWORD, ~/.pgpass or a service file "
    "(?service=NAME), or pass --campaign-url env:NAME with the URL in $NAME"
)


def is_campaign_url(value: str) -> bool:
    """True for a PostgreSQL URL or an ``env:NAME`` reference (not a file path)."""
    return value.startswith(SCHEMES) or (
        value.startswith(ENV_PREFIX) and _ENV_RE.match(value[len(ENV_PREFIX) :]) is not None
    )


@dataclass(frozen=True)
class CampaignUrl:
    """A parsed campaign URL: ``dsn`` for libpq (holds the password, never shown),
    ``name`` of the campaign, ``redacted`` to show and record, ``env`` when it came from
    ``env:NAME``."""

    dsn: str = field(repr=False)
    name: str
    redacted: str
    env: str | None = None
    secrets: tuple[str, ...] = field(default=(), repr=False)

    @property
    def has_password(self) -> bool:
        return bool(self.secrets)

    @property
    def cli_arg(self) -> str:
        """What to pass again on a command line: ``env:NAME``, else the redacted URL (the
        same URL when it holds no password)."""
        return f"{ENV_PREFIX}{self.env}" if self.env else self.redacted

    def scrub(self, text: str) -> str:
        """``text`` with every form of the password replaced by ``***``."""
        for secret in sorted(self.secrets, key=len, reverse=True):
            text = text.replace(secret, MASK)
        return text

    def __str__(self) -> str:
        return self.redacted


def parse(value: str, environ: Mapping[str, str] | None = None) -> CampaignUrl:
    """Parse ``value`` (a URL or ``env:NAME``); ValueError with a one-line fix when unusable.
    The error never contains the password."""
    env = None
    if value.startswith(ENV_PREFIX):
        env = value[len(ENV_PREFIX) :]
        if not _ENV_RE.match(env):
            raise ValueError(
                f"campaign URL {value!r}: env:NAME needs an environment "
                "variable name (letters, digits, _)"
            )
        environ = os.environ if environ is None else environ
        found = environ.get(env)
        if not found:
            raise ValueError(
                f"campaign URL {value}: ${env} is not set (export the "
                "campaign's postgresql:// URL in it)"
            )
        value = found.strip()
    url = _parse_url(value, where=f"${env}" if env else None)
    return CampaignUrl(url.dsn, url.name, url.redacted, env, url.secrets)


def _parse_url(value: str, *, where: str | None) -> CampaignUrl:
    label = where or "campaign URL"
    m = _URL_RE.match(value)
    if m is None:
        text = _rough_redact(value) if where is None else "(its value)"
        raise ValueError(
            f"{label} {text} is not a postgresql://[user@]host[:port]/dbname[?campaign=NAME] URL"
        )
    scheme, netloc, path, query = m.group(1), m.group(2), m.group(3), m.group(4)
    secrets: list[str] = []
    userinfo, at, hosts = netloc.rpartition("@")
    shown_netloc = netloc
    if at:
        user, colon, password = userinfo.partition(":")
        if colon:
            secrets += [password, unquote(password)]
            shown_netloc = f"{user}:{MASK}@{hosts}"
    kept: list[str] = []
    shown: list[str] = []
    name = DEFAULT_CAMPAIGN
    for part in (query or "").split("&"):
        if not part:
            continue
        key, _, val = part.partition("=")
        if unquote(key) == CAMPAIGN_PARAM:
            name = unquote(val)
            continue
        kept.append(part)
        if unquote(key) in SECRET_PARAMS and val:
            secrets += [val, unquote(val)]
            shown.append(f"{key}={MASK}")
        else:
            shown.append(part)
    if not _NAME_RE.match(name):
        raise ValueError(
            f"{label}: campaign={name!r} must be 1 to 128 letters, digits, '.', '_' or '-'"
        )
    base = f"{scheme}://{netloc}{path}"
    dsn = base + ("?" + "&".join(kept) if kept else "")
    shown.append(f"{CAMPAIGN_PARAM}={quote(name)}")
    redacted = f"{scheme}://{shown_netloc}{path}?" + "&".join(shown)
    return CampaignUrl(dsn, name, redacted, None, tuple(s for s in secrets if s))


def _rough_redact(value: str) -> str:
    """A malformed URL shown without what may be a password (``user:***@``)."""
    return re.sub(r"(//[^:/@]*:)[^@]*@", rf"\1{MASK}@", value)


def check_option(value: str) -> str:
    """argparse ``type`` of ``--campaign-url``: the value is kept as given (``env:NAME`` is
    read when the run starts); a URL that does not parse, or holds a password, is refused
    before anything is recorded."""
    if value.startswith(ENV_PREFIX):
        if not _ENV_RE.match(value[len(ENV_PREFIX) :]):
            raise argparse.ArgumentTypeError(f"{value!r}: env:NAME needs a variable name")
        return value
    try:
        url = parse(value, {})
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if url.has_password:
        raise argparse.ArgumentTypeError(
            f"{url.redacted} holds a password, which the run would record with its command "
            f"line (run_manifest.json argv) and show in ps: {FIX}"
        )
    return value
