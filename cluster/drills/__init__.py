"""Failover drills: a workload recorded into a History, a fault, and a checker.

A drill runs producers and consumers against a local cluster while a fault is injected (kill -9
of the master, SIGSTOP, a network partition, ...). Every send (ok / failed / unknown), receive,
ack and fault lands in a `history.History`; `checker.check` turns it into a `DrillResult` (lost,
phantom, duplicated and reordered messages, recovery time) and `report` renders the table.
"""
