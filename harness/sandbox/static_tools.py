"""Small static C helpers that run inside sandboxes, compiled on the host and cached.

The sources live next to this module (``protected_exec.c``, ``strip_privileges.c``); a
helper is built with ``gcc -static`` (it runs in any Linux image, whatever its C library)
once per content hash of (source, defines) and cached in ``$HARNESS_CACHE_DIR/static-tools``
(else ``~/.cache/harness/static-tools``). Needs ``gcc`` and Debian's ``libc6-dev`` on the
host; a missing compiler is an infrastructure error (``protected_install_failed``).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path

from harness.core.cache import cache_root
from harness.core.fsutil import atomic_write_bytes
from harness.sandbox.errors import ProtectedInstallFailed

SOURCE_DIR = Path(__file__).resolve().parent
CFLAGS = ("-static", "-O2", "-s", "-Wall", "-Wextra", "-Werror")


def tools_cache() -> Path:
    return cache_root() / "static-tools"


def build_static(source: str, defines: Mapping[str, str] | None = None) -> bytes:
    """The bytes of ``source`` (a ``.c`` file next to this module) built statically.

    ``defines`` become ``-DNAME=VALUE`` (VALUE is passed verbatim: quote C strings).
    """
    text = (SOURCE_DIR / source).read_bytes()
    flags = [*CFLAGS, *(f"-D{k}={v}" for k, v in sorted((defines or {}).items()))]
    key = hashlib.sha256(json.dumps([text.hex(), flags]).encode()).hexdigest()[:24]
    cached = tools_cache() / key / Path(source).stem
    if cached.is_file():
        return cached.read_bytes()
    gcc = shutil.which("gcc")
    if gcc is None:
        raise ProtectedInstallFailed(
            f"gcc not found: {source} is compiled on the host; "
            "install it with `apt-get install -y gcc libc6-dev`"
        )
    with tempfile.TemporaryDirectory(prefix="harness-static-") as tmp:
        out = Path(tmp) / "a.out"
        proc = subprocess.run(
            [gcc, *flags, "-o", str(out), str(SOURCE_DIR / source)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if proc.returncode != 0:
            raise ProtectedInstallFailed(
                f"gcc -static {source} failed ({proc.returncode}): "
                f"{proc.stderr.strip()[-400:]}; the static C library is in Debian's libc6-dev"
            )
        data = out.read_bytes()
    atomic_write_bytes(cached, data, mode=0o755)
    return data
