"""Everything above the store and the replication layers: the processes (node, controller,
archive server) and what they serve, the features, the clients and the operator's tools.
The architecture page of the docs (docs/concepts/architecture.md) draws how they fit.

The subpackages, top to bottom in the layer contract (pyproject.toml, contract "cluster"); a
package imports only from the ones below it, and packages on one line (`|`) not from each other:

    reference/   the docs site's reference pages generated from the code (CLI, config, metrics)
    cli/         `python -m cluster <command>`: the operator's command line (an mqadmin)
    drills/      failover drills: a workload recorded into a History, a fault, a checker
      | audit/   the Spark consistency audit of a broker group's replicas
    assembly/    the processes (node, controller, archive server, local cluster) and their wiring
    console/     the web console: one static page and its JSON API
    metrics/     Prometheus metrics of nodes, controllers and archives
    archive/     the commitlog archive: shipper, archive server, Spark search
    client/      client libraries: messaging (Producer, consumers), admin, controller, archive
      | controller/  the controller: each broker group's master, epoch and sync state set
    admin/       the operator's Admin API of a node (server side)
      | messaging/   apache.rocketmq.v2.MessagingService: routes, send, pull, transactions
    consume/     consumer groups on the master: receive/ack state, redelivery, DLQ, offsets
    metadata/    node metadata in replicated tables: the topic table
    replicated/  tables replicated through internal topics of the commitlog
    serving/     the gRPC serving plumbing: server, thread pool, shared interceptor parts
      | v2/      RocketMQ 5 protocol helpers shared by messaging and consume
    config/      value types: role, node and shipping configs, live config, limits
    security/    membership proofs, TLS, ACL and request signatures

    grpc_env.py  gRPC core's transport for our processes, set before grpc is imported
"""
