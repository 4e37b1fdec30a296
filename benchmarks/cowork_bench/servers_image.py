"""``harness cowork build-servers``: the offline fallback runtime with the checkout's servers.

    harness cowork build-servers --cowork-root PATH

Builds ``harness/cowork-servers:<content hash>`` on the harness's Debian runtime image (no
registry needed): the checkout's ``local_servers/`` at ``/opt/local_servers`` (upstream's
layout), and each Python server (a folder with ``pyproject.toml``) installed into its own
``.venv`` with ``uv``, offline, from wheels the host fetched from PyPI once:

* the server's pinned requirements: ``uv export --frozen`` of its ``uv.lock``, or, without a
  lock, ``uv pip compile`` of its ``pyproject.toml`` for the image's Python, with releases
  up to the last commit that changed the server's folder (``--exclude-newer`` sets another
  date; newer releases may have broken it);
* ``pip wheel --no-deps`` of each requirement (a wheel from PyPI, or one built here from an
  sdist; the host's glibc and CPython minor match the image's), and of the server itself
  unless it is a virtual project (no ``[build-system]``, or ``tool.uv.package = false``:
  ``uv sync`` installs only its dependencies, and so does this build);
* upstream's ``requires-python`` is relaxed to the image's Python (3.11) only in our copy of
  ``pyproject.toml`` when it asks for a newer one, and the build records that it did.

Each Node server (a folder with ``package.json``) is prepared on the host as upstream's
Dockerfile does in its image: ``npm ci`` (``npm install`` without a lock), ``npm run build``
when it has a build script, then ``npm prune --omit=dev``; the image's Node (Debian's) runs
it. Where ``npm ping`` gets no answer from the registry, the installs run ``--offline`` (from
npm's cache: a server without dependencies still builds). Committed ``node_modules`` are
used as they are.

A server whose preparation or install fails is still copied, and recorded as not built with
the reason. ``/opt/local_servers/.harness_servers.json`` (and the last stdout line) say, per
server, ``built`` or ``not_built`` with the reason (``other``: neither manifest).

Each ``.venv`` also sees the image's system packages (Debian's ``python3-psycopg2``,
``-openpyxl``, ``-docx``, ``-pypdf``) behind its own: upstream's script-style servers import
packages their ``pyproject.toml`` does not list (``moex-finance-mcp`` imports ``psycopg2``),
which upstream's image has in ``/opt/venv``.

``/opt/local_servers`` belongs to the agent user, who runs the servers (some write logs
beside their code), and the venvs are byte-compiled (a read-only import of an uncompiled
venv was slow enough to miss a 10 s handshake). The image sets
``LOCAL_SERVERS_PATH=/opt/local_servers`` and ``UV_NO_SYNC=1`` (``uv run``
uses the baked ``.venv``, as upstream's image does); the yaml's ``${local_servers_paths}``
follows the image's ``LOCAL_SERVERS_PATH``. Use it with ``--cowork-image TAG`` in a run or
in ``harness cowork qualify``.

Needs the ``cowork`` extra (``uv``) and PyPI on the host. Exit status: 0 built; 1 the image
build failed; 2 usage error.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from benchmarks.cowork_bench.cli import doc_summary
from benchmarks.cowork_bench.containers import AGENT_ID
from benchmarks.cowork_bench.images import runtime_recipe
from harness.api import InfraError, LayerRecipe, cache_root
from harness.api import ensure_image as sandbox_ensure_image

IMAGE_NAME = "harness/cowork-servers"
SERVERS_DIR = "/opt/local_servers"
IMAGE_PYTHON = (3, 11)  # Debian bookworm's python3, the runtime image's
STATUS_FILE = ".harness_servers.json"
SKIP_NAMES = frozenset({".git", "__pycache__", ".venv", "node_modules"})
STEP_TIMEOUT_S = 900
MESSAGE_CHARS = 400  # of a failed host step's error, in the server's recorded reason


class ServerBuild(BaseModel):
    """One server of ``local_servers/`` in the image."""

    model_config = ConfigDict(extra="forbid")

    name: str
    kind: str  # "python" or "node" (or "other": neither manifest)
    status: str  # "built", "not_built", "other"
    reason: str | None = None
    requires_python_adjusted: str | None = None  # upstream's value, when relaxed here


def _run(cmd: list[str], cwd: Path, label: str | None = None) -> str:
    res = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=STEP_TIMEOUT_S,
                         check=False)  # fmt: skip
    if res.returncode != 0:
        # The end of the error as one line: uv and pip wrap the sentence that names the
        # package over several lines.
        said = " ".join((res.stderr.strip() or res.stdout.strip() or "no output").split())
        said = said if len(said) <= MESSAGE_CHARS else "…" + said[-MESSAGE_CHARS:]
        label = label or (f"{Path(cmd[2] if cmd[1] == '-m' else cmd[0]).name} "
                          f"{' '.join(cmd[3:5])}")  # fmt: skip
        raise InfraError(f"{label}: {said}", "image_build_failed")
    return res.stdout


def _tree_hash(path: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(path.rglob("*")):
        if p.is_file() and not SKIP_NAMES.intersection(p.relative_to(path).parts):
            h.update(str(p.relative_to(path)).encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()[:20]


def relax_requires_python(pyproject: Path) -> str | None:
    """Make our copy's ``requires-python`` admit the image's Python; upstream's value if
    it was changed."""
    text = pyproject.read_text(encoding="utf-8")
    m = re.search(r'^requires-python\s*=\s*"([^"]*)"', text, flags=re.M)
    if m is None:
        return None
    spec = m.group(1)
    low = re.search(r">=\s*(\d+)\.(\d+)", spec)
    high = re.search(r"<\s*(\d+)\.(\d+)", spec)
    too_new = low is not None and (int(low.group(1)), int(low.group(2))) > IMAGE_PYTHON
    too_old = high is not None and (int(high.group(1)), int(high.group(2))) <= IMAGE_PYTHON
    if not (too_new or too_old):
        return None
    pyproject.write_text(text[: m.start(1)] + ">=3.11" + text[m.end(1):], encoding="utf-8")
    return spec


def prepare_python_server(src: Path, cache: Path,
                          exclude_newer: str | None) -> tuple[Path, str | None]:
    """Our copy of the server (``src``/``pyproject.toml`` maybe relaxed), its
    ``requirements.txt`` and every wheel it needs, in a cache folder keyed by its content
    (and ``exclude_newer``: a server without a lock resolves as of that date)."""
    key = _tree_hash(src) + (hashlib.sha256(exclude_newer.encode()).hexdigest()[:6]
                             if exclude_newer else "")  # fmt: skip
    out = cache / f"{src.name}-{key}"
    done = out / "done.json"
    if done.is_file():
        return out, json.loads(done.read_text())["adjusted"]
    if out.exists():
        shutil.rmtree(out)
    copy, wheels = out / "src", out / "wheels"
    shutil.copytree(src, copy, ignore=shutil.ignore_patterns(*SKIP_NAMES))
    wheels.mkdir()
    adjusted = relax_requires_python(copy / "pyproject.toml")
    py = sys.executable
    if (copy / "uv.lock").is_file():
        reqs = _run([py, "-m", "uv", "export", "--frozen", "--no-dev", "--no-hashes",
                     "--no-emit-project", "--no-header", "--format", "requirements-txt",
                     "--quiet"], copy)  # fmt: skip
    else:
        when = ["--exclude-newer", exclude_newer] if exclude_newer else []
        reqs = _run([py, "-m", "uv", "pip", "compile", "pyproject.toml", "--python-version",
                     "3.11", "--python-platform", "x86_64-manylinux_2_17", "--no-header",
                     "--quiet", *when], copy)  # fmt: skip
    (out / "requirements.txt").write_text(reqs, encoding="utf-8")
    if any(line.strip() and not line.lstrip().startswith("#") for line in reqs.splitlines()):
        _run([py, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(wheels), "-r",
              str(out / "requirements.txt")], copy)  # fmt: skip
    if is_packaged(copy / "pyproject.toml"):
        _run([py, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(wheels), "."], copy)
    done.write_text(json.dumps({"adjusted": adjusted}))
    return out, adjusted


def npm_unreachable() -> str | None:
    """None when the host's npm gets an answer from its registry, else why not."""
    npm = shutil.which("npm")
    if npm is None:
        return "npm is not installed on the host"
    try:
        res = subprocess.run([npm, "ping", "--fetch-retries=0", "--fetch-timeout=20000"],
                             capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"npm ping: {exc}"
    if res.returncode != 0:
        lines = (res.stderr or res.stdout).splitlines()
        said = next((ln for ln in lines if " failed, reason: " in ln),  # npm names the URL
                    next((ln for ln in lines if "error code" in ln), " ".join(lines)[-200:]))
        return f"npm registry unreachable ({said.removeprefix('npm error ').strip()})"
    return None


def prepare_node_server(src: Path, cache: Path, offline: bool) -> Path:
    """Our copy of the Node server ``src`` with its ``node_modules`` and build output, in a
    cache folder keyed by its content (``npm ci``/``install``, ``run build``, ``prune``)."""
    out = cache / f"{src.name}-{_tree_hash(src)}"
    done = out / "done.json"
    if done.is_file():
        return out
    if out.exists():
        shutil.rmtree(out)
    copy = out / "src"
    shutil.copytree(src, copy, ignore=shutil.ignore_patterns(*(SKIP_NAMES - {"node_modules"})))
    if (copy / "node_modules").is_dir():  # committed: used as it is
        done.write_text("{}")
        return out
    npm = shutil.which("npm")
    if npm is None:
        raise InfraError("npm is not installed on the host: apt-get install -y npm",
                         "image_build_failed")  # fmt: skip
    flags = ["--no-audit", "--no-fund", "--loglevel=error", *(["--offline"] if offline else [])]
    manifest = json.loads((copy / "package.json").read_text(encoding="utf-8"))
    install = "ci" if (copy / "package-lock.json").is_file() else "install"
    _run([npm, install, *flags], copy, f"npm {install}")
    if "build" in (manifest.get("scripts") or {}):
        _run([npm, "run", "build", "--loglevel=error"], copy, "npm run build")
    if manifest.get("devDependencies"):
        _run([npm, "prune", "--omit=dev", *flags], copy, "npm prune")
    done.write_text("{}")
    return out


def is_packaged(pyproject: Path) -> bool:
    """Whether ``uv sync`` would install the project itself, not just its dependencies."""
    import tomllib

    try:
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return True  # pip then says what is wrong with it
    package = data.get("tool", {}).get("uv", {}).get("package")
    return bool(package) if package is not None else "build-system" in data


def _files(tree: Path, arc: str, keep: frozenset[str] = frozenset()) -> dict[str, bytes]:
    skip = SKIP_NAMES - keep
    return {
        f"{arc}/{p.relative_to(tree).as_posix()}": p.read_bytes()
        for p in sorted(tree.rglob("*"))
        if p.is_file() and not p.is_symlink()
        and not skip.intersection(p.relative_to(tree).parts)
    }


INSTALL = r"""
set -u
cd {servers}/$1
project=""  # $2: the project's name; empty for a virtual project (dependencies only)
if [ -n "$2" ]; then
  project=/tmp/server_wheels/$1/wheels/$(cd /tmp/server_wheels/$1/wheels && ls | grep -i \
    "^$(echo "$2" | tr - _)-" | head -n 1)
fi
if uv venv -q --system-site-packages --python /usr/bin/python3 .venv \
   && uv pip install -q --python .venv/bin/python --offline --no-index --compile-bytecode \
        --find-links /tmp/server_wheels/$1/wheels -r /tmp/server_wheels/$1/requirements.txt \
        $project 2> /tmp/install-$1.err; then
  echo built
else
  rm -rf .venv; echo "not_built: $(tail -n 1 /tmp/install-$1.err)"
fi
"""


def checkout_date(root: Path, path: str | None = None) -> str | None:
    """The commit time (ISO 8601) of the checkout ``root``, or of the last commit that
    changed ``path`` in it, when ``root`` is a git checkout."""
    try:
        res = subprocess.run(["git", "-C", str(root), "log", "-1", "--format=%cI",
                              *(["--", path] if path else [])],
                             capture_output=True, text=True, timeout=30, check=False)  # fmt: skip
    except OSError:
        return None
    return res.stdout.strip() or None if res.returncode == 0 else None


def servers_recipe(root: Path, exclude_newer: str | None = None
                   ) -> tuple[LayerRecipe, list[ServerBuild]]:
    """The image recipe for ``root``'s ``local_servers/`` and what the host side prepared."""
    local = root / "local_servers"
    if not local.is_dir():
        raise InfraError(f"no local_servers/ under {root}", "image_build_failed")
    cache = cache_root() / "cowork-servers"
    cache.mkdir(parents=True, exist_ok=True)
    files = _files(local, "local_servers")
    builds: list[ServerBuild] = []
    to_install: list[tuple[str, str]] = []
    npm_offline: bool | None = None  # asked once, at the first Node server
    for src in sorted(p for p in local.iterdir() if p.is_dir()):
        if (src / "pyproject.toml").is_file():
            # Unlocked dependencies resolve as of when the server last changed (upstream's
            # mcp-clickhouse-server, last changed before mcp 2.0, breaks on mcp 2.0).
            when = exclude_newer or checkout_date(root, f"local_servers/{src.name}")
            try:
                prepared, adjusted = prepare_python_server(src, cache, when)
            except (InfraError, subprocess.TimeoutExpired, OSError) as exc:
                builds.append(ServerBuild(name=src.name, kind="python", status="not_built",
                                          reason=f"preparing on the host: {exc}"))  # fmt: skip
                continue
            files.update(_files(prepared / "src", f"local_servers/{src.name}"))
            files.update(_files(prepared / "wheels", f"server_wheels/{src.name}/wheels"))
            files[f"server_wheels/{src.name}/requirements.txt"] = (
                prepared / "requirements.txt").read_bytes()
            to_install.append((src.name, install_name(prepared / "src" / "pyproject.toml",
                                                      src.name)))  # fmt: skip
            builds.append(ServerBuild(name=src.name, kind="python", status="built",
                                      requires_python_adjusted=adjusted))  # fmt: skip
        elif (src / "package.json").is_file():
            if npm_offline is None:
                unreachable = npm_unreachable()
                npm_offline = unreachable is not None
                if unreachable is not None:
                    print(f"harness cowork build-servers: {unreachable}; Node servers are "
                          "installed --offline, from npm's cache", file=sys.stderr)  # fmt: skip
            try:
                prepared_node = prepare_node_server(src, cache, offline=npm_offline)
            except (InfraError, subprocess.TimeoutExpired, OSError, ValueError) as exc:
                why = f"preparing on the host: {exc}"
                if npm_offline:
                    why += " (npm's registry was unreachable: installs ran --offline)"
                builds.append(ServerBuild(name=src.name, kind="node", status="not_built",
                                          reason=why))  # fmt: skip
                continue
            files.update(_files(prepared_node / "src", f"local_servers/{src.name}",
                                keep=frozenset({"node_modules"})))  # fmt: skip
            builds.append(ServerBuild(name=src.name, kind="node", status="built"))
        else:
            builds.append(ServerBuild(name=src.name, kind="other", status="other"))
    files["install_server.sh"] = INSTALL.format(servers=SERVERS_DIR).encode()
    files["servers.json"] = json.dumps([b.model_dump() for b in builds], indent=1).encode()
    installs = " ".join(f"{d}:{n}" for d, n in to_install)
    body = rf"""
COPY local_servers/ {SERVERS_DIR}/
COPY server_wheels/ /tmp/server_wheels/
COPY install_server.sh servers.json /tmp/
RUN set -e; for pair in {installs}; do \
      d="${{pair%%:*}}"; n="${{pair#*:}}"; \
      printf '%s\t%s\n' "$d" "$(sh /tmp/install_server.sh "$d" "$n")"; \
    done > /tmp/installed.tsv; cat /tmp/installed.tsv; \
    python3 -c 'import json,sys; b=json.load(open("/tmp/servers.json")); r=dict(l.rstrip("\n").split("\t",1) for l in open("/tmp/installed.tsv")); [x.update(status="not_built", reason="installing in the image: "+r[x["name"]][11:]) for x in b if x["name"] in r and r[x["name"]]!="built"]; json.dump(b,open("{SERVERS_DIR}/{STATUS_FILE}","w"),indent=1)'; \
    rm -rf /tmp/server_wheels /tmp/install_server.sh /tmp/servers.json /tmp/installed.tsv \
      /tmp/install-*.err; chown -R {AGENT_ID}:{AGENT_ID} {SERVERS_DIR}
ENV LOCAL_SERVERS_PATH={SERVERS_DIR} UV_NO_SYNC=1
"""
    return LayerRecipe(name=IMAGE_NAME, base=runtime_recipe(), dockerfile_body=body,
                       files=files), builds  # fmt: skip


def install_name(pyproject: Path, default: str) -> str:
    """The project's name, whose wheel the image installs; empty for a virtual project
    (only its dependencies are installed)."""
    import tomllib

    if not is_packaged(pyproject):
        return ""
    try:
        return str(tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["name"])
    except (OSError, KeyError, ValueError):
        return default


def image_status(tag: str) -> list[dict[str, object]]:
    """The per-server record the build left in the image."""
    out = subprocess.run(["docker", "run", "--rm", "--network", "none", tag, "cat",
                          f"{SERVERS_DIR}/{STATUS_FILE}"], capture_output=True, text=True,
                         timeout=120, check=True).stdout  # fmt: skip
    data: list[dict[str, object]] = json.loads(out)
    return data


def build_servers_command(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="harness cowork build-servers",
                                     description=doc_summary(__doc__))  # fmt: skip
    parser.add_argument("--cowork-root", type=Path, required=True, help="a Cowork checkout")
    parser.add_argument("--exclude-newer", metavar="DATE",
                        help="servers without a uv.lock resolve their dependencies as of DATE "
                        "(default: the last commit that changed the server's folder; outside "
                        "a git checkout, the newest releases)")
    args = parser.parse_args(argv)
    root = args.cowork_root.expanduser().resolve()
    if not (root / "local_servers").is_dir():
        print(f"harness cowork build-servers: no local_servers/ under {root}: pass a Cowork "
              "checkout", file=sys.stderr)  # fmt: skip
        return 2
    try:
        recipe, _ = servers_recipe(root, args.exclude_newer)
        built = sandbox_ensure_image(recipe)
        status = image_status(recipe.tag)
    except (InfraError, subprocess.SubprocessError) as exc:
        print(f"harness cowork build-servers: {exc}", file=sys.stderr)
        return 1
    for s in status:
        print(f"{s['name']:<32} {s['status']:<10} {s.get('reason') or ''}"
              + (f" (requires-python {s['requires_python_adjusted']} relaxed to >=3.11)"
                 if s.get("requires_python_adjusted") else ""))  # fmt: skip
    print(json.dumps({"tag": recipe.tag, "image_id": built.image_id, "servers": status}))
    return 0


