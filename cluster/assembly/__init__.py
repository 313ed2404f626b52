"""The assembly: the processes, which build the features and wire them.

    node                the node process: the store, the role, every service on one gRPC server
    controller_link     the node's heartbeat to the controller (controller_choice: which one)
    assignment_plan     what a node does with the controller's answer
    route_sync          the node's side of the route registry: its registration, the route it holds
    node_status         the node's status report
    controller_process  `python -m cluster controller`: the controller process
    archive_process     `python -m cluster archive`: the archive server process
    local_cluster       `python -m cluster local`: a controller, a master and two slaves
                        (--groups N: N such groups)
    local_layout        its groups, node names and ports
    local_archive       the archive server of a local cluster
    heap_tuning         the allocator settings of a serving process
"""
