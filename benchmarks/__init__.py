"""Benchmark adapters. Benchmark knowledge lives only here, never in ``harness``."""
