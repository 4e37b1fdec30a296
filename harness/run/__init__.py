"""Run records: the ledger, the manifest, plans, resume, merge and the secrets scan (pure logic over files, no pytest)."""
