"""Test doubles shipped in the package: stand-ins for what cannot run in a test.

Each fakes one thing, says so in its name and is never used by a real run unless asked for
by name:

* the ``selftest`` benchmark (:mod:`.adapter`, :mod:`.plugin`, :mod:`.agent_task`): fakes a
  benchmark. Instances from a JSON file (``--selftest-tasks`` or
  ``$HARNESS_SELFTEST_TASKS``) that succeed, fail, crash, sleep or raise on request, so the
  runner (ledger, resume, shards, signals, budget) is tested without Docker or a scorer.
  A suite enables it with ``pytest_plugins = ["harness.testing.plugin"]`` in a conftest;
  :mod:`.suite` runs such a suite in a pytest subprocess and reads its run root.
* the fake model server (:mod:`.fake_model_server`): fakes an LLM provider. A scripted
  OpenAI- (and minimal Anthropic-) compatible HTTP server on loopback that replays canned
  responses and usage: ``python -m harness.testing.fake_model_server --script S.json``.
* the fake-file meter (:mod:`.fake_meter`): fakes a billing meter. ``--meter
  fake-file:PATH`` reads the key's "usage" from a file a test writes; the scheme exists
  only where it is loaded (``-p harness.testing.fake_meter``, or :mod:`.plugin`).

The reference agent server (``harness agent-server``, :mod:`harness.agents.reference_server.server`)
is the agent-server task API's reference implementation and self-test: it runs scripted
plans instead of a model. It stays with the agents, where users find it.
"""
