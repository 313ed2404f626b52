"""Slave role: replication client, applying chunks, read-only serving."""
