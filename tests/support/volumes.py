"""Small real volumes for disk-pressure tests: a tmpfs mounted by the test and unmounted in its
cleanup. Mounting needs root: without it (or where mount is not permitted) the test is skipped
with the reason."""
from __future__ import annotations

import os
import subprocess
from typing import Callable, Iterator

import pytest


def mount_tmpfs(path: str, size_mb: int) -> None:
    os.makedirs(path, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs volume needs root")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", path],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"mount -t tmpfs is not permitted here: {r.stderr.strip()}")


def tmpfs_volumes(base: str) -> Iterator[Callable[[int], str]]:
    """Yields make(size_mb) -> a new mounted directory under `base`; unmounts them all after."""
    mounted: list[str] = []

    def make(size_mb: int) -> str:
        path = os.path.join(base, f"vol{len(mounted)}")
        mount_tmpfs(path, size_mb)
        mounted.append(path)
        return path

    try:
        yield make
    finally:
        for path in mounted:
            subprocess.run(["umount", "-l", path], check=False)
