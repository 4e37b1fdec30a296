"""A Harbor task folder, read: ``task.toml``, ``instruction.md``, ``environment/``,
``tests/test.sh``, ``solution/solve.sh`` (the format as Harbor 0.13 reads it; fields it
ignores are ignored here too, legacy names are taken as Harbor takes them)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from harness.api import RefusalError

DEFAULT_AGENT_TIMEOUT_S = 600.0  # Harbor's default before it allowed none (Nov 2025)
_CANARY = re.compile(r"^\s*(#.*canary.*|<!--.*canary.*-->)\s*$", re.IGNORECASE)
_TEMPLATE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-(.*?))?\}")
_UNITS = {"G": 1024.0, "M": 1.0, "K": 1 / 1024}


class _Section(BaseModel):
    model_config = ConfigDict(extra="ignore")


MAX_TIMEOUT_S = 7 * 24 * 3600.0


class VerifierConfig(_Section):
    timeout_sec: float = Field(default=600.0, gt=0, le=MAX_TIMEOUT_S)
    env: dict[str, str] = Field(default_factory=dict)
    user: str | int | None = None


class AgentConfig(_Section):
    timeout_sec: float | None = Field(default=None, gt=0, le=MAX_TIMEOUT_S)
    user: str | int | None = None


class EnvironmentConfig(_Section):
    build_timeout_sec: float = Field(default=600.0, gt=0, le=MAX_TIMEOUT_S)
    docker_image: str | None = None
    cpus: float | None = Field(default=None, ge=0.1, le=1024)
    memory_mb: int | None = Field(default=None, ge=64)
    storage_mb: int | None = Field(default=None, gt=0)
    env: dict[str, str] = Field(default_factory=dict)
    workdir: str | None = None
    network_mode: str = "public"

    @model_validator(mode="before")
    @classmethod
    def _legacy(cls, data: Any) -> Any:
        """``memory = "2G"`` and ``storage`` as MB; ``allow_internet`` as a network mode."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        for old, new in (("memory", "memory_mb"), ("storage", "storage_mb")):
            value = data.pop(old, None)
            if isinstance(value, str) and new not in data:
                m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([GMK])B?\s*", value, re.IGNORECASE)
                if m is None:
                    raise ValueError(f"{old} = {value!r}: write it as memory_mb (an integer)")
                data[new] = int(float(m.group(1)) * _UNITS[m.group(2).upper()])
        allow = data.pop("allow_internet", None)
        if allow is not None and "network_mode" not in data:
            data["network_mode"] = "public" if allow else "no-network"
        return data


class SolutionConfig(_Section):
    env: dict[str, str] = Field(default_factory=dict)


class TaskConfig(_Section):
    metadata: dict[str, Any] = Field(default_factory=dict)
    verifier: VerifierConfig = Field(default_factory=VerifierConfig)
    agent: AgentConfig = Field(default_factory=AgentConfig)
    environment: EnvironmentConfig = Field(default_factory=EnvironmentConfig)
    solution: SolutionConfig = Field(default_factory=SolutionConfig)
    steps: list[Any] | None = None


class HarborTask(BaseModel):
    """One task folder, checked."""

    model_config = ConfigDict(frozen=True)

    name: str  # the folder's name: the instance id
    folder: Path
    config: TaskConfig
    instruction: str

    @property
    def agent_timeout_s(self) -> float:
        return self.config.agent.timeout_sec or DEFAULT_AGENT_TIMEOUT_S

    @property
    def has_solution(self) -> bool:
        return (self.folder / "solution" / "solve.sh").is_file()

    @property
    def dockerfile(self) -> Path | None:
        path = self.folder / "environment" / "Dockerfile"
        return path if path.is_file() else None


