"""Command line of the cluster: `python -m cluster <command>`; see cluster/cli/."""
from __future__ import annotations

import sys

from cluster.cli.cluster_cli import main

if __name__ == "__main__":
    sys.exit(main())
