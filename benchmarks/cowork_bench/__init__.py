"""Cowork Bench (``0717376/cowork_bench``): task discovery, Postgres sidecar, agent and eval
phases, eval-at-most-once, ledger classification, audit and the gateway task body.

The modules here know the upstream layout and contract; the runner core knows none of it.
"""

PINNED_COMMIT = "d943e75bc0fc8e3b27141979300cd8cbcd1e890d"
BENCHMARK = "cowork_bench"
