"""The documentation site builds: `mkdocs build --strict` over mkdocs.yml and docs/, as
./scripts/docs serves it, so a broken link or anchor, a page left out of the nav or a
reference page the code can no longer generate (docs/hooks/reference.py) fails the suite."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_site_builds_strict(tmp_path):
    site = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--clean",
                           "--config-file", str(ROOT / "mkdocs.yml"), "--site-dir", str(site)],
                          cwd=ROOT, capture_output=True, text=True, timeout=240,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert done.returncode == 0, done.stdout + done.stderr
    for page in ("index.html", "operating/configuration/index.html",
                 "operating/cli-reference/index.html", "operating/metrics/index.html"):
        assert (site / page).is_file(), page
