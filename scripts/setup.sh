#!/usr/bin/env bash
# Set up a fresh Debian/Ubuntu machine for the runner (idempotent). Two steps:
#
#   ./scripts/setup.sh           the main job (a ProgramBench instance, end to end):
#                                apt: debootstrap gcc libc6-dev git ca-certificates;
#                                pip: this package with its programbench extra;
#                                docker: the base image and the ProgramBench fixture image
#                                (built from Debian packages, tagged by content hash, once).
#   ./scripts/setup.sh --tests   everything the test suite needs on top (CI runs both):
#                                apt: chromium e2fsprogs docker-registry postgresql
#                                openssh-server npm runsc; pip: the dev, mini and cowork extras;
#                                docker: the Cowork images and the tests' stand-in images
#                                (built in parallel); it also registers gVisor's runsc as a
#                                Docker runtime: /etc/docker/daemon.json gains a "runtimes"
#                                entry (other keys kept) and dockerd gets SIGHUP (running
#                                containers are untouched).
#
# Needs: Python >= 3.11 with pip, a running Docker Engine, root or sudo. A test that needs an
# image the second step did not build builds it on first use.
set -euo pipefail
cd "$(dirname "$0")/.."

TESTS=0
case "${1:-}" in
  --tests) TESTS=1 ;;
  "") ;;
  *) echo "usage: scripts/setup.sh [--tests]" >&2; exit 2 ;;
esac

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
apt_install() {
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}
t0=$(date +%s)
phase() { echo "[setup] $1 (at $(( $(date +%s) - t0 ))s)"; }

if ! docker info >/dev/null 2>&1; then
  echo "[setup] Docker Engine is not reachable: start it (e.g. 'sudo systemctl start docker')" >&2
  exit 1
fi

if [ "$TESTS" -eq 0 ]; then
  phase "system packages"
  $SUDO apt-get update -qq
  apt_install debootstrap gcc libc6-dev git ca-certificates
  phase "python packages"
  python3 -m pip install -q -e '.[programbench]'
  phase "images of the main job (first time: a few minutes; later: cached)"
  python3 -m harness.sandbox.images programbench
  phase "done"
  exit 0
fi

phase "system packages for the tests"
$SUDO apt-get update -qq
apt_install debootstrap chromium gcc libc6-dev git ca-certificates e2fsprogs docker-registry \
  postgresql openssh-server
# npm prepares the Cowork checkout's Node MCP servers for `harness cowork build-servers`
# (a machine with its own Node and npm keeps them).
if ! command -v npm >/dev/null 2>&1; then apt_install npm; fi

phase "python packages for the tests"
python3 -m pip install -q --upgrade pip
python3 -m pip install -q -e '.[dev,mini,programbench,cowork]'

phase "gVisor: runsc installed and registered with dockerd (for --runtime runsc)"
# Debian's runsc (2022-12) misreads a container's network namespace as the host's on recent
# kernels (google/gvisor#10704), so it is registered with --network=host: gVisor then uses
# the container's own namespace (made by Docker: "none" has only loopback) through the host
# stack. Registered once (an existing "runsc" entry is kept as is), other daemon.json keys
# are kept, the file is replaced atomically, and dockerd reloads runtimes on SIGHUP (no
# restart: running containers are untouched).
runsc_registered() { docker info --format '{{json .Runtimes}}' | grep -q '"runsc":'; }
if ! $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq runsc >/dev/null; then
  echo "[setup] runsc is not installable here: --runtime runsc will be refused" >&2
elif ! runsc_registered; then
  $SUDO python3 - <<'PY'
import json, os, tempfile
path = "/etc/docker/daemon.json"
cfg = json.load(open(path)) if os.path.exists(path) else {}
cfg.setdefault("runtimes", {})["runsc"] = {"path": "/usr/bin/runsc",
                                           "runtimeArgs": ["--network=host"]}
os.makedirs(os.path.dirname(path), exist_ok=True)
fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".daemon.json.")
with os.fdopen(fd, "w") as f:
    json.dump(cfg, f, indent=2)
    f.write("\n")
os.chmod(tmp, 0o644)
os.replace(tmp, path)
PY
  if [ -s /var/run/docker.pid ]; then  # the system daemon's own pid file: no other dockerd
    $SUDO kill -HUP "$(cat /var/run/docker.pid)"
  else
    $SUDO systemctl reload docker
  fi
  for _ in 1 2 3 4 5 6 7 8 9 10; do runsc_registered && break; sleep 1; done
  runsc_registered \
    || { echo "[setup] dockerd did not load the runsc runtime (see its log)" >&2; exit 1; }
fi
phase "Cowork Bench MCP: the pinned mcp SDK wheels for the runtime image (PyPI, pip)"
python3 -c "from benchmarks.cowork_bench.images import fetch_wheels; print(fetch_wheels())"

phase "images (first time: a few minutes; later: cached), two builds at once"
python3 -m harness.sandbox.images programbench
python3 -m harness.sandbox.images &
product=$!
python3 -m tests.support.images &
stand_ins=$!
status=0
wait "$product" || status=$?
wait "$stand_ins" || status=$?
phase "done"
exit "$status"
