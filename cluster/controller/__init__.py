"""The controller: which node of each broker group is the master, in which epoch, and who may
be elected (the sync state set). Nodes heartbeat it and do what it answers.

    election             the rules for one group, without I/O (elect, fence, planned switch)
    controller_service   every group's election under one lock, persisted before each answer
    controller_servicer  the gRPC adapter (proto/controller.proto)
    controller_config    the process's settings (a properties file)
    controller_process   the controller's gRPC server and its ticker (`python -m cluster
                         controller`, cluster/cli/serve_cmd.py)
"""
