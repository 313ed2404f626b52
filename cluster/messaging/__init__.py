"""The RocketMQ 5 client API (apache.rocketmq.v2.MessagingService) of a node, first slice.

Plain, testable modules and one thin gRPC adapter:
    convert    v2 Message <-> store Message/record, validation codes, PutStatus -> v2 Code
    route      topic table + auto-create, MessageQueues and Endpoints of a route
    send       SendMessage on the master (one request = one append), forwarding from slaves
    pull       PullMessage / QueryOffset on any replica, long polling
    telemetry  Settings echo, open streams and pushed commands, the budget of threads held
    telemetry_relay  a slave mirrors its producers' streams to the master (check-backs)
    transaction, transaction_records, transaction_state, transaction_check
               half messages, EndTransaction, the open-transaction table, the check-back
    auth       optional MQv2-HMAC-SHA1 request signatures (accessKey / secretKey)
    service    the node-facing facade (role-aware)
    servicer   the gRPC adapter
"""
from .service import SERVICE_NAME, MessagingService
from .servicer import MessagingServicer

__all__ = ["SERVICE_NAME", "MessagingService", "MessagingServicer"]
