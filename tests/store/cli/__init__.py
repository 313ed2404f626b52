"""Tests of store/cli/: one module per command group."""
