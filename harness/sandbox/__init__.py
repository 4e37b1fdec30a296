"""Docker sandboxes: local image builds, containers, exec, copy, cleanup."""
