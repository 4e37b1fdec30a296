"""Image recipes: a debootstrap base and Dockerfile layers, each tagged by content hash.

Pure data (no Docker): :mod:`harness.sandbox.images.build` builds them through
:mod:`harness.sandbox.images.builders`, which both import from here.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

# Bump to rebuild every image (e.g. when the builder itself changes what it produces).
RECIPE_SCHEMA = "harness.image.v1"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

BASE_PACKAGES: tuple[str, ...] = (
    "bash",
    "coreutils",
    "util-linux",  # setsid, flock, kill(1): essential in Debian, listed to be explicit
    "procps",
    "tar",
    "gzip",
    "xz-utils",
    "sed",
    "grep",
    "findutils",
    "git",
    "ca-certificates",
    "netbase",
    "python3",
    "python3-pytest",
    "python3-pytest-xdist",
    "python3-pytest-timeout",
    "strace",
    "iproute2",
)

AGENT_USER = "agent"
AGENT_UID = 1000
WORKSPACE = "/workspace"

BASE_SETUP: tuple[str, ...] = (
    f"useradd --create-home --uid {AGENT_UID} --user-group --shell /bin/bash {AGENT_USER}",
    f"install -d -o {AGENT_USER} -g {AGENT_USER} -m 0755 {WORKSPACE}",
)


def _sha256(data: object) -> str:
    blob = json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()


@dataclass(frozen=True)
class BaseRecipe:
    """A debootstrap rootfs imported as an image (``docker import``)."""

    name: str = "harness/base"
    suite: str = "bookworm"
    variant: str = "minbase"
    include: tuple[str, ...] = BASE_PACKAGES
    mirror: str = "http://deb.debian.org/debian"
    setup: tuple[str, ...] = ()  # shell commands run with chroot after debootstrap
    env: tuple[tuple[str, str], ...] = (("PATH", DEFAULT_PATH), ("LANG", "C.UTF-8"))

    def content_hash(self) -> str:
        return _sha256(
            {
                "schema": RECIPE_SCHEMA,
                "kind": "debootstrap",
                "suite": self.suite,
                "variant": self.variant,
                "include": sorted(set(self.include)),
                "mirror": self.mirror,
                "setup": list(self.setup),
                "env": [list(kv) for kv in self.env],
            }
        )

    @property
    def tag(self) -> str:
        return f"{self.name}:{self.content_hash()[:24]}"


@dataclass(frozen=True)
class LayerRecipe:
    """Dockerfile layers ``FROM`` a base (or another layer); ``files`` form the context."""

    name: str
    base: BaseRecipe | LayerRecipe
    dockerfile_body: str  # everything after the FROM line
    files: Mapping[str, bytes] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "files", MappingProxyType(dict(self.files)))

    def content_hash(self) -> str:
        return _sha256(
            {
                "schema": RECIPE_SCHEMA,
                "kind": "layer",
                "base": self.base.content_hash(),
                "body": self.dockerfile_body,
                "files": {k: hashlib.sha256(v).hexdigest() for k, v in sorted(self.files.items())},
            }
        )

    @property
    def tag(self) -> str:
        return f"{self.name}:{self.content_hash()[:24]}"


Recipe = BaseRecipe | LayerRecipe


_BASE = BaseRecipe(setup=BASE_SETUP)


def base_recipe() -> BaseRecipe:
    """The project's one shared base image recipe (see the module docstring)."""
    return _BASE
