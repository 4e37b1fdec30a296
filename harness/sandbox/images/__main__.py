"""``python -m harness.sandbox.images``: build every local image the project uses, once.

Nothing can be pulled here, so images are built from Debian packages (see
:mod:`harness.sandbox.images.build`) and tagged by content hash; a second call is a no-op.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable


def main(argv: list[str] | None = None) -> int:
    """``python -m harness.sandbox.images [BENCHMARK ...]``: the base image and the images
    of the named benchmarks (default: every registered one)."""
    from harness.core.registry import benchmarks
    from harness.sandbox.images.build import base_recipe, ensure_image

    names = sys.argv[1:] if argv is None else argv
    registered = {reg.name: reg for reg in benchmarks()}
    unknown = sorted(set(names) - set(registered))
    if unknown:
        print(f"unknown benchmark(s) {', '.join(unknown)}; known: "
              f"{', '.join(sorted(registered))}", file=sys.stderr)
        return 2

    def base() -> object:
        return ensure_image(base_recipe())

    steps: list[tuple[str, Callable[[], object]]] = [("base (debootstrap bookworm)", base)]
    for name, reg in registered.items():
        if not names or name in names:
            steps.extend((step.label, step.build) for step in reg.images)
    return build_steps(steps, "images")


def build_steps(steps: list[tuple[str, Callable[[], object]]], tag: str) -> int:
    """Run each named build in turn, one ``[tag] name: ready in Ns`` line each; 0."""
    for name, build in steps:
        t0 = time.monotonic()
        build()
        print(f"[{tag}] {name}: ready in {time.monotonic() - t0:.1f}s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
