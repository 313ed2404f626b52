"""The methods of rmqstore.messaging.v1.BatchReceive (proto/batch_receive.proto), from its
descriptor: which calls go to that service rather than the v2 MessagingService (a client's
stub and its fallback, a slave's forwarder, the fuzz tests)."""
from __future__ import annotations

from proto import batch_receive_pb2 as br

BATCH_RECEIVE_METHODS = frozenset(
    m.name for m in br.DESCRIPTOR.services_by_name["BatchReceive"].methods)
