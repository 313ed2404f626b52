"""Retention and the disk guard (retention) and what a forced cleanup may delete
(retention_guard).
"""
