"""Replication protocol logic without I/O: sessions, ack tracker, epochs."""
