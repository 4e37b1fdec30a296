"""Runtime attestation and the target-model preflight, against the reference server."""

from __future__ import annotations

import httpx
import pytest

from harness.agents.gateway.client import GatewayClient
from harness.agents.gateway.preflight import (
    attest_runtime,
    check_target_actor,
    model_form_problem,
    preflight_target_actor,
    require_runtime,
    version_matches,
)
from harness.core.errors import RefusalError
from tests.agents.agents_support import FAST, free_port

HEAD = "3f1c2a9b7d0e4f5a6b7c8d9e0f1a2b3c4d5e6f70"
SOLVE = "openai::gpt-5.5"


def _client(url: str) -> GatewayClient:
    return GatewayClient(url, policy=FAST.model_copy(update={"error_budget_s": 0.3}))


def test_attestation_ok_records_runtime_version(ref_server):
    server = ref_server({"runtime_version": "6.97.2"})
    with _client(server.url) as client:
        att = require_runtime(attest_runtime(client, expected_version="v6.97.2"))
    assert att.ok and att.reason is None and att.runtime_version == "6.97.2"
    assert att.base_url == server.url
    dumped = att.model_dump(by_alias=True)
    assert dumped["schema"] == "runtime_attestation.v1"
    assert set(dumped) == {  # the runtime_attestation.v1 record, exactly
        "schema",
        "checked_at_unix",
        "base_url",
        "runtime_version",
        "repo_dir",
        "repo_head",
        "repo_version",
        "expected_version",
        "http_error",
        "override_env",
        "override_set",
        "override_waives",
        "overridden",
        "reason",
        "ok",
    }


def test_unreachable_runtime_refuses_with_exit_3():
    with _client(f"http://127.0.0.1:{free_port()}") as client:
        att = attest_runtime(client, budget_s=0.3)
    assert att.reason == "runtime_unreachable" and att.http_error
    with pytest.raises(RefusalError) as info:
        require_runtime(att)
    assert info.value.exit_code == 2 and info.value.stage == "runtime_attestation"
    assert info.value.reason == "runtime_unreachable"


def test_health_without_runtime_version_refuses_even_with_waiver(ref_server):
    server = ref_server({"runtime_version": None})
    assert "runtime_version" not in httpx.get(f"{server.url}/api/health", trust_env=False).json()
    with _client(server.url) as client:
        att = attest_runtime(client, expected_version="6.97.2", allow_skew=True)
    assert att.reason == "runtime_version_absent" and not att.ok
    with pytest.raises(RefusalError) as info:
        require_runtime(att)
    assert info.value.exit_code == 2 and "runtime_version" in str(info.value)


def test_skew_refuses_unless_waived(ref_server):
    server = ref_server({"runtime_version": "6.98.0"})
    with _client(server.url) as client:
        att = attest_runtime(client, expected_version="6.97.2")
        waived = attest_runtime(client, expected_version="6.97.2", allow_skew=True)
    assert att.reason == "runtime_skew" and not att.ok
    with pytest.raises(RefusalError) as info:
        require_runtime(att)
    assert info.value.reason == "runtime_skew" and "--allow-runtime-skew" in str(info.value)
    assert "6.98.0" in str(info.value) and "6.97.2" in str(info.value)
    assert waived.ok and waived.overridden and waived.override_set
    assert waived.reason == "runtime_skew"  # recorded even when waived
    require_runtime(waived)


def test_expected_version_from_agent_repo_head(ref_server):
    server = ref_server({"runtime_version": HEAD[:12]})
    with _client(server.url) as client:
        ok = attest_runtime(client, repo_dir="/src/agent", repo_head=HEAD)
        missing = attest_runtime(client, repo_dir="/src/agent", repo_head=None)
    assert ok.ok and ok.expected_version == HEAD
    assert missing.reason == "commit_unavailable" and not missing.ok


def test_version_matching_rules():
    assert version_matches("v1.2.3", "1.2.3")
    assert version_matches("6.97.2+3f1c2a9", HEAD)
    assert version_matches(HEAD, "3f1c2a9b")
    assert not version_matches("6.97.2", "6.97.3")
    assert not version_matches("abc", "abcdef0")  # too short to be a SHA prefix


