"""`python -m cluster.audit.package OUT.zip`: the code the executors need, for --py-files.

Zips the packages common/, store/, ha/, proto/ and cluster/ of this checkout (Python sources only, no
caches). The executors' Python needs no third-party package for the audit (the scan uses the
standard library and store/); the driver needs pyspark and, for --chart, matplotlib.
"""
from __future__ import annotations

import os
import sys
import zipfile

PACKAGES = ("common", "store", "ha", "proto", "cluster")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def build(out: str, root: str = ROOT) -> list[str]:
    names = []
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for pkg in PACKAGES:
            for dirpath, dirnames, filenames in os.walk(os.path.join(root, pkg)):
                dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
                for fn in sorted(filenames):
                    if fn.endswith(".py"):
                        path = os.path.join(dirpath, fn)
                        arc = os.path.relpath(path, root)
                        z.write(path, arc)
                        names.append(arc)
    return names


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m cluster.audit.package OUT.zip", file=sys.stderr)
        return 2
    names = build(argv[0])
    print(f"{argv[0]}: {len(names)} files from {', '.join(PACKAGES)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
