"""The wheel as a user installs it: built from the repository (`pip wheel --no-deps`), installed
(not editable) into a fresh virtualenv, and run from there with its `rmqstore` command: a local
cluster starts, a message goes through it, the console page answers, the cluster stops.
Anything the code reads at run time that the wheel lacks (package data: the console's page)
fails here, as it failed for users (issue 48). And every file in the packages that is not
Python is in the wheel, unless NOT_SHIPPED names it with its reason.

Where the dependencies come from: the fresh venv gets exactly the distributions the wheel's
metadata requires, transitively (markers evaluated, extras followed), as symlinks to the files
of those installed in the project's venv, which scripts/setup filled from the same requirements;
then pip installs the wheel without an index, so pip's resolver itself checks that the installed
dependencies satisfy what the wheel declares. A package the code imports but the wheel does not
declare is absent and fails the smoke test; the project's other packages (test tools) and the
editable install of rmqstore are not there. The links take 1-5 s; installing the dependencies
from the index instead took 34 s and 750 MiB a run with pip's cache warm (pyspark, matplotlib
and numpy unpacked again), and tests the index, not the wheel. The repository is not importable
in the fresh venv: no PYTHONPATH, every command runs in an empty tmp folder, and the test checks
that `cluster` is imported from the fresh venv, in the processes the cluster started too.

The wheel is built from a copy of pyproject.toml and the packages it names: a build in the
checkout leaves build/ there, whose stale files (a module since removed) a later wheel carries.
"""
from __future__ import annotations

import fnmatch
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import tomllib
import urllib.request
import zipfile
from email.parser import Parser
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from cluster.assembly.local_cluster import CONTROLLER_PORT_OFFSET, METRICS_PORT_OFFSET
from tests.integration.harness import ROOT, LocalCluster, cluster_cli, pid_gone

CONSOLE_PAGE = Path(ROOT, "cluster", "console", "static", "console.html")
# Files in the packages that are not Python and stay out of the wheel, each with its reason:
# everything else beside the code ships (pyproject's package-data).
NOT_SHIPPED: dict[str, str] = {}


def package_dirs(root: Path) -> list[Path]:
    """The top-level packages that pyproject's packages.find names, in `root`."""
    with open(Path(ROOT, "pyproject.toml"), "rb") as f:
        include = tomllib.load(f)["tool"]["setuptools"]["packages"]["find"]["include"]
    return [entry for entry in sorted(root.iterdir())
            if entry.is_dir() and any(fnmatch.fnmatch(entry.name, p) for p in include)]


def copy_sources(dest: Path) -> Path:
    """pyproject.toml and the packages it names, without caches."""
    dest.mkdir()
    shutil.copy2(Path(ROOT, "pyproject.toml"), dest)
    for package in package_dirs(Path(ROOT)):
        shutil.copytree(package, dest / package.name,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return dest


def build_wheel(src: Path, out: Path) -> Path:
    """`pip wheel` as a user runs it: build isolation, so setuptools is what pyproject's
    build-system asks for (pip takes it from the index, as scripts/setup does)."""
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out),
                        str(src)], capture_output=True, text=True, cwd=src.parent, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    (wheel,) = out.glob("rmqstore-*.whl")
    return wheel


def required(wheel: Path) -> list[str]:
    """The Requires-Dist lines of the wheel's own metadata."""
    with zipfile.ZipFile(wheel) as z:
        name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        return Parser().parsestr(z.read(name).decode()).get_all("Requires-Dist") or []


def closure(requirements: list[str]) -> list[metadata.Distribution]:
    """The installed distributions these requirements need, and theirs, once each."""
    todo = [(Requirement(r), "") for r in requirements]
    found: dict[str, metadata.Distribution] = {}
    followed: set[tuple[str, str]] = set()  # (distribution, extra) whose requirements are queued
    while todo:
        req, extra = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": extra}):
            continue
        dist = metadata.distribution(req.name)
        key = dist.metadata["Name"].lower()
        found[key] = dist
        for e in {"", *req.extras} - {x for k, x in followed if k == key}:
            followed.add((key, e))
            todo += [(Requirement(r), e) for r in dist.requires or []]
    return list(found.values())


def link_dependencies(dists: list[metadata.Distribution], site: Path) -> int:
    """Each distribution's installed files (its RECORD, scripts outside site-packages left
    out) as symlinks in `site`; the number of links. (os.path, not pathlib: some 7,000 files.)"""
    made: set[str] = set()
    for dist in dists:
        for f in dist.files or []:
            source = str(dist.locate_file(f))
            target = os.path.join(site, f)
            if f.parts[0] == ".." or target in made or not os.path.isfile(source):
                continue
            os.makedirs(os.path.dirname(target), exist_ok=True)
            os.symlink(source, target)
            made.add(target)
    return len(made)


