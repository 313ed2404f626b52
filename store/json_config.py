"""JSON configuration files with RocketMQ ConfigManager's `.bak` fallback, and the topic table.

`JsonConfigFile` keeps two copies: `<path>` (current) and `<path>.bak` (the previous good
version). Both are replaced with FileIO.write_file_atomic, so each one on its own is always
either old or new; the `.bak` additionally covers a main file damaged by something else (a bad
disk block, a hand edit). `TopicConfigTable` stores `config/topics.json` in RocketMQ's format:

    {
      "dataVersion": {"counter": 3, "timestamp": 1700000000000},
      "topicConfigTable": {
        "TopicA": {"attributes": {}, "order": false, "perm": 6, "readQueueNums": 8,
                   "topicFilterType": "SINGLE_TAG", "topicName": "TopicA",
                   "topicSysFlag": 0, "writeQueueNums": 8}
      }
    }
"""
from __future__ import annotations

import json
import os
import re
import threading
from dataclasses import dataclass
from typing import Any, Iterable

from common.clock import SYSTEM_CLOCK, Clock
from common.config_values import ConfigError
from .errors import CorruptFile, DiskError
from .commitlog.fileio import DEFAULT_FILE_IO, FileIO
from store.layout import StoreLayout, backup_path

PERM_INHERIT = 1
PERM_WRITE = 2
PERM_READ = 4
DEFAULT_QUEUE_NUMS = 8
MAX_QUEUE_NUMS = 1024
# RocketMQ TopicValidator: legal characters and maximum length of a topic name.
TOPIC_NAME_PATTERN = re.compile(r"^[%|a-zA-Z0-9_-]+$")
TOPIC_MAX_LENGTH = 127
TOPIC_FILTER_TYPES = ("SINGLE_TAG", "MULTI_TAG")


