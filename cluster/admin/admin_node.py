"""What the Admin API sees of its node, and may do to it.

The admin modules (topic_admin, group_admin, message_lookup, maintenance, runtime_config,
store_export) get this instead of the Node: its Role (who is master), its store, its live
config, the topic registry and the consumer service, and the operations
only the node itself can carry out. The node's role machinery, epochs and gRPC server stay
hidden.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from cluster.admin.admin_error import not_master_error
from cluster.config.node_role import NotMaster

if TYPE_CHECKING:
    from master.master_role import MasterRole
    from proto import admin_pb2 as apb
    from store.broker_role import BrokerRole
    from store.codec import Message
    from store.message_store import MessageStore
    from store.put_result import PutResult

    from cluster.archive.shipper import ArchiveShipper
    from cluster.consume.consumer_service import ConsumerService
    from cluster.messaging.route import TopicRegistry
    from cluster.config.live_config import LiveConfig
    from cluster.config.node_config import NodeConfig
    from cluster.config.node_role import Role


@dataclass(frozen=True)
class AdminNode:
    """The node as the admin modules see it (the module docstring): its id, role, store, live
    config, topic registry and consumer service, and callables for what only the node may do (status,
    switch role, put, update config, the archive shipper). Immutable; every part it names
    does its own locking."""

    node_id: str
    role: "Role"
    store: "MessageStore"
    config: "LiveConfig"
    topics: "TopicRegistry"
    consumers: "ConsumerService"
    status: Callable[[], "apb.NodeStatus"]
    switch_role: Callable[["BrokerRole", str, int], None]
    put_messages: Callable[[list["Message"]], "PutResult"]
    update_config: Callable[[Callable[["NodeConfig"], "NodeConfig"]], "NodeConfig"]
    archive_shipper: Callable[[], "ArchiveShipper | None"] = lambda: None

    def require_master(self, what: str) -> "MasterRole":
        """Writes of topics, groups and offsets happen on the master only: a slave's copy is
        replaced by whatever its master says next, so a change there would be lost."""
        try:
            return self.role.require_master()
        except NotMaster as e:
            raise not_master_error(what, e) from None

