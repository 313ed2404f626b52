"""Command line of the cluster: `python -m cluster <command>`; see cluster/cli/."""
from __future__ import annotations

import sys

from cluster.grpc_env import use_node_transport

use_node_transport()  # before anything imports grpc (cluster/grpc_env.py)

from cluster.cli.cluster_cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
