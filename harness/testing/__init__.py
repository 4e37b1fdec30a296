"""A tiny built-in benchmark for testing the runner without Docker (``selftest``).

Its instances come from a JSON file named by ``$HARNESS_SELFTEST_TASKS`` (or the
``--selftest-tasks`` option): a list of ``{"id": ..., "work": ..., ...}`` objects, where
``work`` is one of ``succeed`` (score 1), ``fail`` (score 0), ``partial`` (``score``),
``agent_fail``, ``sleep`` (``seconds``, then succeed), ``crash`` (``os._exit``),
``infra`` (an InfraError with ``reason``), ``raise`` (an unexpected exception); ``cost``
is the agent's reported cost in USD. Optional
``difficulty`` and ``language`` become markers; ``count`` expands an entry into N instances
``<id>-0000`` ... Each execution appends a line to ``<run_root>/selftest_executions.log``
(instance id and pid) so tests can count how often an instance really ran.
"""
