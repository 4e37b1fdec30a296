"""A pytest-native runner for agent benchmarks."""

__version__ = "0.1.0"
