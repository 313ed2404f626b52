"""The startup check: do the configured files fit the volumes they live on?

A store preallocates whole files: commitlog files of `mappedFileSizeCommitLog`, consume queue
files of `mappedFileSizeConsumeQueue` per queue, and index files (header and hash slots of
`maxHashSlotNum`, then entries in steps: store/index/index_file.py). Writes are refused from
`diskSpaceWarningLevelRatio` of the volume on, forced cleanup can only delete a commitlog
file that is not the one being written, and a client put creates a commitlog file only while
one more would still fit (the room kept for the node's own records, MessageStore._keep_room),
so a volume must hold, below that ratio:

    COMMITLOG_FILES_AT_START (3) commitlog files + the first index file
    + CQ_FILES_AT_START consume queue files

(CQ_FILES_AT_START: the node's internal tables and one topic of default size). When it does
not, the node refuses to start and names the setting to lower, with the largest value that
fits. The volume's total size counts, not its free space: a node on a full disk still starts,
serves reads and lets retention free space.
"""
from __future__ import annotations

import os
from typing import Callable

from .config import StoreConfig, key_for
from common.config_values import ConfigError
from .commitlog.fileio import existing_parent
from .index.index_file import initial_index_file_size
from .layout import StoreLayout

CQ_FILES_AT_START = 8
COMMITLOG_FILES_AT_START = 3  # the one written, the next, the room kept for the node's records
VolumeSize = Callable[[str], tuple[int, int]]
"""(device id, total bytes) of the file system holding a path."""


def statvfs_size(path: str) -> tuple[int, int]:
    p = existing_parent(path)
    st = os.statvfs(p)
    return os.stat(p).st_dev, st.f_blocks * st.f_frsize


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"


def check_volumes(config: StoreConfig, volume_size: VolumeSize = statvfs_size) -> None:
    """Raise ConfigError naming the setting to lower when the files do not fit (see above)."""
    layout = StoreLayout(config.store_path_root_dir)
    parts: list[tuple[str, str, int]] = [  # (path, setting, bytes it needs)
        (config.commit_log_dir, "mapped_file_size_commit_log",
         COMMITLOG_FILES_AT_START * config.mapped_file_size_commit_log),
        (layout.consume_queue_dir, "mapped_file_size_consume_queue",
         CQ_FILES_AT_START * config.mapped_file_size_consume_queue)]
    if config.message_index_enable:
        parts.append((layout.index_dir, "max_hash_slot_num",
                      initial_index_file_size(config.max_hash_slot_num, config.max_index_num)))
    volumes: dict[int, tuple[int, str, list[tuple[str, int]]]] = {}
    for path, setting, need in parts:
        dev, total = volume_size(path)
        volumes.setdefault(dev, (total, path, []))[2].append((setting, need))
    ratio = config.disk_space_warning_level_ratio / 100.0
    for total, where, needs in volumes.values():
        budget = int(total * ratio)
        used = sum(n for _, n in needs)
        if used <= budget:
            continue
        setting, need = max(needs, key=lambda sn: sn[1])
        others = used - need
        current = getattr(config, setting)
        room = max(0, budget - others)
        fit = int(current * room / need) if need else 0
        detail = ", ".join(f"{key_for(s)} needs {_mib(n)}" for s, n in needs)
        raise ConfigError(
            f"the store's files do not fit the volume of {existing_parent(where)}: "
            f"{_mib(total)} x diskSpaceWarningLevelRatio {ratio:.2f} = {_mib(budget)}, but "
            f"{detail} ({COMMITLOG_FILES_AT_START} commitlog files, {CQ_FILES_AT_START} consume "
            f"queue files, the first index file). Lower {key_for(setting)} (now {current}) to "
            f"at most {fit}, or use a larger volume")
