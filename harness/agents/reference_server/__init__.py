"""The reference agent server (``harness agent-server``): its app, tasks, execution and configuration."""
