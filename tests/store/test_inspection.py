"""store/readonly/inspection.py: the inspect report, straight from a StoreReader."""
from __future__ import annotations

import os

from store.readonly.inspection import inspect_store
from store.layout import CHECKPOINT_FILE, LOCK_FILE
from store.readonly import StoreReader
from tests.store.tool_helpers import DEMO_MESSAGES, FILE_SIZE


def test_inspect_store_of_the_demo(demo):
    with StoreReader(str(demo)) as reader:
        info = inspect_store(reader)
        assert info["store"] == reader.root and info["abort"] is False
        assert info["lock_file"] is True and info["lock_pid"] is not None  # the demo's last holder
        cl = info["commitlog"]
        assert cl["file_size"] == FILE_SIZE and cl["min_offset"] == 0
        assert cl["max_offset"] == reader.valid_end()
        assert sum(f["written"] for f in cl["files"]) == cl["max_offset"]
        assert sum(q["max_offset"] - q["min_offset"] for q in info["consume_queues"]) == DEMO_MESSAGES
        (ix,) = info["index"]["files"]
        assert ix["entries"] == 2 * DEMO_MESSAGES and ix["begin_time"] and ix["end_time"]
        assert info["checkpoint"]["exists"] and not info["checkpoint"]["damaged"]


def test_inspect_store_without_checkpoint_and_lock(demo):
    os.unlink(os.path.join(demo, CHECKPOINT_FILE))
    os.unlink(os.path.join(demo, LOCK_FILE))
    with StoreReader(str(demo)) as reader:
        info = inspect_store(reader)
    assert info["lock_file"] is False and info["lock_pid"] is None
    cp = info["checkpoint"]
    assert not cp["exists"] and not cp["damaged"] and cp["physicMsgTime"] is None
