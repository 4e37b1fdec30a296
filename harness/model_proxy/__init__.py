"""The model gateway: an OpenAI- and Anthropic-compatible HTTP endpoint on the host side
of the sandbox boundary that holds the provider key, forwards to ``--model-upstream``,
meters every call per instance and enforces ``--per-task-limit-usd``.

Modules: :mod:`.prices` (the ``--model-prices`` table), :mod:`.usage` (tokens and cost
from a response, streamed or not), :mod:`.pinning` (the models it forwards:
``--solve-model`` and ``--allow-model``), :mod:`.server` (the HTTP proxy on a Unix socket),
:mod:`.network` (the sandbox's internal network and its relay container), :mod:`.tape`
(``--model-record`` and ``--model-replay``: every exchange stored, and served back without
an upstream), :mod:`.replay_check` (``harness replay-check``: a run's instances re-run under
strict replay and compared with its rows). The ``command`` agent wired to the gateway is
:mod:`harness.agents.command_proxy`.
"""
