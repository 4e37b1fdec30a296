"""The agent-server client: the ``gateway`` agent kind and the HTTP task API it drives."""
