"""`python -m cluster.audit REPLICA_DIR ...`: the audit in Spark local mode by default."""
import sys

from .cli import main

sys.exit(main())
