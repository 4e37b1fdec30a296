"""The core: vocabulary, file models and crash-safe primitives every layer above uses (no pytest, no Docker)."""
