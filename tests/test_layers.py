"""The layer map is a rule the code obeys: import-linter's contracts in pyproject.toml (layers,
the packages that speak no gRPC, no package cycles at any depth), checked on the checkout, shown
to catch an upward import, and drawn on the architecture page (docs/concepts/architecture.md)
from the same contracts."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.support import layer_map

ROOT = layer_map.ROOT
PACKAGES = ("common", "store", "ha", "master", "slave", "cluster", "proto")


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    """`lint-imports` on the tree at `root` (the project's pyproject.toml there)."""
    env = dict(os.environ, PYTHONPATH=str(root))
    script = "import sys; from importlinter.cli import lint_imports_command; " \
             "sys.exit(lint_imports_command())"
    return subprocess.run([sys.executable, "-c", script, "--no-cache"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=240)


def copy_tree(dst: Path) -> None:
    for name in PACKAGES:
        shutil.copytree(ROOT / name, dst / name,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "static", "screenshots"))
    shutil.copy(ROOT / "pyproject.toml", dst / "pyproject.toml")


def test_the_code_keeps_every_contract():
    done = lint_imports(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


def add_import(path: Path, line: str) -> None:
    """Adds `line` after the module's `from __future__` import (a runtime import)."""
    text = path.read_text()
    marker = "from __future__ import annotations\n"
    assert marker in text, path
    path.write_text(text.replace(marker, marker + line + "\n", 1))


def test_an_upward_import_breaks_the_layers_and_a_package_cycle(tmp_path):
    copy_tree(tmp_path)
    # the store reaching up into a cluster feature: against the top-level layers
    add_import(tmp_path / "store" / "reput.py", "import cluster.consume.planner")
    # a value type importing a feature, which imports values: a package cycle in cluster/
    add_import(tmp_path / "cluster" / "config" / "live_config.py",
               "import cluster.messaging.send")
    done = lint_imports(tmp_path)
    assert done.returncode != 0
    out = " ".join(done.stdout.split())
    assert "store is not allowed to import cluster" in out
    assert "store.reput -> cluster.consume.planner" in out
    assert "cluster.config is not allowed to import cluster.messaging" in out
    assert "No cycles are allowed in cluster" in out


def test_a_type_checking_import_is_not_a_dependency(tmp_path):
    copy_tree(tmp_path)
    path = tmp_path / "store" / "reput.py"
    add_import(path, "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                     "    import cluster.consume.planner")
    done = lint_imports(tmp_path)
    assert done.returncode == 0, done.stdout


def test_architecture_draws_the_contracts():
    text = layer_map.PAGE.read_text()
    current = layer_map.current_block(text)
    assert current is not None, "the architecture page lost its layer picture's markers"
    assert current == layer_map.block(), \
        "the architecture page's layer picture differs from the contracts: " \
        "python -m tests.support.layer_map"


def test_the_picture_names_every_package_of_the_contracts():
    picture = layer_map.render()
    for layer in layer_map.contracts()["cluster"]["layers"]:
        for name in layer.split("|"):
            assert f"cluster/{name.strip()} " in picture
    for package in ("master", "slave", "ha", "store", "common"):
        assert f" {package} " in picture
    # and every cluster subpackage is on the map
    on_disk = {p.name for p in (ROOT / "cluster").iterdir() if (p / "__init__.py").exists()}
    mapped = {n.strip() for layer in layer_map.contracts()["cluster"]["layers"]
              for n in layer.split("|")}
    assert on_disk == mapped
