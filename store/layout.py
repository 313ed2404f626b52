"""Where everything of a store lives: every file and directory name, the name rules of the
numbered files, and what each file's state means after a crash. Nothing else in the repository
spells these names.

    <storePathRootDir>/         (RocketMQ's names: a directory moves between the two)
        commitlog/<20-digit offset>
                                COMMITLOG_DIR: records (store.codec); storePathCommitLog may
                                put it elsewhere (StoreConfig.commit_log_dir)
        consumequeue/<topic>/<queueId>/<20-digit byte offset of the first unit>
                                CONSUME_QUEUE_DIR: 20-byte units (store.queue.consume_queue)
        index/<yyyyMMddHHmmssSSS>
                                INDEX_DIR: hash index files (store.index.index_file)
        checkpoint              CHECKPOINT_FILE: 4096 bytes (store.checkpoint)
        abort                   ABORT_FILE: empty marker (store.markers)
        lock                    LOCK_FILE: flock + holder's pid (store.markers)
        epochFileCheckpoint     EPOCH_FILE: epoch list, text (store.epoch_file)
        config/                 CONFIG_DIR
            topics.json         TOPICS_FILE: a view of the replicated topic table (format:
                                store.json_config.TopicConfigTable; an old-style per-node
                                file is imported once)
            delayOffset.json    DELAY_OFFSET_FILE: a view of the schedule progress records
                                (store.schedule.schedule)
            consumerOffset.json CONSUMER_OFFSET_FILE (a view of the consumer state; the audit)
            subscriptionGroup.json
                                SUBSCRIPTION_GROUP_FILE (a view of the consumer state's groups)
            admin.token         ADMIN_TOKEN_FILE: the node's generated admin token (mode 0600;
                                never exported)

Numbered file names: commitlog and consume-queue files are named by the zero-padded 20-digit
decimal offset of their first byte (`offset_file_name`), so offset -> file is arithmetic and the
names sort in offset order. Index files are named by their creation time, yyyyMMddHHmmssSSS in
local time (`index_file_name`, RocketMQ UtilAll.timeMillisToHumanString), 17 digits that sort in
creation order.

Atomic replacement: small files (checkpoint, epochFileCheckpoint, config/*.json) are written to
`<name>.tmp` (`tmp_path`), fsynced, renamed over `<name>`, then the directory is fsynced
(FileIO.write_file_atomic); the epoch file and the json files first copy the previous good
content to `<name>.bak` (`backup_path`).

Crash-safe states: what a reader may find after a crash and what it means.

    file                 state found                     meaning, and what the store does
    -------------------  ------------------------------  -----------------------------------
    abort                present at start                the last run did not shut down
                                                         cleanly (or still runs): abnormal
                                                         recovery
                         absent                          clean shutdown: normal recovery
    lock                 any content                     only the flock counts, and it dies
                                                         with its process; the pid inside is
                                                         the last holder's (informational).
                                                         Never deleted.
    checkpoint           missing                         a fresh store: every field 0
                         wrong size or unreadable        treated as missing, and recovery is
                         (a torn checkpoint)             abnormal: nothing it says is trusted
                         checkpoint.tmp left over        an interrupted flush: ignored, the
                                                         next flush overwrites it
    commitlog/N          records, then zeros             normal (files are preallocated)
                         a torn or corrupt record        the unflushed tail of a crash: the
                                                         CRC scan of recovery cuts there,
                                                         zeroing and syncing the cut bytes
                                                         before forgetting them
                         newest file of the wrong size   an interrupted creation (no data):
                                                         removed
    consumequeue/...     units, then all-zero units      normal: a zero unit was never
                                                         written, recovery stops there
                         units past the commitlog's end  cut back to the commitlog's valid end
    index/NAME           slots pointing at >= indexCount stale (the header is written last):
                                                         ignored
                         endTimestamp past the           after an abnormal exit the entries
                         checkpoint's indexMsgTimestamp  may be torn: the file is deleted and
                                                         rebuilt by re-dispatch
                         newest file of the wrong size   an interrupted creation: removed
    epochFileCheckpoint  missing                         no epochs (a new or wiped replica)
                         count/CRC/line/order damage     the `.bak` copy is used
                         `.tmp` left over                ignored; the next save overwrites it
    config/*.json        missing                         no table yet (empty)
                         empty or not a JSON object      the `.bak` copy is used
                         `.tmp` left over                ignored on load; the next write
                                                         overwrites it
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from datetime import datetime

COMMITLOG_DIR = "commitlog"
CONSUME_QUEUE_DIR = "consumequeue"
INDEX_DIR = "index"
CHECKPOINT_FILE = "checkpoint"
ABORT_FILE = "abort"
LOCK_FILE = "lock"
EPOCH_FILE = "epochFileCheckpoint"
CONFIG_DIR = "config"
TOPICS_FILE = "topics.json"
DELAY_OFFSET_FILE = "delayOffset.json"
CONSUMER_OFFSET_FILE = "consumerOffset.json"
SUBSCRIPTION_GROUP_FILE = "subscriptionGroup.json"
ADMIN_TOKEN_FILE = "admin.token"
CONFIG_FILE_SUFFIX = ".json"  # what config/ holds besides the admin token
TMP_SUFFIX = ".tmp"
BACKUP_SUFFIX = ".bak"

OFFSET_NAME_DIGITS = 20
INDEX_NAME_DIGITS = 17


# -- numbered file names ------------------------------------------------------------------------
def offset_file_name(offset: int) -> str:
    """Name of a commitlog or consume-queue file whose first byte is at `offset`."""
    return f"{offset:0{OFFSET_NAME_DIGITS}d}"


def is_offset_file_name(name: str) -> bool:
    return len(name) == OFFSET_NAME_DIGITS and name.isdigit()


def index_file_name(ms: int) -> str:
    """yyyyMMddHHmmssSSS of `ms` in local time."""
    return time.strftime("%Y%m%d%H%M%S", time.localtime(ms // 1000)) + f"{ms % 1000:03d}"


def parse_index_file_name(name: str) -> int:
    """Inverse of index_file_name (milliseconds since the epoch)."""
    dt = datetime.strptime(name[:14], "%Y%m%d%H%M%S")
    return int(time.mktime(dt.timetuple())) * 1000 + int(name[14:17])


def is_index_file_name(name: str) -> bool:
    return len(name) == INDEX_NAME_DIGITS and name.isdigit()


# -- atomic replacement -------------------------------------------------------------------------
def tmp_path(path: str) -> str:
    """Where an atomic write of `path` puts the new content before the rename."""
    return path + TMP_SUFFIX


def backup_path(path: str) -> str:
    """The previous good content of `path` (epoch file, config json files)."""
    return path + BACKUP_SUFFIX


# -- one store directory ------------------------------------------------------------------------
def _path(*names: str) -> property:
    """A StoreLayout property: `names` joined under the root."""
    def get(self: "StoreLayout") -> str:
        return os.path.join(self.root, *names)
    return property(get, doc=f"<root>/{'/'.join(names)}")


@dataclass(frozen=True)
class StoreLayout:
    """The paths of one store directory (`root` = storePathRootDir). The commitlog directory
    here is the default one; StoreConfig.commit_log_dir honours storePathCommitLog."""

    root: str

    commitlog_dir = _path(COMMITLOG_DIR)
    consume_queue_dir = _path(CONSUME_QUEUE_DIR)
    index_dir = _path(INDEX_DIR)
    checkpoint = _path(CHECKPOINT_FILE)
    abort = _path(ABORT_FILE)
    lock = _path(LOCK_FILE)
    epoch_file = _path(EPOCH_FILE)
    config_dir = _path(CONFIG_DIR)
    topics = _path(CONFIG_DIR, TOPICS_FILE)
    delay_offset = _path(CONFIG_DIR, DELAY_OFFSET_FILE)
    consumer_offset = _path(CONFIG_DIR, CONSUMER_OFFSET_FILE)
    subscription_group = _path(CONFIG_DIR, SUBSCRIPTION_GROUP_FILE)
    admin_token = _path(CONFIG_DIR, ADMIN_TOKEN_FILE)

    def queue_dir(self, topic: str, queue_id: int) -> str:
        return os.path.join(self.root, CONSUME_QUEUE_DIR, topic, str(queue_id))

    def config_file(self, name: str) -> str:
        return os.path.join(self.root, CONFIG_DIR, name)
