"""Package re-exports loaded on first use (PEP 562), so importing one submodule of a package
does not import them all (the collection path stays off Docker and the heavy models)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, table: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: ``table`` maps an exported name to the
    module defining it (``module:name`` when it is exported under another name); the value
    is imported on first access and cached in the package."""

    def __getattr__(name: str) -> Any:
        where = table.get(name)
        if where is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, _, attr = where.partition(":")
        value = getattr(importlib.import_module(module), attr or name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
