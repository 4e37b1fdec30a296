"""Helpers of the model gateway tests: an in-sandbox python agent that uses the real
OpenAI SDK (copied into the running sandbox by a watcher thread: the sandbox has no
network to install it), and its probes of the sandbox (provider key, outbound routes)."""

from __future__ import annotations

import io
import json
import tarfile
import threading
import time
from importlib import metadata
from pathlib import Path
from typing import Any

import docker
from packaging.requirements import Requirement

SDK_DIR = "/tmp/sdk"
AGENT_COMMAND = (f"i=0; while [ ! -f {SDK_DIR}/READY ] && [ $i -lt 600 ]; do sleep 0.2; "
                 f"i=$((i+1)); done; exec python3 {SDK_DIR}/agent.py")

AGENT = r'''
import json, os, socket, subprocess, sys
sys.path.insert(0, "/tmp/sdk")
import openai
from openai import OpenAI

PARAMS = json.loads(PARAMS_JSON)
KEY = "".join(PARAMS["key_parts"])  # split so this file does not contain the key
report = {"base_url_is_gateway":
          os.environ.get("OPENAI_BASE_URL") == "http://model-gateway:8080/v1"}

def probes():
    report["env_has_key"] = any(KEY in v for v in os.environ.values())
    hits = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        for part in ("environ", "cmdline"):
            try:
                with open(f"/proc/{pid}/{part}", "rb") as fh:
                    if KEY.encode() in fh.read():
                        hits.append(f"/proc/{pid}/{part}")
            except OSError:
                pass
    report["proc_with_key"] = hits
    found = []
    for top in ("/tmp", "/workspace", "/home", "/etc", "/root", "/var", "/opt", "/run"):
        for root, dirs, files in os.walk(top):
            for name in files:
                path = os.path.join(root, name)
                if path.startswith("/tmp/sdk/"):
                    continue
                try:
                    with open(path, "rb") as fh:
                        if KEY.encode() in fh.read(8 << 20):
                            found.append(path)
                except OSError:
                    pass
    report["files_with_key"] = found
    out = {}
    for host, port in PARAMS["outbound"]:
        s = socket.socket()
        s.settimeout(4)
        try:
            s.connect((host, port))
            out[f"{host}:{port}"] = "connected"
        except OSError as exc:
            out[f"{host}:{port}"] = f"failed: {exc}"
        finally:
            s.close()
    try:
        socket.getaddrinfo("example.com", 443)
        out["dns"] = "resolved"
    except OSError as exc:
        out["dns"] = f"failed: {exc}"
    report["outbound"] = out

if PARAMS.get("probe"):
    probes()
client = OpenAI(max_retries=0)
tool = {"type": "function", "function": {"name": "bash", "parameters": {"type": "object",
        "properties": {"command": {"type": "string"}}, "required": ["command"]}}}
messages = [{"role": "user", "content": open(os.environ["HARNESS_INSTRUCTION_FILE"]).read()}]
status = "steps_exhausted"
for step in range(PARAMS.get("max_steps", 50)):
    try:
        if PARAMS.get("stream"):
            calls = {}
            text = ""
            for chunk in client.chat.completions.create(model=PARAMS["model"],
                                                        messages=messages, tools=[tool],
                                                        stream=True):
                if not chunk.choices:
                    report["saw_usage_chunk"] = True
                    continue
                delta = chunk.choices[0].delta
                text += delta.content or ""
                for tc in delta.tool_calls or []:
                    entry = calls.setdefault(tc.index, {"id": None, "args": ""})
                    entry["id"] = tc.id or entry["id"]
                    entry["args"] += (tc.function.arguments or "") if tc.function else ""
            tool_calls = [(c["id"], json.loads(c["args"])["command"]) for c in calls.values()]
        else:
            resp = client.chat.completions.create(model=PARAMS["model"], messages=messages,
                                                  tools=[tool])
            msg = resp.choices[0].message
            text = msg.content or ""
            tool_calls = [(c.id, json.loads(c.function.arguments)["command"])
                          for c in msg.tool_calls or []]
    except openai.APIStatusError as exc:
        report["refused"] = {"status": exc.status_code, "body": str(exc)[:500]}
        status = "refused"
        break
    messages.append({"role": "assistant", "content": text, "tool_calls": [
        {"id": i, "type": "function", "function": {"name": "bash",
         "arguments": json.dumps({"command": c})}} for i, c in tool_calls]})
    done = False
    for call_id, command in tool_calls:
        proc = subprocess.run(["bash", "-lc", command], cwd="/workspace", text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if proc.stdout.strip() == "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT":
            done = True
        messages.append({"role": "tool", "tool_call_id": call_id, "content": proc.stdout})
    report["steps"] = step + 1
    if done:
        status = "submitted"
        break
report["status"] = status
print("AGENT_REPORT " + json.dumps(report), flush=True)
sys.exit(0 if status == "submitted" else 3)
'''


