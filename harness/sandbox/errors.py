"""Sandbox failures: each is an :class:`~harness.core.errors.InfraError` with a stable reason code.

A Docker problem is never the model's fault: these errors make an instance
``infra_failed`` (pytest ``error``), never a scored failure.
"""

from __future__ import annotations

from harness.core.errors import InfraError


class SandboxError(InfraError):
    reason_code = "sandbox_error"


class DockerUnavailable(SandboxError):
    reason_code = "docker_unavailable"


class ImageMissing(SandboxError):
    reason_code = "image_missing"


class ImageBuildFailed(SandboxError):
    reason_code = "image_build_failed"


class ContainerStartFailed(SandboxError):
    reason_code = "container_start_failed"


class ExecFailed(SandboxError):
    """The exec call itself failed (not the command's exit status)."""

    reason_code = "exec_failed"


class ExecTimeout(SandboxError):
    """Raised by :meth:`ExecResult.check` when the command hit its timeout."""

    reason_code = "exec_timeout"


class CopyFailed(SandboxError):
    reason_code = "copy_failed"


class ProtectedInstallFailed(SandboxError):
    reason_code = "protected_install_failed"


class NetworkCreateFailed(SandboxError):
    reason_code = "network_create_failed"


class CleanupFailed(SandboxError):
    """A sandbox could not be removed, or was still listed after removal."""

    reason_code = "sandbox_cleanup_failed"


class SweepIncomplete(SandboxError):
    reason_code = "sweep_incomplete"
