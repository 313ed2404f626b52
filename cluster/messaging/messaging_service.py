"""The MessagingService of one node: wires the plain modules to the node's role.

- Master: QueryRoute answers from the topic table (auto-creating), SendMessage appends.
- Slave: SendMessage is validated (cluster/v2/convert.py) and forwarded to the current master (the
  Role's followed address: the node's haMasterAddress, or the address given by the last
  SwitchRole); QueryRoute asks the master for the topic (fresher; it may create it there)
  and answers with the slave's view of the group's addresses; when the master cannot be
  reached, the slave's own replicated topic table answers (its master's table up to the
  confirm offset).
- Consumer calls (ReceiveMessage, Ack, offsets, DLQ): the master answers from its consumer
  state (cluster/consume/); a slave forwards them to its master (consumer_router.py).
- Any role: PullMessage / QueryOffset read the local store; Heartbeat and
  NotifyClientTermination answer OK; Telemetry echoes settings and keeps streams open in a
  registry so the master can push commands (telemetry.py); a slave mirrors its producers'
  streams to its master (telemetry_relay.py).
- Transactions (transaction*.py): the master stores half messages, resolves EndTransaction and
  runs the check-back of orphaned transactions; a slave forwards EndTransaction.
- A node changing role answers writes with INTERNAL_SERVER_ERROR; the clients retry.
Where a call goes is the Role's one rule (cluster/config/node_role.py: `route`).

Group addresses (QueryRoute endpoints): node key `groupAddresses` when set (this node's own
advertised address is added if missing), else every node of the group the controller has heard
of (its answers carry their advertised addresses) plus this node's own and, while it is a
slave, its master's. Every node then answers the same list, so an official client keeps one
channel to the group, and that channel moves to a live node as soon as its node dies (gRPC's
pick_first tries the next address; the clients sort the list). A list of this node alone, as
a master without a controller would answer, pins the client to it until its route refresh
(30 s): measured, that was the 6-10 s client-view gaps after a master kill.
`advertisedAddress` defaults to brokerIP1 and the listening port.

Several broker groups under one controller: the node holds the cluster's route (every group's
endpoints, master and topics, fetched from the controller's route registry:
cluster/assembly/route_sync.py), and QueryRoute answers with the queues of every group that has
the topic (cluster/messaging/route.py: each group's queues name it and list its endpoints, a
group without a master has them without PERM_WRITE, the groups' queues interleaved). This
node's own group's part comes from its own topic table as above (the registry's copy may lag),
the others' from the route. An unknown topic is auto-created only when no group has it, in this
node's group (RocketMQ's rule: the broker that got the first route query or send creates it).
QueryAssignment spreads the readable queues of every group the same way.

Why the client is routed to each group's endpoints instead of this node forwarding to the
owning group: no extra hop per call (a send, receive or ack goes straight to a node of the
group that stores the message and holds its consumer state, offsets, FIFO locks and
transactions); the client's own machinery then works per group as it does in RocketMQ: one
channel per group (its endpoints), its retry of a failed send on another queue (the Java
client isolates the endpoints and picks another broker name; the Python client's round robin
lands on another group's queue, route.interleaved), its heartbeats and telemetry (settings,
transaction check-backs) to every group's endpoints. A forwarding node would hide a dead group
behind a live one, turning the client's quick retry elsewhere into a timeout, and would carry
every other group's traffic through itself.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Callable, Sequence

from proto.apache.rocketmq.v2 import definition_pb2 as d
from proto.apache.rocketmq.v2 import service_pb2 as s
from store.errors import StoreError

from cluster.config.node_role import Forward, NotMaster
from cluster.consume.settle_calls import ConsumeSettings
from cluster.messaging.route import config_from_route, endpoints, interleaved, message_queues
from cluster.messaging.transaction_records import check_transactional_send
from cluster.serving.execution import in_pool
from cluster.v2.convert import (SendLimits, check_group_resource, check_topic_resource,
                                to_store_messages)
from cluster.v2.v2_status import V2Error, v2_route

if TYPE_CHECKING:
    from common.clock import Clock
    from store.json_config import TopicConfig

    from cluster.config.cluster_route import ClusterRoute, GroupRoute

    from cluster.consume.consumer_service import ConsumerService
    from cluster.consume.conversion_process import ConversionProcess
    from cluster.messaging.consumer_router import ConsumerRouter
    from cluster.messaging.pull_reader import Reader
    from cluster.messaging.route import TopicRegistry
    from cluster.messaging.send import MasterForwarder, Sender
    from cluster.messaging.telemetry import TelemetryHub
    from cluster.messaging.telemetry_relay import TelemetryRelay
    from cluster.messaging.transaction import TransactionService
    from cluster.messaging.transaction_check import TransactionChecker
    from cluster.replicated.replicated_table import TableService
    from cluster.security.access import AccessControl

    from cluster.config.live_config import LiveConfig
    from cluster.config.node_config import NodeConfig
    from cluster.config.node_role import Role

log = logging.getLogger(__name__)
SERVICE_NAME = "apache.rocketmq.v2.MessagingService"
ROUTE_FROM_MASTER_TIMEOUT = 2.0  # seconds a slave waits for its master's route


class HeldElsewhere(V2Error):
    """QueryRoute: the topic is not in this node's group, and the master's answer or the
    controller's route says another group has it (this node's copy of the route may not yet)."""


class CurrentSendLimits:
    """What a SendMessage may carry under the node's current config: rebuilt only when the
    config object was swapped (every send asks, and a frozen dataclass costs its checks each
    time). Read from any thread; a race rebuilds the same value twice."""

    def __init__(self, config: "LiveConfig") -> None:
        self.live = config
        self._cached: tuple["NodeConfig", SendLimits] | None = None  # (config, its limits)

    def __call__(self) -> SendLimits:
        config = self.live.current
        cached = self._cached
        if cached is None or cached[0] is not config:
            cached = self._cached = (config, send_limits(config))
        return cached[1]


class MessagingService:
    """The client API of one node, over parts the assembly built and handed to it
    (cluster/assembly/client_api.py): the node's Role (where calls go), its live config, its
    clock and its advertised address; the topic registry, the consumer service and its router,
    the transaction service and its checker, the sender, the reader, the telemetry hub and its
    relay, the forwarder to the master, the replicated tables' service and the access control
    (checked by v2_access.V2AccessInterceptor before a call reaches the servicer), and the
    node's copy of the cluster's route (`cluster_route`; `fresh_route` asks the controller for
    it now, blocking, before this node's group auto-creates a topic). Owns their lifecycle
    (`start`, `close`); holds no state of its own but the send limits' cache."""

    def __init__(self, role: "Role", config: "LiveConfig", clock: "Clock",
                 advertised_address: Callable[[], str], *, access: AccessControl,
                 topics: TopicRegistry, telemetry: TelemetryHub,
                 transactions: TransactionService, transaction_checker: TransactionChecker,
                 sender: Sender, reader: Reader, forwarder: MasterForwarder,
                 relay: TelemetryRelay, consumers: ConsumerService, tables: TableService,
                 consumer_router: ConsumerRouter, limits: CurrentSendLimits,
                 conversion: ConversionProcess | None,
                 group_members: Callable[[], Sequence[str]] = tuple,
                 cluster_route: Callable[[], "ClusterRoute | None"] = lambda: None,
                 fresh_route: Callable[[], "ClusterRoute | None"] = lambda: None) -> None:
        self.role = role
        self.live = config
        self.clock = clock
        self.advertised_address = advertised_address
        self.group_members = group_members  # the controller's list of the group's addresses
        self.cluster_route = cluster_route  # every group's route (None: no controller's yet)
        self.fresh_route = fresh_route
        self.access = access
        self.topics = topics
        self.telemetry = telemetry
        self.transactions = transactions
        self.transaction_checker = transaction_checker
        self.sender = sender
        self.reader = reader
        self.forwarder = forwarder
        self.relay = relay
        self.consumers = consumers
        self.tables = tables
        self.consumer_router = consumer_router
        self.limits = limits
        self.conversion = conversion  # the receives' conversion process (None: built in place)

    @property
    def config(self) -> "NodeConfig":
        return self.live.current

    def start(self) -> None:
        self.reader.attach()
        self.tables.start()
        self.transaction_checker.start()

    def close(self) -> None:
        self.transaction_checker.stop()
        self.relay.close()
        self.telemetry.close()
        self.tables.stop()
        self.reader.detach()
        self.forwarder.close()
        if self.conversion is not None:
            self.conversion.close()

    def group_addresses(self) -> list[str]:
        own = self.advertised_address()
        configured = list(self.config.group_addresses)
        if configured:
            return configured if own in configured else [*configured, own]
        out = dict.fromkeys([*self.group_members(), own])
        master = self.role.followed_address
        if master:
            out[master] = None
        return list(out)

    # -- role-aware calls (coroutines on the server's loop: cluster/serving/execution.py) -----
    async def query_route(self, request: s.QueryRouteRequest, *, forwarded: bool = False,
                          timeout: float | None = None, client_id: str = ""
                          ) -> s.QueryRouteResponse:
        try:
            topic = check_topic_resource(request.topic)
            others = self._other_groups(topic)
            try:
                own = await self._own_topic(request, topic, create=not others,
                                            forwarded=forwarded, timeout=timeout,
                                            client_id=client_id)
            except HeldElsewhere:
                # this node's copy of the route is behind the master's or the controller's
                others = self._other_groups(topic)
                if not others:
                    await in_pool(self.fresh_route)
                    others = self._other_groups(topic)
                own = None
                if not others:
                    raise
            except V2Error as e:
                if not others:
                    raise
                if e.code != d.TOPIC_NOT_FOUND:  # e.g. a slave whose master is gone
                    log.info("route of %s without this group's queues: %s", topic, e.message)
                own = None  # the other groups' queues are still routed
        except V2Error as e:
            return s.QueryRouteResponse(status=e.status())
        return s.QueryRouteResponse(status=d.Status(code=d.OK, message="OK"),
                                    message_queues=self._queues(request.topic, own, others))

    async def _own_topic(self, request: s.QueryRouteRequest, topic: str, *, create: bool,
                         forwarded: bool, timeout: float | None, client_id: str
                         ) -> "TopicConfig":
        """The topic in this node's group: the master's table (auto-created when `create`),
        a slave's master's answer, or this node's copy of the table."""
        try:
            target = self.role.route(forwarded=forwarded)
        except NotMaster:
            target = None  # a slave asked by another node, or a node between roles
        if isinstance(target, Forward):
            return await self._route_from_master(target.address, request, topic, timeout,
                                                 client_id)
        if target is not None and create:
            if self.topics.get(topic) is None and self.topics.defaults().auto_create:
                # the node's copy of the route is up to a heartbeat old: a group that has just
                # registered the topic would get a second copy of it here
                await in_pool(self.fresh_route)
                if self._other_groups(topic):
                    raise HeldElsewhere(d.TOPIC_NOT_FOUND,
                                        f"topic {topic} is not in broker group "
                                        f"{self.config.broker_name}; another group has it")
            return self.topics.get_or_create(topic)
        return self._known_topic(topic)

    def _known_topic(self, topic: str) -> "TopicConfig":
        config = self.topics.get(topic)
        if config is None:
            raise V2Error(d.TOPIC_NOT_FOUND, f"topic {topic} does not exist")
        return config

    def _other_groups(self, topic: str) -> list[tuple["GroupRoute", "TopicConfig"]]:
        """The other broker groups that have `topic` (the cluster's route), with its config
        there."""
        route = self.cluster_route()
        if route is None:
            return []
        own = self.config.broker_name
        return [(g, c) for g, c in route.holding(topic) if g.broker_name != own]

    def _own_group_writable(self) -> bool:
        """This node's group has a master now: this node leads, or the cluster's route says
        so (without a route, as without a controller: yes)."""
        if self.role.master is not None:
            return True
        route = self.cluster_route()
        group = route.group(self.config.broker_name) if route is not None else None
        return group is None or group.has_master

    def _queues(self, topic: d.Resource, own: "TopicConfig | None",
                others: list[tuple["GroupRoute", "TopicConfig"]]) -> list[d.MessageQueue]:
        """The topic's queues in every group that has it (this node's group from `own`, with
        its endpoints), by broker name, interleaved (route.py)."""
        parts: list[tuple[str, list[d.MessageQueue]]] = []
        if own is not None:
            name = self.config.broker_name
            parts.append((name, message_queues(topic, own, name, endpoints(self.group_addresses()),
                                               writable=self._own_group_writable())))
        for group, config in others:
            parts.append((group.broker_name, message_queues(
                topic, config, group.broker_name, endpoints(group.endpoints),
                writable=group.has_master)))
        return interleaved([queues for _, queues in sorted(parts, key=lambda p: p[0])])

    async def _route_from_master(self, address: str, request: s.QueryRouteRequest, topic: str,
                                 timeout: float | None, client_id: str):
        limit = ROUTE_FROM_MASTER_TIMEOUT if timeout is None else min(timeout, ROUTE_FROM_MASTER_TIMEOUT)
        problem = None
        try:
            answer = await self.forwarder.call(address, "QueryRoute",
                                               s.QueryRouteRequest(topic=request.topic), limit,
                                               client_id)
            if answer.status.code == d.OK:
                config = config_from_route(topic, answer.message_queues,
                                           self.config.broker_name)
                if config is None:  # only other groups have it
                    raise HeldElsewhere(d.TOPIC_NOT_FOUND, f"topic {topic} is not in broker "
                                                           f"group {self.config.broker_name}")
                return config
            elif answer.status.code in (d.TOPIC_NOT_FOUND, d.ILLEGAL_TOPIC, d.NOT_IMPLEMENTED):
                raise V2Error(answer.status.code, answer.status.message)
            problem = V2Error(answer.status.code, f"the master answered: {answer.status.message}")
        except V2Error as e:
            if e.code in (d.TOPIC_NOT_FOUND, d.ILLEGAL_TOPIC, d.NOT_IMPLEMENTED):
                raise
            problem = e
        config = self.topics.get(topic)
        if config is None:
            raise problem or V2Error(d.TOPIC_NOT_FOUND, f"topic {topic} does not exist")
        log.info("route of %s from this node's replicated topic table: %s", topic, problem.message if problem else "")
        return config

    def query_assignment(self, request: s.QueryAssignmentRequest) -> s.QueryAssignmentResponse:
        """QueryAssignment (push consumers): one assignment per readable queue of the topic in
        every group that has it, each with its group's endpoints: the consumer receives each
        queue through ReceiveMessage on the group that owns it."""
        try:
            topic = check_topic_resource(request.topic)
            if not check_group_resource(request.group):
                raise V2Error(d.ILLEGAL_CONSUMER_GROUP, "the consumer group is required")
            others = self._other_groups(topic)
            own = self.topics.get(topic)
            if own is None and not others:
                raise V2Error(d.TOPIC_NOT_FOUND, f"topic {topic} does not exist")
        except V2Error as e:
            return s.QueryAssignmentResponse(status=e.status())
        answer = s.QueryAssignmentResponse(status=d.Status(code=d.OK, message="OK"))
        for mq in self._queues(request.topic, own, others):
            if mq.permission in (d.READ, d.READ_WRITE):
                answer.assignments.append(d.Assignment(message_queue=mq))
        return answer

    async def send(self, request: s.SendMessageRequest, *, peer_ip: str = "",
                   forwarded: bool = False, timeout: float | None = None, client_id: str = ""
                   ) -> s.SendMessageResponse:
        """The master puts it (send.Sender); a slave forwards it to its master."""
        try:
            target = self.role.route(forwarded=forwarded)
        except NotMaster as e:
            return _error(d.INTERNAL_SERVER_ERROR, e.reason)
        if not isinstance(target, Forward):
            try:
                return await self.sender.send(request, peer_ip)
            except (StoreError, NotMaster) as e:  # the role changed under the put
                return _error(d.INTERNAL_SERVER_ERROR, str(e))
        try:  # refused here, before it costs the master anything (the master checks again)
            check_transactional_send(request.messages)
            to_store_messages(request.messages, self.limits(), self.clock.now_ms(), peer_ip)
        except V2Error as e:
            return s.SendMessageResponse(status=e.status())
        copy = s.SendMessageRequest()
        copy.CopyFrom(request)
        if peer_ip:
            for m in copy.messages:
                if not m.system_properties.born_host.strip():
                    m.system_properties.born_host = peer_ip
        try:
            return await self.forwarder.call(target.address, "SendMessage", copy,
                                             10.0 if timeout is None else timeout - 0.05,
                                             client_id)
        except V2Error as e:
            return s.SendMessageResponse(status=e.status())

    async def end_transaction(self, request: s.EndTransactionRequest, *,
                              forwarded: bool = False, timeout: float | None = None,
                              client_id: str = "") -> s.EndTransactionResponse:
        """The master resolves the transaction (transaction.py, which waits in its thread: in
        the pool); a slave forwards it."""
        try:
            target = v2_route(self.role, forwarded=forwarded)
            if not isinstance(target, Forward):
                return await in_pool(self.transactions.end, request)
            return await self.forwarder.call(target.address, "EndTransaction", request,
                                             10.0 if timeout is None else timeout - 0.05,
                                             client_id)
        except V2Error as e:
            return s.EndTransactionResponse(status=e.status())


def send_limits(config: "NodeConfig") -> SendLimits:
    """What a SendMessage may carry (cluster/config/client_limits.py, the store's sizes)."""
    c, lim = config.store, config.limits
    return SendLimits(max_body=c.max_message_size, max_delay_ms=c.timer_max_delay_sec * 1000,
                      max_user_property_size=lim.max_user_property_size,
                      max_user_property_num=lim.user_property_max_num,
                      max_message_group_size=lim.max_message_group_size,
                      max_batch_count=lim.max_batch_message_count)


def consume_settings(config: "NodeConfig") -> ConsumeSettings:
    lim = config.limits
    return ConsumeSettings(min_invisible_ms=config.min_invisible_time_ms,
                           max_invisible_ms=lim.max_invisible_time_ms,
                           max_long_polling_ms=lim.max_long_polling_ms,
                           max_batch_size=lim.max_receive_batch_size)


def _error(code: int, message: str) -> s.SendMessageResponse:
    return s.SendMessageResponse(status=d.Status(code=code, message=message))
