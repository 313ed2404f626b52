"""Helpers of the transaction tests: in-process nodes with transaction keys for tests, v2
calls, and a producer's Telemetry stream that collects what the server pushes."""
from __future__ import annotations

import os
import queue
import threading
import time

import grpc

from cluster.node.node import Node
from cluster.node.node_config import NodeConfig
from proto.apache.rocketmq.v2 import definition_pb2 as d
from proto.apache.rocketmq.v2 import service_pb2 as s
from store.clock import ManualClock
from store.config import StoreConfig
from tests.integration.harness import free_port, wait_until

TOPIC = "Tx"
TIMEOUT_MS = 60_000  # transactionTimeOut: never reached by the real clock during a test
FAST_HA = dict(ha_send_heartbeat_interval=200, ha_housekeeping_interval=3000,
               ha_max_time_slave_not_catchup=1500, slave_timeout=1000,
               ha_reconnect_min_backoff=100, ha_reconnect_max_backoff=500)


def make_node(root, name="master", role="ASYNC_MASTER", broker_id=0, master_address="",
              port=0, **node_keys) -> Node:
    store = StoreConfig(store_path_root_dir=os.path.join(str(root), name), broker_role=role,
                        listen_port=port or free_port(), broker_ip1="127.0.0.1",
                        mapped_file_size_commit_log=1024 * 1024, ha_master_address=master_address,
                        **FAST_HA)
    keys = dict(default_topic_queue_nums=1, transaction_timeout_ms=TIMEOUT_MS,
                transaction_check_interval_ms=3600_000)
    keys.update(node_keys)
    node = Node(NodeConfig(admin_token="t", broker_id=broker_id, store=store, **keys))
    node.start()
    return node


def tx_msg(body=b"order", topic=TOPIC, **sp) -> d.Message:
    sp.setdefault("message_id", f"01{time.monotonic_ns():032X}")
    sp.setdefault("message_type", d.TRANSACTION)
    return d.Message(topic=d.Resource(name=topic), body=body,
                     system_properties=d.SystemProperties(**sp))


def send_half(stub, body=b"order", **sp) -> s.SendResultEntry:
    r = stub.SendMessage(s.SendMessageRequest(messages=[tx_msg(body, **sp)]), timeout=5)
    assert r.status.code == d.OK, r.status
    [entry] = r.entries
    return entry


def end(stub, entry, resolution=d.COMMIT, topic=TOPIC, transaction_id=None, message_id=None,
        source=d.SOURCE_CLIENT):
    return stub.EndTransaction(s.EndTransactionRequest(
        topic=d.Resource(name=topic),
        message_id=entry.message_id if message_id is None else message_id,
        transaction_id=entry.transaction_id if transaction_id is None else transaction_id,
        resolution=resolution, source=source), timeout=5).status


def pull_all(stub, topic=TOPIC, queue_id=0):
    req = s.PullMessageRequest(group=d.Resource(name="G"), offset=0, batch_size=32,
                               message_queue=d.MessageQueue(topic=d.Resource(name=topic), id=queue_id),
                               filter_expression=d.FilterExpression(type=d.TAG, expression="*"))
    items = list(stub.PullMessage(req, timeout=5))
    return [i.message for i in items if i.WhichOneof("content") == "message"]


def queue_records(node, topic, queue_id=0):
    wait_until(lambda: dispatched(node), 5, "dispatch")
    return node.store.get_messages(topic, queue_id, node.store.min_offset_in_queue(topic, queue_id),
                                   64).messages


def dispatched(node):
    return node.store.reput.reput_from_offset >= node.store.max_phy_offset()


class Producer:
    """A producer's Telemetry stream: settings sent, replies and pushed commands collected."""

    def __init__(self, stub, topics=(TOPIC,), client_id="producer-1") -> None:
        self.requests: queue.Queue = queue.Queue()
        self.received: queue.Queue = queue.Queue()
        self.call = stub.Telemetry(self._requests(), timeout=60,
                                   metadata=[("x-mq-client-id", client_id)])
        self.thread = threading.Thread(target=self._collect, daemon=True)
        self.thread.start()
        settings = d.Settings(client_type=d.PRODUCER,
                              publishing=d.Publishing(topics=[d.Resource(name=t) for t in topics]))
        self.requests.put(s.TelemetryCommand(settings=settings))
        reply = self.received.get(timeout=5)
        assert reply.status.code == d.OK and reply.settings.publishing.max_body_size > 0

    def _requests(self):
        while True:
            item = self.requests.get()
            if item is None:
                return
            yield item

    def _collect(self) -> None:
        try:
            for item in self.call:
                self.received.put(item)
        except grpc.RpcError:
            pass

    def command(self, timeout=5.0) -> s.RecoverOrphanedTransactionCommand:
        item = self.received.get(timeout=timeout)
        assert item.WhichOneof("command") == "recover_orphaned_transaction_command", item
        return item.recover_orphaned_transaction_command

    def close(self) -> None:
        self.requests.put(None)
        self.call.cancel()


def checker_at(node, clock_ms: int):
    checker = node.messaging.transaction_checker
    checker.clock = ManualClock(clock_ms)
    return checker


def later(seconds: float = TIMEOUT_MS / 1000 + 1) -> int:
    return int(time.time() * 1000 + seconds * 1000)
