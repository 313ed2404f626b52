"""The startup check (store/volume_check.py): files must fit below the warning ratio of their
volume; the refusal names the largest setting and a value that fits."""
from __future__ import annotations

import re

import pytest

from store.config import StoreConfig
from common.config_values import ConfigError
from store.volume_check import check_volumes

MB = 1 << 20


def one_volume(total: int):
    return lambda path: (1, total)


def test_defaults_fit_a_large_volume(tmp_path):
    check_volumes(StoreConfig(store_path_root_dir=str(tmp_path)), one_volume(100 * 1024 * MB))


def test_defaults_refused_on_256_mb_naming_the_commitlog_size(tmp_path):
    config = StoreConfig(store_path_root_dir=str(tmp_path))
    with pytest.raises(ConfigError, match="Lower mappedFileSizeCommitLog") as e:
        check_volumes(config, one_volume(256 * MB))
    fit = int(re.search(r"to at most (\d+)", str(e.value)).group(1))
    check_volumes(config.with_changes(mapped_file_size_commit_log=fit), one_volume(256 * MB))
    with pytest.raises(ConfigError):
        check_volumes(config.with_changes(mapped_file_size_commit_log=fit + MB),
                      one_volume(256 * MB))


def test_each_volume_is_checked_with_what_lives_on_it(tmp_path):
    config = StoreConfig(store_path_root_dir=str(tmp_path / "root"),
                         store_path_commit_log=str(tmp_path / "big" / "commitlog"),
                         mapped_file_size_consume_queue=20 * 1000)
    sizes = lambda path: (2, 100 * 1024 * MB) if "big" in path else (1, 20 * MB)  # noqa: E731
    with pytest.raises(ConfigError, match="Lower maxHashSlotNum"):  # the index: 20 MB of slots
        check_volumes(config, sizes)
    check_volumes(config.with_changes(max_hash_slot_num=500_000), sizes)
