"""Images only the project's tests use, built like the product's (layer recipes from local
packages and wheels, tagged by content hash, built once): ``scripts/setup.sh --tests`` runs
``python3 -m tests.support.images`` beside the product's images, so the suite does not spend its
first run building them. A test that needs one still builds it when it is missing."""

from __future__ import annotations

from harness.sandbox.images.__main__ import build_steps


def main() -> int:
    from tests.benchmarks.cowork.cowork_upstream_support import ensure_standins

    return build_steps(
        [("Cowork upstream stand-ins (ubuntu, postgres:15)", ensure_standins)], "test images"
    )


if __name__ == "__main__":
    raise SystemExit(main())
