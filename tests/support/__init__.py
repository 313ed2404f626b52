"""Helpers the test packages share: tests import helpers from here (and fixtures come from
tests/conftest.py), never from another test module.

- waiting.py          wait_until, waiting_on (a long poll sitting in its wait on a ManualClock),
                      in_background, free_port, FAST_HA (short replication timings)
- nodes.py            in-process nodes (Nodes: masters and slaves in a folder, MessagingService
                      stubs, admin clients, client connections, restart, settle, wait_in_sync)
- v2.py               RocketMQ 5 (apache.rocketmq.v2) messages and calls over our generated
                      stubs: send, pull, receive, ack, routes, offsets, refused sends, transactions
- admin.py            Admin API messages and the code of a refused admin call
- client.py           reading a topic back through the client library
- streams.py          Outbox: the requests of a streaming call, fed as a test goes
- leader_store.py     LeaderStore: a store led by a MasterRole without a node (replicated tables;
                      the `leader` fixture), which can follow and lead again
- table_replay.py     assert_replays: a table state's replay property (from the start and from
                      a snapshot alone)
- etcd.py             EtcdServer: a real etcd on free ports (the `etcd` fixture), skipping
                      when no etcd is installed
- official_client.py  the official RocketMQ 5 client's tool scripts, run in a subprocess
- small_store.py      a MessageStore over tiny files (config, msg, opened) for the store tests
                      and the slave's
- scrape.py           a process's /metrics over HTTP, parsed

Real node processes are tests/integration/harness.py, which uses waiting.py and admin.py too.
"""