def fresh_venv(path: Path, wheel: Path) -> Path:
    """A venv with the wheel and its dependencies installed; its bin folder."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    site = Path(sysconfig.get_path("purelib", vars={"base": str(path), "platbase": str(path)}))
    assert link_dependencies(closure(required(wheel)), site) > 0
    # without PYTHONPATH: pip would find the checkout's rmqstore.egg-info on it and install
    # nothing ("already satisfied")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    subprocess.run([sys.executable, "-m", "pip", "--python", str(path / "bin" / "python"),
                    "install", "-q", "--no-index", "--no-cache-dir", str(wheel)],
                   check=True, timeout=120, env=env)
    return path / "bin"


def installed_env(bin_dir: Path) -> dict[str, str]:
    """The environment of a user who put the venv on PATH: nothing of the checkout."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["PATH"] = os.pathsep.join([str(bin_dir), env.get("PATH", "")])
    return env


def process_logs(root: str, lines: int = 15) -> str:
    """The last lines of each log the cluster's processes wrote (why one did not start)."""
    out = []
    for log in sorted(Path(root).glob("*.log")):
        out += [f"--- {log.name}\n", *log.read_text(errors="replace").splitlines(True)[-lines:]]
    return "".join(out)


def http_get(url: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.status, r.read()


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> Path:
    return copy_sources(tmp_path_factory.mktemp("build") / "src")


@pytest.fixture(scope="module")
def wheel(sources) -> Path:
    return build_wheel(sources, sources.parent / "dist")


def test_the_wheel_carries_every_file_beside_the_code(sources, wheel):
    beside = {p.relative_to(sources).as_posix() for package in package_dirs(sources)
              for p in package.rglob("*") if p.is_file() and p.suffix != ".py"}
    left_out = {f for f in beside if any(fnmatch.fnmatch(f, p) for p in NOT_SHIPPED)}
    with zipfile.ZipFile(wheel) as z:
        shipped = set(z.namelist())
    assert beside - left_out - shipped == set(), "add them to package-data or NOT_SHIPPED"
    assert CONSOLE_PAGE.relative_to(ROOT).as_posix() in shipped


def test_installed_wheel_runs_a_local_cluster(tmp_path, wheel):
    bin_dir = fresh_venv(tmp_path / "venv", wheel)
    env = installed_env(bin_dir)
    cwd = tmp_path / "cwd"  # empty: `python -m` puts the working folder first on the path
    cwd.mkdir()
    where = subprocess.run([str(bin_dir / "python"), "-c",
                            "import cluster; print(cluster.__file__)"],
                           capture_output=True, text=True, env=env, cwd=cwd, check=True)
    assert where.stdout.startswith(str(tmp_path / "venv")), where.stdout

    cli = {"command": [str(bin_dir / "rmqstore")], "env": env, "cwd": str(cwd)}
    lc = LocalCluster(str(tmp_path / "cluster"), **cli)
    try:
        try:
            lc.wait_for("Ctrl-C stops everything cleanly", timeout=90)
        except AssertionError as e:
            raise AssertionError(f"{e}\n{process_logs(lc.root)}") from None
        for pid in lc.node_pids():  # the processes `local` started run the installed package
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                assert f.read().split(b"\0")[0] == bytes(bin_dir / "python"), pid

        base = ("--cluster-dir", lc.root, "--topic", "WheelSmoke")
        sent = cluster_cli("produce", *base, "--body", "from the wheel {i}", **cli)
        assert sent.returncode == 0 and "sent 1 message(s)" in sent.stdout, sent.stderr
        got = cluster_cli("receive", *base, "--group", "wheel", "--count", "1", "--wait", "10",
                          **cli)
        assert got.returncode == 0 and "from the wheel 0" in got.stdout, got.stdout + got.stderr

        page = CONSOLE_PAGE.read_bytes()
        for port in (lc.base + CONTROLLER_PORT_OFFSET, lc.base):  # the controller, the master
            assert http_get(f"http://127.0.0.1:{port + METRICS_PORT_OFFSET}/") == (200, page)

        pids = lc.node_pids()
        os.kill(lc.proc.pid, signal.SIGTERM)  # `local` stops its processes cleanly
        assert lc.proc.wait(60) == 0, "".join(lc.output)
        assert all(pid_gone(pid) for pid in pids)
    finally:
        lc.kill_all()
