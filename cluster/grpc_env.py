"""The gRPC core transport of our processes, chosen before gRPC is imported.

gRPC core reads `GRPC_EXPERIMENTS` once, when `grpc` is first imported. grpcio 1.85 serves
and dials TCP through its EventEngine by default; switched off (`-event_engine_listener`,
`-event_engine_client`), it uses its iomgr TCP stack, which costs less per call here:
a bare grpc.aio unary call 350-460 -> 277-347 µs of server CPU and 203-277 -> 140-173 µs
of client CPU with both ends on it, a node's sequential SendMessage 707-787 -> 627-720 µs,
a SYNC_MASTER's single put with two slaves p50 1.48-1.59 -> 1.21-1.29 ms
(docs/performance/history.md, "gRPC's TCP stack"). Between nodes both ends are ours: replication,
forwarded calls, the controller link.

`use_node_transport()` sets it for this process unless the environment already names
experiments (an operator's value always wins; `GRPC_EXPERIMENTS=` with nothing keeps gRPC's
default). It must run before anything imports grpc: `python -m cluster` calls it first.
A grpcio that no longer knows these experiments ignores them.
"""
from __future__ import annotations

import os
import sys
from typing import MutableMapping

NODE_EXPERIMENTS = "-event_engine_listener,-event_engine_client"


def use_node_transport(environ: MutableMapping[str, str] = os.environ) -> bool:
    """Sets GRPC_EXPERIMENTS to NODE_EXPERIMENTS unless it is set; True when it set it.
    Raises RuntimeError when grpc is already imported (the setting would be ignored)."""
    if "GRPC_EXPERIMENTS" in environ:
        return False
    if environ is os.environ and "grpc" in sys.modules:
        raise RuntimeError("use_node_transport() must run before grpc is imported")
    environ["GRPC_EXPERIMENTS"] = NODE_EXPERIMENTS
    return True