def test_settings_mismatch_names_each_slot(ref_server):
    server = ref_server(
        {
            "settings": {
                "OUROBOROS_MODEL": "openai::gpt-5",
                "OUROBOROS_MODEL_LIGHT": "openai::gpt-5-mini",
                "OUROBOROS_MODEL_CONSCIOUSNESS": SOLVE,
                "OPENAI_API_KEY": "sk-live-should-never-be-echoed",
            }
        }
    )
    settings = httpx.get(f"{server.url}/api/settings", trust_env=False).json()
    assert settings["OPENAI_API_KEY"] == "***"
    with _client(server.url) as client, pytest.raises(RefusalError) as info:
        preflight_target_actor(client, SOLVE)
    message = str(info.value)
    assert info.value.exit_code == 2 and info.value.stage == "target_actor_preflight"
    assert "OUROBOROS_MODEL='openai::gpt-5'" in message
    # --solve-model is the expected OUROBOROS_MODEL; the other slots are the profile's
    # (--settings-path), as the specification validates them (issue 43)
    assert "LIGHT" not in message and "CONSCIOUSNESS" not in message
    assert "sk-live" not in server.log_path.read_text()


def test_settings_matching_pass_and_record_the_actor(ref_server):
    server = ref_server(
        {
            "settings": {
                "OUROBOROS_MODEL": SOLVE,
                "OUROBOROS_MODEL_LIGHT": SOLVE,
                "OUROBOROS_MODEL_FALLBACKS": f"{SOLVE},{SOLVE}",
            }
        }
    )
    recorded: list[dict] = []
    with _client(server.url) as client:
        actor = preflight_target_actor(client, SOLVE, record=recorded.append)
    assert actor.ok and actor.routing == "direct"
    assert recorded == [actor.model_dump(mode="json")]
    assert set(actor.model_slots) == {
        "OUROBOROS_MODEL",
        "OUROBOROS_MODEL_LIGHT",
        "OUROBOROS_MODEL_FALLBACKS",
    }


def test_missing_primary_slot_refuses(ref_server):
    server = ref_server({"settings": {}})
    recorded: list[dict] = []
    with _client(server.url) as client, pytest.raises(RefusalError) as info:
        preflight_target_actor(client, SOLVE, record=recorded.append)
    assert "OUROBOROS_MODEL is not set" in str(info.value)
    # recorded before the refusal
    assert [m["problem"] for m in recorded[0]["mismatches"]] == ["absent"]


def test_model_id_form_direct_provider_wants_double_colon(ref_server):
    server = ref_server({"settings": {"OUROBOROS_MODEL": "openai/gpt-5.5"}})
    with _client(server.url) as client, pytest.raises(RefusalError) as info:
        preflight_target_actor(client, "openai/gpt-5.5")
    message = str(info.value)
    assert "use openai::gpt-5.5" in message
    assert "--solve-model" in message and "OUROBOROS_MODEL" in message


def test_model_id_form_router_wants_slash(ref_server):
    server = ref_server(
        {"settings": {"OUROBOROS_MODEL": "openai/gpt-5.5", "OPENROUTER_API_KEY": "sk-or-secret"}}
    )
    with _client(server.url) as client:
        assert preflight_target_actor(client, "openai/gpt-5.5").routing == "router"
        with pytest.raises(RefusalError) as info:
            preflight_target_actor(client, "openai::gpt-5.5")
    assert "use openai/gpt-5.5" in str(info.value)


def test_model_form_rules_are_pure():
    assert model_form_problem("moonshotai/kimi-k3", "direct") is None  # not migrated
    assert model_form_problem("anthropic/claude", "direct") is not None
    assert model_form_problem("anthropic::claude", "direct") is None
    actor = check_target_actor({"OUROBOROS_MODEL": "x"}, "x", slots=["OUROBOROS_MODEL"])
    assert actor.ok


def test_unreadable_settings_refuse():
    recorded: list[dict] = []
    with _client(f"http://127.0.0.1:{free_port()}") as client, pytest.raises(RefusalError) as info:
        preflight_target_actor(client, SOLVE, budget_s=0.3, record=recorded.append)
    assert info.value.reason == "settings_unavailable"
    assert len(recorded) == 1 and set(recorded[0]) == {"error"} and recorded[0]["error"]
