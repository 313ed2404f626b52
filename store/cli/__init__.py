"""`python -m store`: the store tool (see store.cli.store_cli)."""
