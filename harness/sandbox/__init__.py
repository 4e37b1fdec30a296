"""Docker sandboxes: local image builds, containers, exec, copy in/out, cleanup.

Public API (details in each module's docstring):

* images: :class:`BaseRecipe`, :class:`LayerRecipe`, :class:`BuiltImage`,
  :func:`ensure_image`, :func:`base_recipe`
* containers: :class:`SandboxSpec`, :class:`Sandbox` (``create``, ``exec``, ``copy_in``,
  ``write_file``, ``put_archive``, ``make_dirs``, ``copy_out``, ``export_tar_gz``,
  ``install_protected``, ``remove``), :class:`ExecResult`
* copy in: :func:`pack_tree` (trusted host trees for ``put_archive``), :class:`NewDir`
  (for ``make_dirs``); copy out: :mod:`harness.sandbox.transfer` (bounded, inert)
* networks: :func:`create_internal_network`
* relays run in a container (Unix socket <-> TCP): :mod:`harness.sandbox.relay`
* cleanup: :func:`sweep`, :func:`remove_labelled`, :func:`sweep_stale`,
  :func:`run_lock_path`, :func:`run_lock`, :func:`leaked_resources`; CLI
  :func:`harness.sandbox.cli.sweep_command`
* pytest fixtures: :mod:`harness.runner.sandbox_fixtures`
* errors: :mod:`harness.sandbox.errors` (all :class:`~harness.core.errors.InfraError`)
"""

from typing import TYPE_CHECKING

from harness.core.lazy import lazy_exports

if TYPE_CHECKING:
    from harness.core.layout import lock_path as run_lock_path
    from harness.sandbox.cleanup import (
        leaked_resources,
        remove_labelled,
        run_lock,
        sweep,
        sweep_stale,
    )
    from harness.sandbox.client import get_client
    from harness.sandbox.container import Sandbox, SandboxSpec
    from harness.sandbox.execution import ExecResult
    from harness.sandbox.images.build import BuiltImage, ensure_image
    from harness.sandbox.images.recipes import BaseRecipe, LayerRecipe, base_recipe
    from harness.sandbox.network import create_internal_network
    from harness.sandbox.pack import NewDir, pack_tree

# Loaded on first use (PEP 562): importing one submodule does not import them all
# (the collection path stays off Docker and the heavy models).
_LAZY = {
    "leaked_resources": "harness.sandbox.cleanup",
    "remove_labelled": "harness.sandbox.cleanup",
    "run_lock": "harness.sandbox.cleanup",
    "run_lock_path": "harness.core.layout:lock_path",
    "sweep": "harness.sandbox.cleanup",
    "sweep_stale": "harness.sandbox.cleanup",
    "get_client": "harness.sandbox.client",
    "Sandbox": "harness.sandbox.container",
    "SandboxSpec": "harness.sandbox.container",
    "ExecResult": "harness.sandbox.execution",
    "BaseRecipe": "harness.sandbox.images.recipes",
    "BuiltImage": "harness.sandbox.images.build",
    "LayerRecipe": "harness.sandbox.images.recipes",
    "base_recipe": "harness.sandbox.images.recipes",
    "ensure_image": "harness.sandbox.images.build",
    "create_internal_network": "harness.sandbox.network",
    "NewDir": "harness.sandbox.pack",
    "pack_tree": "harness.sandbox.pack",
}


__getattr__ = lazy_exports(__name__, _LAZY)


__all__ = [
    "BaseRecipe",
    "BuiltImage",
    "ExecResult",
    "LayerRecipe",
    "NewDir",
    "Sandbox",
    "SandboxSpec",
    "base_recipe",
    "create_internal_network",
    "ensure_image",
    "get_client",
    "leaked_resources",
    "pack_tree",
    "remove_labelled",
    "run_lock",
    "run_lock_path",
    "sweep",
    "sweep_stale",
]
