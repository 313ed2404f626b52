"""File helpers for tests that edit a file a running node watches."""
from __future__ import annotations

import os


def replace_file(path, text: str) -> None:
    """Replace the file's content through a new inode (write a temp file, rename it over), the
    way editors and config management do, so a reader never sees half a file."""
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)