def agent_source(params: dict[str, Any]) -> str:
    return f"PARAMS_JSON = {json.dumps(json.dumps(params))}\n" + AGENT


def sdk_distributions(root: str = "openai") -> list[str]:
    """``root`` and every distribution it requires (extras left out), installed here."""
    seen: list[str] = []
    todo = [root]
    while todo:
        name = todo.pop().lower().replace("_", "-")
        if name in seen:
            continue
        seen.append(name)
        for text in metadata.requires(name) or []:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return seen


def _sdk_tar(params: dict[str, Any]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for dist in sdk_distributions():
            for rel in metadata.files(dist) or []:
                path = Path(str(rel.locate()))
                if rel.parts[0] == ".." or "__pycache__" in rel.parts or not path.is_file():
                    continue
                tar.add(path, arcname="sdk/" + "/".join(rel.parts))
        data = agent_source(params).encode()
        info = tarfile.TarInfo("sdk/agent.py")
        info.size, info.mode = len(data), 0o644
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _ready_tar() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("sdk/READY")
        tar.addfile(info, io.BytesIO(b""))
    return buf.getvalue()


class SdkInjector:
    """Watches for the sandbox of ``run_root`` and copies the SDK and the agent into it."""

    def __init__(self, run_root: Path, params: dict[str, Any], timeout_s: float = 600) -> None:
        self.run_root = str(run_root.absolute())
        self.params = params
        self.timeout_s = timeout_s
        self.injected: list[str] = []
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> SdkInjector:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _watch(self) -> None:
        try:
            self._inject()
        except Exception as exc:  # reported by the test through .error
            self.error = f"{type(exc).__name__}: {exc}"

    def _inject(self) -> None:
        client = docker.from_env()
        payload = _sdk_tar(self.params)
        deadline = time.monotonic() + self.timeout_s
        while not self._stop.is_set() and time.monotonic() < deadline:
            try:
                found = client.containers.list(
                    filters={"label": f"harness.run_root={self.run_root}"})
                for c in found:
                    if c.id in self.injected or c.name.startswith("harness-gw"):
                        continue
                    if c.attrs["Config"].get("User") not in ("0", "", "root"):
                        continue
                    c.put_archive("/tmp", payload)
                    c.put_archive("/tmp", _ready_tar())
                    self.injected.append(c.id)
            except docker.errors.APIError as exc:  # gone meanwhile: keep watching
                self.error = str(exc)
            time.sleep(0.2)


def agent_report(stdout: str) -> dict[str, Any]:
    for line in stdout.splitlines():
        if line.startswith("AGENT_REPORT "):
            return dict(json.loads(line[len("AGENT_REPORT "):]))
    raise AssertionError(f"no agent report in:\n{stdout[-2000:]}")


def files_containing(root: Path, needle: bytes) -> list[str]:
    hits = []
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink() and needle in path.read_bytes():
            hits.append(str(path))
    return hits


FAKE_MODEL = "fake-model"
PER_CALL_USD = (1000 * 2.0 + 100 * 10.0) / 1e6  # one scripted step (1000 in, 100 out) at these prices


def fake_model_prices(folder: Path) -> Path:
    """``--model-prices`` for the in-sandbox SDK agent's model: $2 in and $10 out per
    million tokens."""
    path = folder / "prices.json"
    path.write_text(json.dumps({"models": {FAKE_MODEL: {"input_per_mtok": 2.0,
                                                        "output_per_mtok": 10.0}}}))
    return path
