"""Limits on what a client may ask of a node: checked before any work is done (before the
store, a table event or a forward), so hostile or broken input costs little and writes nothing.

broker.conf keys (RocketMQ 5 proxy's ProxyConfig names and defaults where it has them):
KEY_DOCS below, each with the code a request over the limit gets.

Other limits live with the settings they bound: maxMessageSize and maxPropertiesSize
(StoreConfig, the store checks them too), timerMaxDelaySec (delivery times),
minInvisibleTimeMillsForRecv (NodeConfig).
"""
from __future__ import annotations

from dataclasses import dataclass, fields

from common.config_values import ConfigError, KeyDoc, parse_int

MIB = 1024 * 1024


@dataclass(frozen=True)
class ClientLimits:
    """The client API's request limits of a node (the module docstring's keys), each checked
    against its range at construction. Immutable."""

    max_user_property_size: int = 16 * 1024
    user_property_max_num: int = 128
    max_message_group_size: int = 64
    max_invisible_time_ms: int = 12 * 3600_000
    max_long_polling_ms: int = 30_000
    max_receive_batch_size: int = 1024
    max_batch_message_count: int = 1024
    grpc_max_inbound_message_size: int = 0

    def __post_init__(self) -> None:
        for f in fields(self):
            low, high = _RANGES[f.name]
            value = getattr(self, f.name)
            if type(value) is not int or not low <= value <= high:
                raise ConfigError(f"{_KEYS[f.name]}={value!r}: must be an integer in "
                                  f"{low}..{high}")

    def inbound_message_size(self, max_message_size: int) -> int:
        """The request size the node's gRPC server accepts."""
        return self.grpc_max_inbound_message_size or 2 * max_message_size + MIB


# The keys, the ClientLimits field each fills and what it means (the docs' configuration
# reference).
KEY_DOCS = {
    "maxUserPropertySize": KeyDoc("UTF-8 bytes of a message's user properties + tag + keys "
                                  "(MESSAGE_PROPERTIES_TOO_LARGE).", "bytes",
                                  field="max_user_property_size"),
    "userPropertyMaxNum": KeyDoc("User properties of one message "
                                 "(MESSAGE_PROPERTIES_TOO_LARGE).",
                                 field="user_property_max_num"),
    "maxMessageGroupSize": KeyDoc("A FIFO message group must be shorter "
                                  "(ILLEGAL_MESSAGE_GROUP).", "bytes",
                                  field="max_message_group_size"),
    "maxInvisibleTimeMills": KeyDoc("The longest invisible duration (ILLEGAL_INVISIBLE_TIME).",
                                    "ms", field="max_invisible_time_ms"),
    "grpcClientConsumerMaxLongPollingTimeoutMillis": KeyDoc(
        "The longest long_polling_timeout (ILLEGAL_POLLING_TIME; the proxy's default is 20000, "
        "the official clients wait up to their await duration).", "ms",
        field="max_long_polling_ms"),
    "maxReceiveBatchSize": KeyDoc("Messages one ReceiveMessage may ask for (BAD_REQUEST).",
                                  field="max_receive_batch_size"),
    "maxBatchMessageCount": KeyDoc("Messages in one SendMessage (PAYLOAD_TOO_LARGE); their "
                                   "bodies together stay within maxMessageSize.",
                                   field="max_batch_message_count"),
    "grpcMaxInboundMessageSize": KeyDoc("Bytes of one gRPC request the node's server accepts "
                                        "(larger ones get RESOURCE_EXHAUSTED from gRPC before "
                                        "any handler runs); 0: 2 x maxMessageSize + 1 MiB "
                                        "(bodies, plus as much again for properties and "
                                        "framing).", "bytes",
                                        field="grpc_max_inbound_message_size"),
}
_KEYS = {doc.field: key for key, doc in KEY_DOCS.items()}
_RANGES = {
    "max_user_property_size": (1, 1024 * 1024),
    "user_property_max_num": (1, 4096),
    "max_message_group_size": (1, 4096),
    "max_invisible_time_ms": (1000, 7 * 24 * 3600_000),
    "max_long_polling_ms": (0, 10 * 60_000),
    "max_receive_batch_size": (1, 10_000),
    "max_batch_message_count": (1, 100_000),
    "grpc_max_inbound_message_size": (0, 1024 * MIB),
}
CLIENT_LIMIT_KEYS = frozenset(_KEYS.values())


def client_limits_from_properties(props: dict[str, str]) -> ClientLimits:
    """The limits set in broker.conf (defaults for the keys not there)."""
    return ClientLimits(**{name: parse_int(key, props[key]) for name, key in _KEYS.items()
                           if key in props})


def server_options(limits: ClientLimits, max_message_size: int) -> list[tuple[str, int]]:
    """gRPC options of the node's server: requests bounded by the limits (a slave's acks, a
    telemetry command and an admin call are all far smaller than a full SendMessage); answers
    (replication chunks, exports, pulls) may stay large. A slave receives the master's chunks
    on its own client channel (slave/replication_client.py), which this does not change."""
    return [("grpc.max_receive_message_length", limits.inbound_message_size(max_message_size)),
            ("grpc.max_send_message_length", 64 * MIB)]
