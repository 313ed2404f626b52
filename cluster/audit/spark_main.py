"""Entry point for spark-submit on a real cluster:

    python -m cluster.audit.package audit.zip          # store/, ha/, proto/, cluster/
    spark-submit --master spark://host:7077 --py-files audit.zip \
        cluster/audit/spark_main.py /shared/a /shared/b /shared/c --json report.json

The replica directories must be readable at the same path on the driver and every executor
(a shared or replicated filesystem). The executors' Python needs nothing beyond the standard
library and the zip (set PYSPARK_PYTHON if the default `python3` is older than 3.11); the driver
needs pyspark, and matplotlib for --chart. The master comes from spark-submit unless
--master-url is given. Exit status as `python -m cluster.audit`.
"""
import os
import sys

if __package__ in (None, ""):  # run as a file: make the checkout (or the shipped zip) importable
    _root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if os.path.isdir(os.path.join(_root, "store")) and _root not in sys.path:
        sys.path.insert(0, _root)

from cluster.audit.audit_main import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(default_master=None))
