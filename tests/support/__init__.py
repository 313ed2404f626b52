"""Helpers shared by the test packages (never imported from a test module of another package):

- waiting.py   wait_until, free_port, FAST_HA (short replication timings, broker.conf names)
- nodes.py     in-process nodes (Nodes: start masters and slaves in a folder, stubs, admin
               clients and client connections, settle, stop everything); the fixtures that
               hand them out are in tests/conftest.py
- v2.py        RocketMQ 5 (apache.rocketmq.v2) messages and calls over our generated stubs:
               send, pull, receive, ack, routes, offsets, and transactions

Real node processes are tests/integration/harness.py, which uses waiting.py too.
"""