def resolve_env(env: dict[str, str], where: str) -> dict[str, str]:
    """``${VAR:-default}`` as its default; ``${VAR}`` is refused: a task folder never reads
    this machine's environment (a task could name the provider's key)."""
    def sub(m: re.Match[str]) -> str:
        if m.group(2) is None:
            raise RefusalError(f"{where}: an env value reads ${{{m.group(1)}}} from this "
                               f"machine; give the value in the task (or a default, "
                               f"${{{m.group(1)}:-value}})", stage="options",
                               reason="harbor_task_invalid")
        return m.group(2)

    return {key: _TEMPLATE.sub(sub, value) for key, value in env.items()}


def strip_canary(text: str) -> str:
    lines = text.splitlines(keepends=True)
    while lines and _CANARY.match(lines[0]):
        lines.pop(0)
    return "".join(lines)


def _refuse(folder: Path, what: str) -> RefusalError:
    return RefusalError(f"Harbor task {folder}: {what}", stage="options",
                        reason="harbor_task_invalid")


NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
PARTS = ("task.toml", "instruction.md", "environment", "tests", "tests/test.sh", "solution",
         "solution/solve.sh", "environment/Dockerfile")


def _links(folder: Path) -> list[str]:
    """The parts of a task folder that are links (a link could bring a host file into the
    agent's instruction, its image or its sandbox)."""
    return [part for part in PARTS if (folder / part).is_symlink()]


def load_task(folder: Path) -> HarborTask:
    """The task in ``folder``; a folder that is not a task raises one line naming the fix."""
    if not NAME.match(folder.name) or ".." in folder.name:
        raise _refuse(folder, "its name must be 1 to 64 letters, digits, '.', '_' or '-' "
                              "(it is the instance id); rename the folder")
    if folder.is_symlink() or (linked := _links(folder)):
        raise _refuse(folder, f"{', '.join(linked) if not folder.is_symlink() else 'it'} is "
                              "a symbolic link; copy the file in")
    toml = folder / "task.toml"
    try:
        raw = tomllib.loads(toml.read_text(encoding="utf-8"))
        config = TaskConfig.model_validate(raw)
    except UnicodeDecodeError:
        raise _refuse(folder, "task.toml is not UTF-8") from None
    except OSError as exc:
        raise _refuse(folder, f"cannot read task.toml ({exc.strerror})") from None
    except tomllib.TOMLDecodeError as exc:
        raise _refuse(folder, f"task.toml is not TOML: {exc}") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        raise _refuse(folder, f"task.toml {loc}: {first['msg']}") from None
    if not (folder / "instruction.md").is_file():
        raise _refuse(folder, "no instruction.md")
    if not (folder / "tests" / "test.sh").is_file():
        raise _refuse(folder, "no tests/test.sh")
    if not (folder / "environment").is_dir():
        raise _refuse(folder, "no environment/ folder")
    if not (folder / "environment" / "Dockerfile").is_file() \
            and not config.environment.docker_image:
        raise _refuse(folder, "no environment/Dockerfile and no [environment].docker_image "
                              "(a task's own docker-compose.yaml is not supported)")
    if config.steps:
        raise _refuse(folder, "a multi-step task ([[steps]]) is not supported")
    resolve_env(config.environment.env, str(toml))
    resolve_env(config.verifier.env, str(toml))
    resolve_env(config.solution.env, str(toml))
    try:
        instruction = (folder / "instruction.md").read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise _refuse(folder, "instruction.md is not UTF-8") from None
    return HarborTask(name=folder.name, folder=folder.resolve(), config=config,
                      instruction=strip_canary(instruction))


def load_tasks(root: Path) -> list[HarborTask]:
    """A task folder, or a folder of task folders (each with a task.toml), by name."""
    if not root.is_dir():
        raise RefusalError(f"--harbor-tasks {root}: no such folder; name a Harbor task folder "
                           f"or a folder of them", stage="options", reason="harbor_task_invalid")
    if (root / "task.toml").is_file():
        return [load_task(root)]
    folders = sorted(p for p in root.iterdir() if (p / "task.toml").is_file())
    if not folders:
        raise RefusalError(f"--harbor-tasks {root}: no task.toml in it or in its folders",
                           stage="options", reason="harbor_task_invalid")
    return [load_task(p) for p in folders]
