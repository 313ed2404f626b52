"""The RocketMQ 5 client API (apache.rocketmq.v2.MessagingService) of a node.

Plain, testable modules and one thin gRPC adapter:
    route              topic table + auto-create, MessageQueues and Endpoints of a route
    send               SendMessage on the master (one request = one append), forwarding from slaves
    pull_reader        PullMessage / QueryOffset on any replica, long polling
    consumer_router    the consumer calls: answered by the master (cluster/consume/), forwarded
                       by a slave
    telemetry          Settings echo, open streams and pushed commands, the budget of threads held
    telemetry_relay    a slave mirrors its producers' streams to the master (check-backs)
    transaction, transaction_records, transaction_state, transaction_check
                       half messages, EndTransaction, the open-transaction table, the check-back
    v2_access          the permissions each v2 method needs and the interceptor that checks
                       them (signatures and ACL rules: cluster/security/)
    messaging_service  the node-facing facade (role-aware)
    messaging_servicer the gRPC adapter

The v2 conversion, status codes and long polling that consume shares are cluster/v2/. The
package imports none of its modules itself: importing one loads only what that one needs.
"""
