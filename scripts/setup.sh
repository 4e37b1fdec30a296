#!/usr/bin/env bash
# Set up a fresh Debian/Ubuntu machine for the runner (idempotent):
#   system packages (debootstrap for local images, chromium for the report test, gcc for the
#   ProgramBench fixture's reference program), the Python package with its dev extras, and
#   the local Docker images (built from Debian packages, tagged by content hash, built once).
# Needs: Python >= 3.11 with pip, a running Docker Engine, root or sudo.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

echo "[setup] system packages"
$SUDO apt-get update -qq
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
  debootstrap chromium gcc libc6-dev git ca-certificates e2fsprogs docker-registry >/dev/null

echo "[setup] python packages"
python3 -m pip install -q --upgrade pip
python3 -m pip install -q -e '.[dev]'

echo "[setup] docker"
if ! docker info >/dev/null 2>&1; then
  echo "[setup] Docker Engine is not reachable: start it (e.g. 'sudo systemctl start docker')" >&2
  exit 1
fi

echo "[setup] Cowork Bench MCP: the pinned mcp SDK wheels for the runtime image (PyPI, pip)"
python3 -c "from benchmarks.cowork_bench.images import fetch_wheels; print(fetch_wheels())"

echo "[setup] local images (first time: a few minutes; later: cached)"
python3 -m harness.images
echo "[setup] done"