class JsonConfigFile:
    """One JSON object on disk, with `<path>.bak` holding the previous good version."""

    def __init__(self, path: str, io: FileIO = DEFAULT_FILE_IO) -> None:
        self.path = path
        self.bak_path = backup_path(path)
        self.io = io
        self._lock = threading.Lock()

    def load(self) -> dict[str, Any] | None:
        """The stored object. Falls back to `.bak` when the main file is missing, empty, not a
        JSON object or unreadable. Returns None when neither file exists. Raises CorruptFile
        (or DiskError for a read error) when the main file exists but neither copy is usable:
        returning None there would let the caller start empty and overwrite the config."""
        with self._lock:
            main, main_problem = self._read(self.path)
            if main is not None:
                return main
            bak, bak_problem = self._read(self.bak_path)
            if bak is not None:
                return bak
            if main_problem is None and bak_problem is None:
                return None  # neither file exists: a fresh store
            for path, problem in ((self.path, main_problem), (self.bak_path, bak_problem)):
                if isinstance(problem, OSError):
                    raise DiskError("read config", path, problem) from problem
            raise CorruptFile(
                f"no usable config: {self.path}: {main_problem or 'missing'}; "
                f"{self.bak_path}: {bak_problem or 'missing'}"
            )

    def _read(self, path: str) -> tuple[dict[str, Any] | None, OSError | str | None]:
        """(object, None) when good; (None, None) when missing; (None, problem) otherwise."""
        try:
            raw = self.io.read_file(path)
        except FileNotFoundError:
            return None, None
        except OSError as e:
            return None, e
        parsed = _parse(raw)
        if isinstance(parsed, str):
            return None, parsed
        return parsed, None

    def persist(self, data: dict[str, Any]) -> None:
        """Save the current good file as `.bak`, then write `data` (keys sorted, indent 2).
        Raises DiskError on failure; the main file then still holds its previous content."""
        encoded = (json.dumps(data, sort_keys=True, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
        with self._lock:
            try:
                self._ensure_dir(os.path.dirname(os.path.abspath(self.path)))
                try:
                    current = self.io.read_file(self.path)
                except FileNotFoundError:
                    current = None
                # Only a parseable main file becomes the backup: copying a damaged one would
                # replace the last good `.bak` with garbage.
                if current is not None and not isinstance(_parse(current), str):
                    self.io.write_file_atomic(self.bak_path, current)
                self.io.write_file_atomic(self.path, encoded)
            except OSError as e:
                raise DiskError("persist config", self.path, e) from e

    def _ensure_dir(self, directory: str) -> None:
        if os.path.isdir(directory):
            return
        self.io.makedirs(directory)
        # The new directory's own entry must be durable too, or a crash could lose the file.
        self.io.fsync_dir(os.path.dirname(directory))


def _parse(raw: bytes) -> dict[str, Any] | str:
    """The JSON object in `raw`, or a string describing why it is not one."""
    if not raw.strip():
        return "empty file"
    try:
        obj = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        return f"not valid JSON ({e})"
    if not isinstance(obj, dict):
        return f"top level is {type(obj).__name__}, not an object"
    return obj



@dataclass(frozen=True)
class TopicConfig:
    """A topic's queue counts, permissions, order flag, filter type, system flag and attributes
    (every field of RocketMQ's TopicConfig; `attributes` may be given as a dict and is kept as
    sorted (key, value) pairs, so a config stays hashable). Raises ConfigError when a
    value is out of range."""

    topic_name: str
    read_queue_nums: int = DEFAULT_QUEUE_NUMS
    write_queue_nums: int = DEFAULT_QUEUE_NUMS
    perm: int = PERM_READ | PERM_WRITE
    order: bool = False
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    attributes: tuple[tuple[str, str], ...] = ()  # RocketMQ's Map<String, String>, sorted

    def __post_init__(self) -> None:
        name = self.topic_name
        if not isinstance(name, str) or not name:
            raise ConfigError(f"topic name must be a non-empty string, got {name!r}")
        if len(name) > TOPIC_MAX_LENGTH:
            raise ConfigError(f"topic name longer than {TOPIC_MAX_LENGTH} characters: {name[:40]!r}...")
        if not TOPIC_NAME_PATTERN.match(name):
            raise ConfigError(f"topic name {name!r} has characters outside [%|a-zA-Z0-9_-]")
        for field in ("read_queue_nums", "write_queue_nums"):
            v = getattr(self, field)
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_QUEUE_NUMS:
                raise ConfigError(f"{field} of topic {name!r} must be 1..{MAX_QUEUE_NUMS}, got {v!r}")
        if isinstance(self.perm, bool) or not isinstance(self.perm, int) or not 0 <= self.perm <= 7:
            raise ConfigError(f"perm of topic {name!r} must be 0..7, got {self.perm!r}")
        if not isinstance(self.order, bool):
            raise ConfigError(f"order of topic {name!r} must be a bool, got {self.order!r}")
        if self.topic_filter_type not in TOPIC_FILTER_TYPES:
            raise ConfigError(f"topicFilterType of topic {name!r} must be one of "
                              f"{', '.join(TOPIC_FILTER_TYPES)}, got {self.topic_filter_type!r}")
        flag = self.topic_sys_flag
        if isinstance(flag, bool) or not isinstance(flag, int) or flag < 0:
            raise ConfigError(f"topicSysFlag of topic {name!r} must be an int >= 0, got {flag!r}")
        attrs = self.attributes
        pairs = attrs.items() if isinstance(attrs, dict) else attrs
        if not isinstance(pairs, (tuple, type({}.items()))) or not all(
                isinstance(p, tuple) and len(p) == 2 and all(isinstance(x, str) for x in p)
                for p in pairs):
            raise ConfigError(f"attributes of topic {name!r} must map strings to strings, "
                              f"got {attrs!r}")
        object.__setattr__(self, "attributes", tuple(sorted(dict(pairs).items())))

    @property
    def readable(self) -> bool:
        return bool(self.perm & PERM_READ)

    @property
    def writable(self) -> bool:
        return bool(self.perm & PERM_WRITE)

    def to_json(self) -> dict[str, Any]:
        """RocketMQ's JSON form: every field RocketMQ's TopicConfig writes to topics.json."""
        return {
            "topicName": self.topic_name,
            "readQueueNums": self.read_queue_nums,
            "writeQueueNums": self.write_queue_nums,
            "perm": self.perm,
            "topicFilterType": self.topic_filter_type,
            "topicSysFlag": self.topic_sys_flag,
            "order": self.order,
            "attributes": dict(self.attributes),
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> "TopicConfig":
        if not isinstance(obj, dict):
            raise ConfigError(f"topic entry must be an object, got {obj!r}")
        return cls(
            topic_name=obj.get("topicName"),  # type: ignore[arg-type]  # validated above
            read_queue_nums=obj.get("readQueueNums", DEFAULT_QUEUE_NUMS),
            write_queue_nums=obj.get("writeQueueNums", DEFAULT_QUEUE_NUMS),
            perm=obj.get("perm", PERM_READ | PERM_WRITE),
            order=obj.get("order", False),
            topic_filter_type=obj.get("topicFilterType", "SINGLE_TAG"),
            topic_sys_flag=obj.get("topicSysFlag", 0),
            attributes=obj.get("attributes") or {},
        )


class TopicConfigTable:
    """The topics of a store, persisted to `config/topics.json` after every change. Every
    change bumps `dataVersion.counter` and stamps `dataVersion.timestamp` from `clock`, so a
    peer can tell which of two tables is newer. Thread-safe."""

    def __init__(self, path: str, io: FileIO = DEFAULT_FILE_IO, clock: Clock = SYSTEM_CLOCK) -> None:
        self.file = JsonConfigFile(path, io)
        self.clock = clock
        self._lock = threading.RLock()
        self._topics: dict[str, TopicConfig] = {}
        self._timestamp = 0
        self._counter = 0

    @classmethod
    def for_store(cls, store_dir: str, io: FileIO = DEFAULT_FILE_IO,
                  clock: Clock = SYSTEM_CLOCK) -> "TopicConfigTable":
        """The table at `<store_dir>/config/topics.json`."""
        return cls(StoreLayout(store_dir).topics, io, clock)

    @property
    def path(self) -> str:
        return self.file.path

    @property
    def data_version(self) -> tuple[int, int]:
        """(timestamp ms, counter) of the last change."""
        with self._lock:
            return self._timestamp, self._counter

    def load(self) -> bool:
        """Replace the in-memory table with the file's (or its `.bak`). Returns False when no
        file exists (the table is then empty). Raises CorruptFile on an unusable file."""
        data = self.file.load()
        with self._lock:
            if data is None:
                self._topics, self._timestamp, self._counter = {}, 0, 0
                return False
            try:
                table = data.get("topicConfigTable", {})
                if not isinstance(table, dict):
                    raise ConfigError("topicConfigTable is not an object")
                topics = {}
                for name, entry in table.items():
                    cfg = TopicConfig.from_json(entry)
                    if cfg.topic_name != name:
                        raise ConfigError(f"key {name!r} holds topic {cfg.topic_name!r}")
                    topics[name] = cfg
                version = data.get("dataVersion", {})
                timestamp = int(version.get("timestamp", 0))
                counter = int(version.get("counter", 0))
            except (ConfigError, AttributeError, TypeError, ValueError) as e:
                raise CorruptFile(f"{self.path}: {e}") from e
            self._topics, self._timestamp, self._counter = topics, timestamp, counter
            return True

    def get(self, name: str) -> TopicConfig | None:
        with self._lock:
            return self._topics.get(name)

    def all(self) -> list[TopicConfig]:
        """All topics, sorted by name."""
        with self._lock:
            return [self._topics[n] for n in sorted(self._topics)]

    def put(self, config: TopicConfig) -> None:
        """Add or replace a topic and persist. On DiskError the in-memory table is unchanged."""
        if not isinstance(config, TopicConfig):
            raise ConfigError(f"expected a TopicConfig, got {type(config).__name__}")
        with self._lock:
            topics = dict(self._topics)
            topics[config.topic_name] = config
            self._commit(topics)

    def delete(self, name: str) -> bool:
        """Remove a topic and persist; returns False (and writes nothing) if it was absent."""
        with self._lock:
            if name not in self._topics:
                return False
            topics = dict(self._topics)
            del topics[name]
            self._commit(topics)
            return True

    def _commit(self, topics: dict[str, TopicConfig]) -> None:
        # Persist first, then swap in memory: a failed write leaves memory matching the disk.
        timestamp, counter = self.clock.now_ms(), self._counter + 1
        self.file.persist(self.encode(topics.values(), timestamp, counter))
        self._topics, self._timestamp, self._counter = topics, timestamp, counter

    @staticmethod
    def encode(topics: Iterable[TopicConfig], timestamp: int, counter: int) -> dict[str, Any]:
        """topics.json's content (also the replicated topic table's view of itself)."""
        return {
            "topicConfigTable": {cfg.topic_name: cfg.to_json() for cfg in topics},
            "dataVersion": {"timestamp": timestamp, "counter": counter},
        }
