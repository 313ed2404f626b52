"""What a search over archived commitlog files looks for, and the scan of one file: the rule
shared by the Spark search (spark_search.py, one task per file) and its local form.

A record matches when every given criterion holds: topic; key (its UNIQ_KEY or one of its
KEYS); tag; each property name=value; store time in [begin_ms, end_ms]; body contains bytes.
An empty filter matches every message.
"""
from __future__ import annotations

import base64
import json
from dataclasses import dataclass

from store import codec
from store.codec import MessageRecord
from store.commitlog.commitlog_walk import CommitLogWalk
from store.readonly.files import ROFile
from store.reader import record_decoder

BODY_PREVIEW = 256
COLUMNS = (("group", "string"), ("topic", "string"), ("queue_id", "int"),
           ("queue_offset", "bigint"), ("commit_log_offset", "bigint"), ("msg_id", "string"),
           ("uniq_key", "string"), ("keys", "string"), ("tags", "string"),
           ("store_timestamp", "bigint"), ("born_timestamp", "bigint"), ("body_size", "int"),
           ("properties", "string"), ("body", "string"))


@dataclass(frozen=True)
class SearchFilter:
    """The criteria of an archive search (the module docstring): a record matches when every
    non-empty one holds; the empty filter matches everything. Immutable and checked at
    construction, so a Spark task gets it pickled as is."""

    topic: str = ""
    key: str = ""
    tag: str = ""
    properties: tuple[tuple[str, str], ...] = ()
    begin_ms: int = 0
    end_ms: int = 0  # 0: no end
    body_contains: bytes = b""

    def __post_init__(self) -> None:
        if self.begin_ms < 0 or self.end_ms < 0:
            raise ValueError("begin and end are store times in ms since the epoch, not negative")
        if self.end_ms and self.begin_ms > self.end_ms:
            raise ValueError(f"begin {self.begin_ms} is after end {self.end_ms}")
        for name, _ in self.properties:
            if not name:
                raise ValueError("a property criterion needs a name (NAME=VALUE)")

    @staticmethod
    def property_pair(text: str) -> tuple[str, str]:
        name, sep, value = text.partition("=")
        if not sep or not name:
            raise ValueError(f"{text!r}: want NAME=VALUE")
        return name, value

    def matches(self, r: MessageRecord) -> bool:
        if self.topic and r.topic != self.topic:
            return False
        if self.key and self.key != r.uniq_key and self.key not in r.keys:
            return False
        if self.tag and r.tags != self.tag:
            return False
        if any(r.properties.get(n) != v for n, v in self.properties):
            return False
        if r.store_timestamp < self.begin_ms or (self.end_ms and r.store_timestamp > self.end_ms):
            return False
        return not self.body_contains or self.body_contains in r.body


def row(group: str, r: MessageRecord) -> dict:
    """A match as a flat row (COLUMNS); the body as text when it is UTF-8, else base64, the
    first BODY_PREVIEW bytes."""
    head = r.body[:BODY_PREVIEW]
    try:
        body = head.decode("utf-8")
    except UnicodeDecodeError:
        body = "base64:" + base64.b64encode(head).decode("ascii")
    ip, port = codec.parse_host(r.store_host)
    return {"group": group, "topic": r.topic, "queue_id": r.queue_id,
            "queue_offset": r.queue_offset, "commit_log_offset": r.physical_offset,
            "msg_id": codec.offset_msg_id(ip, port, r.physical_offset),
            "uniq_key": r.uniq_key or "", "keys": " ".join(r.keys), "tags": r.tags or "",
            "store_timestamp": r.store_timestamp, "born_timestamp": r.born_timestamp,
            "body_size": len(r.body), "properties": json.dumps(r.properties, sort_keys=True),
            "body": body}


def scan_file(group: str, path: str, base: int, flt: SearchFilter) -> list[dict]:
    """The matching records of one archived commitlog file (mapped read-only, walked with the
    store's one walk, every record's CRC checked)."""
    f = ROFile(path, base)
    try:
        walk = CommitLogWalk(decode=record_decoder(True))
        return [row(group, rec) for _, (_, rec) in walk.file(f.view, base, 0, f.size, f.size)
                if flt.matches(rec)]
    finally:
        f.close()
