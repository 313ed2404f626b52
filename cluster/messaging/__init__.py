"""The RocketMQ 5 client API (apache.rocketmq.v2.MessagingService) of a node.

Plain, testable modules and one thin gRPC adapter:
    convert            v2 Message <-> store Message/record, validation codes, PutStatus -> v2 Code
    route              topic table + auto-create, MessageQueues and Endpoints of a route
    send               SendMessage on the master (one request = one append), forwarding from slaves
    pull_reader        PullMessage / QueryOffset on any replica, long polling
    consumer_router    the consumer calls: answered by the master (cluster/consume/), forwarded
                       by a slave
    telemetry          Settings echo, open streams and pushed commands, the budget of threads held
    telemetry_relay    a slave mirrors its producers' streams to the master (check-backs)
    transaction, transaction_records, transaction_state, transaction_check
                       half messages, EndTransaction, the open-transaction table, the check-back
    (request signatures and access control: cluster/security/)
    messaging_service  the node-facing facade (role-aware)
    messaging_servicer the gRPC adapter

The package imports none of them itself: cluster/consume/ uses `convert` and is used by
`messaging_service`, so an eager import here made importing a consume module first circular.
"""
