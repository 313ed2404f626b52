"""The node's client API assembled: every part of the MessagingService built here, in the order
they depend on each other, and handed to it (the features never build each other).

    topics (replicated topic table) ─┬─> sender ──> the master's append (awaited)
                                     ├─> reader (PullMessage, QueryOffset) ─> dispatch waiter
                                     └─> consumers (replicated consumer state)
    consumers + dispatch waiter ──> ConsumeContext ──> SettleCalls, ConsumerCalls ──> router
    transactions ──> checker (check-back through the telemetry hub)
    forwarder (a slave's channel to its master) ──> router, telemetry relay, sends
"""
from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Callable, Sequence

from cluster.consume.consumer_calls import ConsumerCalls
from cluster.consume.consumer_service import ConsumerService
from cluster.consume.conversion_process import ConversionProcess
from cluster.consume.settle_calls import ConsumeContext, SettleCalls
from cluster.messaging.consumer_router import ConsumerRouter
from cluster.messaging.messaging_service import (CurrentSendLimits, MessagingService,
                                                 consume_settings)
from cluster.messaging.pull_reader import Reader
from cluster.messaging.route import TopicDefaults, TopicRegistry
from cluster.messaging.send import MasterForwarder, Sender
from cluster.messaging.telemetry import (MAX_ASYNC_LONG_POLLS, MAX_OPEN_STREAMS, StreamBudget,
                                         TelemetryHub)
from cluster.messaging.telemetry_relay import TelemetryRelay
from cluster.messaging.transaction import TransactionService
from cluster.messaging.transaction_check import TransactionChecker
from cluster.metadata.topic_table import TopicTable
from cluster.replicated.replicated_table import TableService
from cluster.security.access import AccessControl

if TYPE_CHECKING:
    from common.clock import Clock
    from store.message_store import MessageStore

    from cluster.config.cluster_route import ClusterRoute
    from cluster.config.live_config import LiveConfig
    from cluster.config.node_role import Role

log = logging.getLogger(__name__)


def build_messaging(role: "Role", store: "MessageStore", live: "LiveConfig", clock: "Clock",
                    advertised_address: Callable[[], str],
                    receipt_key: bytes | None = None,
                    group_members: Callable[[], Sequence[str]] = tuple,
                    cluster_route: Callable[[], "ClusterRoute | None"] = lambda: None,
                    fresh_route: Callable[[], "ClusterRoute | None"] = lambda: None
                    ) -> MessagingService:
    """The client API of a node. `receipt_key`: the broker group's shared key of receipt
    handles and transaction ids (cluster/consume/handle_mac.py; the node derives it from the
    cluster secret). Without one, a random key: handles then hold only on this node until it
    stops. `group_members` and `cluster_route`: what the controller last said of the group's
    addresses and of every group's route (QueryRoute); `fresh_route` asks it now (blocking).
    AccessControl raises when the ACL is on without a valid file."""
    c = live.current
    key = receipt_key
    if not key:
        log.warning("no handle key: receipt handles and transaction ids use a random key "
                    "and do not survive a restart or a failover")
        key = os.urandom(32)
    access = AccessControl(lambda: live.current, clock)
    topics = TopicRegistry(
        TopicTable(role, store, clock),
        lambda: TopicDefaults(live.current.auto_create_topic_enable,
                              live.current.default_topic_queue_nums))
    threads = StreamBudget(MAX_OPEN_STREAMS)  # telemetry streams holding a pool thread
    on_loop = StreamBudget(MAX_ASYNC_LONG_POLLS)  # long polls waiting on the event loop
    telemetry = TelemetryHub(threads, lambda: live.current.store.max_message_size)
    consumers = ConsumerService(role, store, clock, topics)

    def group_settings(group: str) -> tuple[bool, int] | None:
        """A consumer group's (fifo, max delivery attempts), told to its clients."""
        info = consumers.state.groups.get(group) if role.master is not None else None
        return None if info is None else (info.fifo, info.max_delivery_attempts)
    telemetry.group_settings = group_settings
    transactions = TransactionService(role, store, key=key)
    limits = CurrentSendLimits(live)
    # a client's send: a retry of a send in the duplicate window is answered, not stored
    sender = Sender(lambda msgs: role.require_master().append(msgs, timed=True, dedup=True),
                    topics, limits, clock.now_ms, prepare=transactions.prepare)
    reader = Reader(store, topics, on_loop, clock)
    forwarder = MasterForwarder(c.access_key, c.secret_key, c.tls)
    context = ConsumeContext(consumers, reader.waiter, consume_settings(c), receipt_key=key)
    settle = SettleCalls(context)
    conversion = ConversionProcess(store.commitlog_directory) \
        if c.receive_conversion_process else None
    router = ConsumerRouter(role, forwarder, ConsumerCalls(context, settle, on_loop, conversion),
                            settle)
    return MessagingService(
        role, live, clock, advertised_address, access=access, topics=topics,
        telemetry=telemetry, transactions=transactions,
        transaction_checker=TransactionChecker(transactions, telemetry, clock, live),
        sender=sender, reader=reader, forwarder=forwarder,
        # producers on a slave still get the master's checks
        relay=TelemetryRelay(lambda: role.followed_address, telemetry, forwarder),
        consumers=consumers, tables=TableService([consumers.table, topics.table.replicated]),
        consumer_router=router, limits=limits, conversion=conversion,
        group_members=group_members, cluster_route=cluster_route, fresh_route=fresh_route)
