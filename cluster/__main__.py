"""Command line of the cluster: `python -m cluster <command>`; see cluster/cli/."""
from __future__ import annotations

import sys

from cluster.grpc_env import use_node_transport

use_node_transport()  # before anything imports grpc (cluster/grpc_env.py)

if __name__ == "__main__" and sys.argv[1:2] == ["health"]:
    # the containers' healthcheck, every 2 s: only its own imports (cluster/cli/health_cmd.py)
    from cluster.cli.health_cmd import main as health  # noqa: E402
    sys.exit(health(sys.argv[2:]))

from cluster.cli.cluster_cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
