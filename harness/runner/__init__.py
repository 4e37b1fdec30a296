"""The pytest runner: the only package with pytest hooks and fixtures (plugin, controller, worker, instance)."""
