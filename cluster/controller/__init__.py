"""The controller: elects each group's master and keeps the cluster's route.

Each broker group's master, epoch and sync state set, and the route of every group (the
cluster's name server). Nodes heartbeat it and do what it answers.

    election             the rules for one group, without I/O (elect, fence, planned switch)
    controller_service   every group's election under one lock, persisted before each answer
    controller_servicer  the gRPC adapter (proto/controller.proto)
    controller_config    the process's settings (a properties file)
    active_gate          whether this controller may answer (always, alone; with etcd, while
                         it holds the leader lease)
    etcd_client          etcd's v3 JSON gateway over HTTP (kv, txn, leases)
    etcd_store           the groups in etcd, each save a compare-and-swap under the lease
    leadership           the leader key under a lease: campaign, keepalive, step down
    archive_directory    the archives that announced themselves, and their time ranges
    route_registry       the cluster's route (the name server): every group's endpoints, master
                         and topics, without I/O
    route_wire           the route's values in proto/controller.proto messages, both ways

The controller process (its gRPC server and the ticker, `python -m cluster controller`) is
cluster/assembly/controller_process.py.
"""
