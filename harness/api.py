"""What a benchmark may import from the harness: this module, and nothing else
(``tests/test_layers.py`` checks it for every benchmark; docs/extending/new-benchmark.md).

A benchmark declares its tasks and how one is judged (:class:`DeclaredBenchmark`); the
runner's trial (:mod:`harness.runner.trial`) runs each instance's life around it. What a
benchmark with machinery of its own (ProgramBench's protected judge, Cowork's sidecar and
servers) uses of the harness is named here too, by theme: the harness's own modules may
move without a benchmark noticing, and a benchmark's new reach into the harness is a line
added here, seen in review.

Nothing loads with this module; each name loads on first use (from the module that defines
it). Collecting a benchmark's items loads neither pydantic nor Docker, and a helper of a
benchmark that runs outside pytest (ProgramBench's Docker policy) loads no runner. ``_LAZY`` lists the same names as
the ``TYPE_CHECKING`` block (``tests/test_api.py`` holds them together).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.core.lazy import lazy_exports

if TYPE_CHECKING:
    # the declaration: what a benchmark is, and the trial that runs each instance's life
    from harness.core.adapter import InstanceSpec
    from harness.core.errors import InfraError, RefusalError
    from harness.runner.trial import (
        AgentSeed,
        DeclaredBenchmark,
        Kept,
        SandboxPlan,
        Trial,
        Verdict,
    )
    from harness.runner.agent_choice import AgentChoice, agent_choice, run_trial
    # records: a row, its typed detail sections, the manifest, the ledger, the run model
    from harness.core.outcomes import INSTANCE_ID_RE, Outcome
    from harness.core.models import RESOLVED_AT, Manifest, TaskRow
    from harness.core.row_details import (
        AgentDetails,
        EngineDetails,
        EvalDetails,
        RowDetails,
        SubmissionDetails,
    )
    from harness.run.ledger import (
        LedgerError,
        LedgerWriter,
        ledger_path,
        read_ledger,
        refresh_figures,
    )
    from harness.run.manifest import ManifestError, read_manifest, reportability, write_manifest
    from harness.run.model import RunModel
    from harness.run.merge import changed_shards
    from harness.run.locate import is_carried, row_root, run_roots
    # files: atomic writes, and reading what an agent wrote (untrusted)
    from harness.core.cache import cache_root
    from harness.core.fsutil import (
        atomic_write_bytes,
        atomic_write_json,
        atomic_write_text,
        create_exclusive,
        read_json,
    )
    from harness.core.untrusted import (
        UntrustedFileError,
        hash_untrusted_file,
        is_regular_file,
        open_regular,
        read_capped,
        read_untrusted_bytes,
        read_untrusted_text,
    )
    # errors and options
    from harness.core.errors import RenamedOption, refuse_renamed
    from harness.runner.options import positive as check_positive
    from harness.runner.options import whole as check_whole
    # registration: a benchmark's entry point, the images it builds, its command line
    from harness.core.adapter import BenchmarkAdapter
    from harness.core.registry import BenchmarkRegistration, ImageStep
    from harness.core.commands import dispatch
    # sandboxes: containers, exec, networks, labels, cleanup, the engine's client
    from harness.sandbox.container import Sandbox, SandboxSpec
    from harness.sandbox.execution import MAX_OUTPUT_BYTES, ExecResult
    from harness.sandbox.container_exit import ContainerExit
    from harness.sandbox.errors import DockerUnavailable, ProtectedInstallFailed, SandboxError
    from harness.sandbox.client import get_client, long_timeout
    from harness.sandbox.active_engine import instance_environment
    from harness.sandbox.network import create_internal_network
    from harness.sandbox.labels import (
        RECIPE as RECIPE_LABEL,
        RUN as RUN_LABEL,
        TTL as TTL_LABEL,
        run_labels,
    )
    from harness.sandbox.cleanup import lock_is_held, remove_labelled, run_lock
    # images: built from recipes on the local base, or pulled
    from harness.sandbox.images.recipes import AGENT_UID, AGENT_USER, LayerRecipe, base_recipe
    from harness.sandbox.images.build import BuiltImage, cache_dir_for, ensure_image
    from harness.sandbox.images.pull_settings import PullSettings
    from harness.sandbox.images.pull import resolve_image
    # copy in (trusted trees and files) and copy out (bounded, inert)
    from harness.sandbox.pack import (
        NewDir,
        NewFile,
        join_tars,
        pack_bytes,
        pack_dirs,
        pack_files,
        pack_tree,
    )
    from harness.sandbox.limits import CopyLimits
    from harness.sandbox.transfer import (
        DIR,
        FILE,
        HARDLINK,
        PROTECTED,
        PROTECTED_CONTENT,
        SPECIAL,
        SYMLINK,
        ArchiveBroken,
        Budget,
        CopyRefused,
        Exclude,
        Member,
        ProtectedContent,
        extract_to,
    )
    # protected reference executables (the judge's, out of the program's reach)
    from harness.sandbox.protected import (
        LAUNCHER_FAILED_PREFIX,
        PROTECTED_SANDBOX_CAP_DROP,
        PROTECTED_SANDBOX_ULIMITS,
        PROTECT_TIMEOUT_S,
        ProtectedExecutable,
        ProtectedMissing,
    )
    # agents: the neutral request and outcome, oracles, the agent server's records
    from harness.agents.base import (
        Acceptance,
        Agent,
        AgentCapabilities,
        AgentOutcome,
        AgentRequest,
        AgentTerms,
        OracleCallable,
        OraclePlan,
        OracleUnavailable,
        ProtectedPath,
        agent_class,
    )
    from harness.agents.gateway.models import (
        AcceptanceClaim,
        BudgetProfile,
        ExecutorRef,
        ProtectedArtifact,
        ResourcePolicy,
        TaskCreateRequest,
    )
    from harness.agents.gateway.checkpoint import AgentFolder, new_task_id
    from harness.agents.gateway.events import usage_with_tokens
    # the runner: an instance's context, its phase deadlines, the selection
    from harness.runner.instance import InstanceContext, RunContext
    from harness.runner.deadlines import phase_deadline
    from harness.runner.selection import ancestor_manifest, names_folder, requested_ids
    # what a benchmark reads of the runner's own settings and items (never its plugins)
    from harness.runner.worker import item_spec
    from harness.runner.sandbox_fixtures import copy_limits
    from harness.runner.pull_plugin import pull_settings

_LAZY = {
    # the declaration: what a benchmark is, and the trial that runs each instance's life
    "InstanceSpec": "harness.core.adapter",
    "InfraError": "harness.core.errors",
    "RefusalError": "harness.core.errors",
    "DeclaredBenchmark": "harness.runner.trial",
    "Kept": "harness.runner.trial",
    "SandboxPlan": "harness.runner.trial",
    "Trial": "harness.runner.trial",
    "Verdict": "harness.runner.trial",
    "AgentChoice": "harness.runner.agent_choice",
    "AgentSeed": "harness.runner.trial",
    "agent_choice": "harness.runner.agent_choice",
    "run_trial": "harness.runner.agent_choice",
    # records: a row, its typed detail sections, the manifest, the ledger, the run model
    "INSTANCE_ID_RE": "harness.core.outcomes",
    "RESOLVED_AT": "harness.core.models",
    "AgentDetails": "harness.core.row_details",
    "EngineDetails": "harness.core.row_details",
    "EvalDetails": "harness.core.row_details",
    "Manifest": "harness.core.models",
    "Outcome": "harness.core.outcomes",
    "RowDetails": "harness.core.row_details",
    "SubmissionDetails": "harness.core.row_details",
    "TaskRow": "harness.core.models",
    "LedgerError": "harness.run.ledger",
    "LedgerWriter": "harness.run.ledger",
    "ledger_path": "harness.run.ledger",
    "read_ledger": "harness.run.ledger",
    "refresh_figures": "harness.run.ledger",
    "ManifestError": "harness.run.manifest",
    "read_manifest": "harness.run.manifest",
    "reportability": "harness.run.manifest",
    "write_manifest": "harness.run.manifest",
    "RunModel": "harness.run.model",
    "changed_shards": "harness.run.merge",
    "is_carried": "harness.run.locate",
    "row_root": "harness.run.locate",
    "run_roots": "harness.run.locate",
    # files: atomic writes, and reading what an agent wrote (untrusted)
    "cache_root": "harness.core.cache",
    "atomic_write_bytes": "harness.core.fsutil",
    "atomic_write_json": "harness.core.fsutil",
    "atomic_write_text": "harness.core.fsutil",
    "create_exclusive": "harness.core.fsutil",
    "read_json": "harness.core.fsutil",
    "UntrustedFileError": "harness.core.untrusted",
    "hash_untrusted_file": "harness.core.untrusted",
    "is_regular_file": "harness.core.untrusted",
    "open_regular": "harness.core.untrusted",
    "read_capped": "harness.core.untrusted",
    "read_untrusted_bytes": "harness.core.untrusted",
    "read_untrusted_text": "harness.core.untrusted",
    # errors and options
    "RenamedOption": "harness.core.errors",
    "refuse_renamed": "harness.core.errors",
    "check_positive": "harness.runner.options:positive",  # a type= for a positive number
    "check_whole": "harness.runner.options:whole",  # a type= for a whole number
    # registration: a benchmark's entry point, the images it builds, its command line
    "BenchmarkAdapter": "harness.core.adapter",
    "BenchmarkRegistration": "harness.core.registry",
    "ImageStep": "harness.core.registry",
    "dispatch": "harness.core.commands",
    # sandboxes: containers, exec, networks, labels, cleanup, the engine's client
    "Sandbox": "harness.sandbox.container",
    "SandboxSpec": "harness.sandbox.container",
    "MAX_OUTPUT_BYTES": "harness.sandbox.execution",
    "ContainerExit": "harness.sandbox.container_exit",
    "ExecResult": "harness.sandbox.execution",
    "DockerUnavailable": "harness.sandbox.errors",
    "ProtectedInstallFailed": "harness.sandbox.errors",
    "SandboxError": "harness.sandbox.errors",
    "get_client": "harness.sandbox.client",
    "long_timeout": "harness.sandbox.client",
    "instance_environment": "harness.sandbox.active_engine",
    "create_internal_network": "harness.sandbox.network",
    "RECIPE_LABEL": "harness.sandbox.labels:RECIPE",
    "RUN_LABEL": "harness.sandbox.labels:RUN",
    "TTL_LABEL": "harness.sandbox.labels:TTL",
    "run_labels": "harness.sandbox.labels",
    "lock_is_held": "harness.sandbox.cleanup",
    "remove_labelled": "harness.sandbox.cleanup",
    "run_lock": "harness.sandbox.cleanup",
    # images: built from recipes on the local base, or pulled
    "AGENT_UID": "harness.sandbox.images.recipes",
    "AGENT_USER": "harness.sandbox.images.recipes",
    "BuiltImage": "harness.sandbox.images.build",
    "LayerRecipe": "harness.sandbox.images.recipes",
    "base_recipe": "harness.sandbox.images.recipes",
    "cache_dir_for": "harness.sandbox.images.build",
    "ensure_image": "harness.sandbox.images.build",
    "PullSettings": "harness.sandbox.images.pull_settings",
    "resolve_image": "harness.sandbox.images.pull",
    # copy in (trusted trees and files) and copy out (bounded, inert)
    "NewDir": "harness.sandbox.pack",
    "NewFile": "harness.sandbox.pack",
    "join_tars": "harness.sandbox.pack",
    "pack_bytes": "harness.sandbox.pack",
    "pack_dirs": "harness.sandbox.pack",
    "pack_files": "harness.sandbox.pack",
    "pack_tree": "harness.sandbox.pack",
    "CopyLimits": "harness.sandbox.limits",
    "DIR": "harness.sandbox.transfer",
    "FILE": "harness.sandbox.transfer",
    "HARDLINK": "harness.sandbox.transfer",
    "PROTECTED": "harness.sandbox.transfer",
    "PROTECTED_CONTENT": "harness.sandbox.transfer",
    "SPECIAL": "harness.sandbox.transfer",
    "SYMLINK": "harness.sandbox.transfer",
    "ArchiveBroken": "harness.sandbox.transfer",
    "Budget": "harness.sandbox.transfer",
    "CopyRefused": "harness.sandbox.transfer",
    "Exclude": "harness.sandbox.transfer",
    "Member": "harness.sandbox.transfer",
    "ProtectedContent": "harness.sandbox.transfer",
    "extract_to": "harness.sandbox.transfer",
    # protected reference executables (the judge's, out of the program's reach)
    "LAUNCHER_FAILED_PREFIX": "harness.sandbox.protected",
    "PROTECTED_SANDBOX_CAP_DROP": "harness.sandbox.protected",
    "PROTECTED_SANDBOX_ULIMITS": "harness.sandbox.protected",
    "PROTECT_TIMEOUT_S": "harness.sandbox.protected",
    "ProtectedExecutable": "harness.sandbox.protected",
    "ProtectedMissing": "harness.sandbox.protected",
    # agents: the neutral request and outcome, oracles, the agent server's records
    "Acceptance": "harness.agents.base",
    "Agent": "harness.agents.base",
    "AgentCapabilities": "harness.agents.base",
    "AgentOutcome": "harness.agents.base",
    "AgentRequest": "harness.agents.base",
    "AgentTerms": "harness.agents.base",
    "ProtectedPath": "harness.agents.base",
    "OracleCallable": "harness.agents.base",
    "OraclePlan": "harness.agents.base",
    "OracleUnavailable": "harness.agents.base",
    "agent_class": "harness.agents.base",
    "AcceptanceClaim": "harness.agents.gateway.models",
    "BudgetProfile": "harness.agents.gateway.models",
    "ExecutorRef": "harness.agents.gateway.models",
    "ProtectedArtifact": "harness.agents.gateway.models",
    "ResourcePolicy": "harness.agents.gateway.models",
    "TaskCreateRequest": "harness.agents.gateway.models",
    "AgentFolder": "harness.agents.gateway.checkpoint",
    "new_task_id": "harness.agents.gateway.checkpoint",
    "usage_with_tokens": "harness.agents.gateway.events",
    # the runner: an instance's context, its phase deadlines, the selection
    "InstanceContext": "harness.runner.instance",
    "RunContext": "harness.runner.instance",
    "phase_deadline": "harness.runner.deadlines",
    "ancestor_manifest": "harness.runner.selection",
    "names_folder": "harness.runner.selection",
    "requested_ids": "harness.runner.selection",
    # what a benchmark reads of the runner's own settings and items (never its plugins)
    "item_spec": "harness.runner.worker",
    "copy_limits": "harness.runner.sandbox_fixtures",
    "pull_settings": "harness.runner.pull_plugin",
}
__getattr__ = lazy_exports(__name__, _LAZY)
