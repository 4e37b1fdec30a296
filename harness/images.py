"""``python -m harness.images``: build every local image the project uses, once.

Nothing can be pulled here, so images are built from Debian packages (see
:mod:`harness.sandbox.images`) and tagged by content hash; a second call is a no-op.
"""

from __future__ import annotations

import time
from collections.abc import Callable


def main() -> int:
    from harness.sandbox.images import base_recipe, ensure_image

    def base() -> object:
        return ensure_image(base_recipe())

    steps: list[tuple[str, Callable[[], object]]] = [("base (debootstrap bookworm)", base)]

    def programbench_fixture() -> object:
        from benchmarks.programbench.fixture import ensure_fixture

        return ensure_fixture()

    def cowork_images() -> object:
        from benchmarks.cowork_bench.images import ensure_image as cowork_image

        return [cowork_image("pg15"), cowork_image("runtime")]

    steps.append(("ProgramBench offline fixture", programbench_fixture))
    steps.append(("Cowork Bench PostgreSQL 15 and runtime", cowork_images))
    for name, build in steps:
        t0 = time.monotonic()
        build()
        print(f"[images] {name}: ready in {time.monotonic() - t0:.1f}s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
