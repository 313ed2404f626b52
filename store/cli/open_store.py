"""Opening a store for the commands that write or read through MessageStore (put, get, demo):
the StoreConfig for a directory (config file, the geometry of the files already there, the
tool's small defaults for a new store), load with progress, waiting for reput, and producer-style
unique message ids."""
from __future__ import annotations

import os
import random
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

from .. import codec
from ..config import FIELD_BY_KEY, StoreConfig, key_for, load_config_file, parse_properties
from common.config_values import ConfigError
from store.errors import StoreError
from ..layout import StoreLayout, is_index_file_name, is_offset_file_name
from ..readonly import IndexReader, infer_index_geometry, numbered_files
from common.text_output import Progress
from store.cli.tool_common import UsageError, err

if TYPE_CHECKING:
    from ..message_store import MessageStore

# Sizes the tool uses for a store it creates (put into an empty directory, demo), unless the
# config file names them: small files so a demo has several of each.
TOOL_COMMIT_LOG_FILE_SIZE = 4 * 1024 * 1024
TOOL_CQ_FILE_SIZE = 30_000 * 20
TOOL_INDEX_SLOTS = 50_000
TOOL_INDEX_NUM = 4 * TOOL_INDEX_SLOTS


def _detect_geometry(root: str, commit_log_dir: str) -> dict[str, Any]:
    """Sizes of the files already in a store directory (absent keys: no such files)."""
    out: dict[str, Any] = {}
    cl = numbered_files(commit_log_dir, is_offset_file_name)
    if cl:
        out["mapped_file_size_commit_log"] = os.path.getsize(cl[0][0])
    cq_sizes: Counter[int] = Counter()
    cq_root = StoreLayout(root).consume_queue_dir
    if os.path.isdir(cq_root):
        for topic in os.listdir(cq_root):
            tdir = os.path.join(cq_root, topic)
            if not os.path.isdir(tdir):
                continue
            for qname in os.listdir(tdir):
                files = numbered_files(os.path.join(tdir, qname), is_offset_file_name)
                if files:
                    size = os.path.getsize(files[0][0])
                    if size:
                        cq_sizes[size] += 1
    if len(cq_sizes) > 1:
        raise UsageError(f"consume queue files of different sizes in {cq_root}: "
                         f"{sorted(cq_sizes)}; run verify")
    if cq_sizes:
        out["mapped_file_size_consume_queue"] = next(iter(cq_sizes))
    index = numbered_files(StoreLayout(root).index_dir, is_index_file_name)
    if index:
        out["index_files"] = [p for p, _ in index]
    return out


def build_store_config(root: str, config_path: str | None,
                       file_size: int | None = None) -> StoreConfig:
    """StoreConfig for DIR: --config settings, the sizes of the files already there (which
    must win: the store refuses or even deletes files of another size), the tool's small
    defaults for a new store. Warnings go to stderr."""
    explicit: set[str] = set()
    if config_path:
        try:
            config, unknown = load_config_file(config_path)
            with open(config_path, encoding="utf-8") as fh:
                props = parse_properties(fh.read())
        except ConfigError as e:
            raise UsageError(str(e))
        except OSError as e:
            raise UsageError(f"cannot read {config_path}: {e}")
        for key in unknown:
            err(f"warning: {config_path}: unknown key {key!r} ignored")
        explicit = {FIELD_BY_KEY[k] for k in props if k in FIELD_BY_KEY}
        if "store_path_root_dir" in explicit and os.path.abspath(config.store_path_root_dir) != \
                os.path.abspath(root):
            err(f"warning: {config_path}: storePathRootDir={config.store_path_root_dir} "
                 f"ignored; using {root}")
    else:
        config = StoreConfig(store_path_root_dir=root)
    try:
        config = config.with_changes(store_path_root_dir=root)
        geo = _detect_geometry(root, config.commit_log_dir)
        changes: dict[str, Any] = {}
        for name, default in (("mapped_file_size_commit_log", TOOL_COMMIT_LOG_FILE_SIZE),
                              ("mapped_file_size_consume_queue", TOOL_CQ_FILE_SIZE)):
            if name in geo:
                if name in explicit and getattr(config, name) != geo[name]:
                    err(f"warning: {key_for(name)}={getattr(config, name)} ignored: the store's "
                         f"files have {geo[name]} bytes")
                if name == "mapped_file_size_commit_log" and file_size and file_size != geo[name]:
                    err(f"warning: --file-size {file_size} ignored: the store's commitlog files "
                         f"have {geo[name]} bytes")
                changes[name] = geo[name]
            elif name == "mapped_file_size_commit_log" and file_size:
                changes[name] = file_size
            elif name not in explicit:
                changes[name] = default
        if "index_files" in geo:
            changes.update(_index_geometry_for(geo["index_files"], config, explicit))
        else:
            if "max_hash_slot_num" not in explicit:
                changes["max_hash_slot_num"] = TOOL_INDEX_SLOTS
            if "max_index_num" not in explicit:
                changes["max_index_num"] = TOOL_INDEX_NUM
        return config.with_changes(**changes)
    except ConfigError as e:
        raise UsageError(str(e))


def _index_geometry_for(paths: list[str], config: StoreConfig,
                        explicit: set[str]) -> dict[str, int]:
    hint = (config.max_hash_slot_num, config.max_index_num)
    found: set[tuple[int, int]] = set()
    for path in paths:
        ix = IndexReader(path)
        try:
            if ix.header is None:
                continue
            geo = infer_index_geometry(ix.size, ix.header, ix.file.view, hint)
        finally:
            ix.close()
        if geo is None:
            raise UsageError(f"cannot tell maxHashSlotNum/maxIndexNum of {path}; name them in "
                             f"--config")
        found.add(geo)
    if len(found) > 1:
        raise UsageError(f"index files of different geometries {sorted(found)}")
    if not found:
        return {}
    slots, num = found.pop()
    if {"max_hash_slot_num", "max_index_num"} & explicit and (slots, num) != hint:
        err(f"warning: maxHashSlotNum/maxIndexNum {hint} ignored: the store's index files "
             f"have {(slots, num)}")
    return {"max_hash_slot_num": slots, "max_index_num": num}


def open_store(config: StoreConfig, progress: Progress, command: str) -> "MessageStore | None":
    """Load (lock, recover) the store, with recovery progress on stderr; None (the reason said
    on stderr for `command`) when it cannot be opened."""
    from ..message_store import MessageStore  # the read-only commands never need it

    try:
        store = MessageStore(config)
        store.load(progress=(lambda off: progress.update(lambda: f"recovering: offset {off}"))
                   if progress.enabled else None)
    except StoreError as e:
        err(f"{command}: cannot open the store: {e}")
        return None
    progress.done()
    return store


def wait_dispatched(store: "MessageStore", timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while store.reput.behind() > 0:
        if time.monotonic() > deadline:
            return False
        store.reput.wakeup()
        time.sleep(0.005)
    return True


class UniqIdGen:
    """Producer-style unique message ids (RocketMQ MessageClientIDSetter shape: 32 hex)."""

    def __init__(self) -> None:
        self._prefix = (codec.pack_host_address("127.0.0.1").hex().upper()
                        + f"{os.getpid() & 0xFFFF:04X}{random.getrandbits(32):08X}")
        self._start = int(time.time() * 1000)
        self._counter = 0

    def next(self) -> str:
        self._counter = (self._counter + 1) & 0xFFFF
        diff = (int(time.time() * 1000) - self._start) & 0xFFFFFFFF
        return f"{self._prefix}{diff:08X}{self._counter:04X}"
