"""`python -m cluster.audit REPLICA_DIR ...`: the audit in Spark local mode by default."""
import sys

from cluster.audit.audit_main import main

sys.exit(main())
