"""Docker sandboxes: local image builds, containers, exec, copy in/out, cleanup.

Public API (details in each module's docstring):

* images: :class:`BaseRecipe`, :class:`LayerRecipe`, :class:`BuiltImage`,
  :func:`ensure_image`, :func:`base_recipe`
* containers: :class:`SandboxSpec`, :class:`Sandbox` (``create``, ``exec``, ``copy_in``,
  ``write_file``, ``copy_out``, ``export_tar_gz``, ``install_protected``, ``remove``),
  :class:`ExecResult`
* networks: :func:`create_internal_network`
* cleanup: :func:`sweep`, :func:`sweep_stale`, :func:`run_lock_path`, :func:`run_lock`,
  :func:`leaked_resources`; CLI :func:`harness.sandbox.cli.sweep_command`
* pytest fixtures: :mod:`harness.sandbox.fixtures`
* errors: :mod:`harness.sandbox.errors` (all :class:`~harness.errors.InfraError`)
"""

from harness.sandbox.cleanup import leaked_resources, run_lock, run_lock_path, sweep, sweep_stale
from harness.sandbox.client import get_client
from harness.sandbox.container import Sandbox, SandboxSpec
from harness.sandbox.execution import ExecResult
from harness.sandbox.images import BaseRecipe, BuiltImage, LayerRecipe, base_recipe, ensure_image
from harness.sandbox.network import create_internal_network

__all__ = [
    "BaseRecipe",
    "BuiltImage",
    "ExecResult",
    "LayerRecipe",
    "Sandbox",
    "SandboxSpec",
    "base_recipe",
    "create_internal_network",
    "ensure_image",
    "get_client",
    "leaked_resources",
    "run_lock",
    "run_lock_path",
    "sweep",
    "sweep_stale",
]
