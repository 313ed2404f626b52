"""Everything above the store and the replication layers: the node process and its role, the
client API and the Admin API it serves, consumer groups, replicated metadata tables, the client
libraries, the operator's CLI and the Spark audit. ARCHITECTURE.md draws how they fit.

    node/        one node: NodeConfig, LiveConfig, Role, the gRPC server, the local cluster
    messaging/   apache.rocketmq.v2.MessagingService: routes, send, pull, transactions, telemetry
    consume/     consumer groups on the master: receive/ack state, redelivery, DLQ, offsets
    replicated/  tables replicated through internal topics of the commitlog
    admin/       the operator's Admin API (server side)
    client/      client libraries: messaging (Producer, consumers) and admin (AdminClient)
    cli/         `python -m cluster`: run nodes, operate them (an mqadmin)
    audit/       the Spark consistency audit of a broker group's replicas
    grpc_env.py  gRPC core's transport for our processes, set before grpc is imported
"""
