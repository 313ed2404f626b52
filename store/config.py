"""Store settings with Apache RocketMQ's defaults and key names (MessageStoreConfig and the
store-relevant parts of BrokerConfig), plus a loader for broker.conf-style properties files.

`StoreConfig` is frozen and validated on construction: clamped ratios and the rounded consume
queue file size are stored as their effective values, so what you read is what the store uses.
"""
from __future__ import annotations

import dataclasses
import os
import re
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from store.broker_role import BrokerRole
from common.config_values import ConfigError, KeyDoc, parse_bool, parse_int
from store.layout import StoreLayout

__all__ = [
    "StoreConfig", "parse_properties", "load_config_file", "key_for", "FIELD_BY_KEY", "KEY_DOCS",
    "FLUSH_DISK_TYPES", "BROKER_ROLES", "CQ_STORE_UNIT_SIZE", "MIN_COMMIT_LOG_FILE_SIZE",
]

FLUSH_DISK_TYPES = frozenset({"ASYNC_FLUSH", "SYNC_FLUSH"})
BROKER_ROLES = frozenset(BrokerRole)
CQ_STORE_UNIT_SIZE = 20  # commitlog offset (8) + size (4) + tag hash code (8)
MIN_COMMIT_LOG_FILE_SIZE = 4096
_DELAY_UNITS_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_DELAY_LEVEL = re.compile(r"(\d+)([smhd])")

# RocketMQ keys that are not the mechanical camelCase of our snake_case name.
_KEY_OVERRIDES: Mapping[str, str] = MappingProxyType({
    "destroy_mapped_file_interval_forcibly": "destroyMapedFileIntervalForcibly",  # sic
    "broker_ip1": "brokerIP1",
    "check_crc_on_recover": "checkCRCOnRecover",
    "force_verify_prop_crc": "forceVerifyPropCRC",
    "enabled_append_prop_crc": "enabledAppendPropCRC",
})


def _default_root_dir() -> str:
    # A factory, not a constant: HOME is read when the config is built, not at import.
    return os.path.join(os.path.expanduser("~"), "store")


@dataclass(frozen=True, kw_only=True)
class StoreConfig:
    """Settings of one store. Times are milliseconds unless the name says otherwise."""

    store_path_root_dir: str = field(default_factory=_default_root_dir)
    store_path_commit_log: str = ""  # "" means <root>/commitlog
    mapped_file_size_commit_log: int = 1024 * 1024 * 1024
    mapped_file_size_consume_queue: int = 300_000 * CQ_STORE_UNIT_SIZE
    max_hash_slot_num: int = 5_000_000
    max_index_num: int = 20_000_000
    max_message_size: int = 4 * 1024 * 1024  # body only
    max_properties_size: int = 32767
    max_topic_length: int = 127
    flush_disk_type: str = "ASYNC_FLUSH"
    flush_interval_commit_log: int = 500
    flush_commit_log_least_pages: int = 4
    flush_commit_log_thorough_interval: int = 10_000
    flush_commit_log_timed: bool = False
    commit_interval_commit_log: int = 200
    commit_commit_log_least_pages: int = 4
    commit_commit_log_thorough_interval: int = 200
    transient_store_pool_enable: bool = False
    transient_store_pool_size: int = 5
    write_without_mmap: bool = False  # pwrite instead of writing through the mapping
    # ours: fault this much of the commitlog in ahead of the writes (store/commitlog/prefault.py); 0: off
    prefault_ahead_bytes: int = 16 * 1024 * 1024
    flush_interval_consume_queue: int = 1000
    flush_consume_queue_least_pages: int = 2
    flush_consume_queue_thorough_interval: int = 60_000
    sync_flush_timeout: int = 5000
    slave_timeout: int = 3000
    file_reserved_time: int = 72  # hours
    delete_when: str = "04"
    disk_max_used_space_ratio: int = 75
    disk_space_warning_level_ratio: int = 90
    disk_space_clean_forcibly_ratio: int = 85
    clean_resource_interval: int = 10_000
    delete_commit_log_files_interval: int = 100
    delete_consume_queue_files_interval: int = 100
    destroy_mapped_file_interval_forcibly: int = 120_000
    redelete_hanged_file_interval: int = 120_000
    clean_file_forcibly_enable: bool = True
    # Ours: what forced cleanup may delete (store/retention/retention_guard.py).
    disk_pressure_policy: str = "protect-unconsumed"
    check_crc_on_recover: bool = True
    force_verify_prop_crc: bool = False
    enabled_append_prop_crc: bool = False
    message_index_enable: bool = True
    message_index_safe: bool = False
    # Ours: the index is built by a child process (store/index/index_process.py) instead of under
    # the serving process's GIL. Off for an embedded store; the nodes turn it on.
    message_index_process_enable: bool = False
    broker_role: BrokerRole = BrokerRole.ASYNC_MASTER
    message_delay_level: str = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
    auto_message_version_on_topic_len: bool = True
    broker_ip1: str = "127.0.0.1"
    listen_port: int = 10911
    access_message_in_memory_max_ratio: int = 40
    max_transfer_bytes_on_message_in_memory: int = 256 * 1024
    max_transfer_count_on_message_in_memory: int = 32
    max_transfer_bytes_on_message_in_disk: int = 64 * 1024
    max_transfer_count_on_message_in_disk: int = 8
    default_query_max_num: int = 32
    max_msgs_num_batch: int = 64
    duplication_enable: bool = False
    timer_max_delay_sec: int = 3 * 24 * 3600  # later delivery timestamps are illegal
    reput_batch_max_bytes: int = 4 * 1024 * 1024  # ours, not RocketMQ's
    # Ours (NATS JetStream's duplicate window): a send whose message id was stored this many
    # seconds ago or less is answered with the original's receipt and not stored again; 0: off
    # (store/dedup/window.py). The entries it holds at most: the oldest go first (about 205
    # bytes an entry with a 34-character id: 100 MB at the default).
    duplicate_window_seconds: int = 120
    duplicate_window_max_entries: int = 500_000
    # -- replication (RocketMQ's HA keys; the transport is a gRPC stream on listenPort) --
    ha_master_address: str = ""  # host:port of the master, for a SLAVE
    ha_send_heartbeat_interval: int = 5000
    ha_housekeeping_interval: int = 20_000  # a stream silent this long is closed
    ha_transfer_batch_size: int = 1024 * 1024  # RocketMQ: 32 KiB over raw TCP; gRPC wants more
    ha_max_gap_not_in_sync: int = 256 * 1024 * 1024
    ha_max_time_slave_not_catchup: int = 15_000
    in_sync_replicas: int = 1  # counts the master; SYNC_MASTER waits for max(1, this - 1) slaves
    min_in_sync_replicas: int = 1  # counts the master; fewer in sync refuses puts
    all_ack_in_sync_state_set: bool = False  # SYNC_MASTER waits for every in-sync slave
    sync_from_last_file: bool = False  # an empty slave starts at the master's last file
    ha_max_in_flight_bytes: int = 8 * 1024 * 1024  # ours: unacknowledged bytes per slave
    ha_reconnect_min_backoff: int = 200  # ours: slave reconnect backoff, doubling
    ha_reconnect_max_backoff: int = 5000
    # ours: slow members (gray failures), by time (ha/ack_latency.py). A sync-state-set member
    # whose acks take longer than haMaxSlaveAckLatency, or longer than haSlowSlaveMinLatency
    # and haSlowSlaveLatencyRatio times the fastest member's, for haSlowSlaveDetectWindow,
    # leaves the in-sync set; it returns after haSlowSlaveRejoinTime of being fast (doubled per
    # repeated removal). haMaxSlaveAckLatency=0 turns the detection off, ratio 0 the relative rule.
    ha_max_slave_ack_latency: int = 1000
    ha_slow_slave_latency_ratio: int = 4
    ha_slow_slave_min_latency: int = 50
    ha_slow_slave_detect_window: int = 1000
    ha_slow_slave_rejoin_time: int = 5000

    def __post_init__(self) -> None:
        if type(self.broker_role) is str:  # broker.conf spelling -> the enum
            try:
                object.__setattr__(self, "broker_role", BrokerRole.parse(self.broker_role))
            except ValueError as e:
                _fail("broker_role", self.broker_role, str(e))
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name in _PATH_FIELDS and isinstance(value, os.PathLike):
                value = os.fspath(value)  # accept pathlib paths, store plain strings
                object.__setattr__(self, f.name, value)
            want = _FIELD_TYPES[f.name]
            # bool is an int subclass: reject True where a size is expected and vice versa.
            if type(value) is not want:
                _fail(f.name, value, f"must be of type {want.__name__}")
        for name, (lo, hi) in _RANGES.items():
            value = getattr(self, name)
            if not lo <= value <= hi:
                _fail(name, value, f"must be >= {lo}" if hi == _BIG else f"must be in {lo}..{hi}")
        for name, choices in _CHOICES.items():
            if getattr(self, name) not in choices:
                _fail(name, getattr(self, name), f"must be one of {', '.join(sorted(choices))}")
        for name in ("store_path_root_dir", "broker_ip1"):
            if not getattr(self, name).strip():
                _fail(name, getattr(self, name), "must not be empty")
        parse_delete_when(self.delete_when)
        _parse_delay_levels(self.message_delay_level)
        # RocketMQ rounds the consume queue file size up to whole entries and clamps the disk
        # ratios in its getters; we store the effective values once.
        # Integer ceiling: float division would misround sizes above 2**53.
        units = -(-self.mapped_file_size_consume_queue // CQ_STORE_UNIT_SIZE)
        object.__setattr__(self, "mapped_file_size_consume_queue", units * CQ_STORE_UNIT_SIZE)
        for name, (lo, hi) in _CLAMPS.items():
            object.__setattr__(self, name, min(max(getattr(self, name), lo), hi))

    # ---- derived values ----

    @property
    def commit_log_dir(self) -> str:
        return self.store_path_commit_log or StoreLayout(self.store_path_root_dir).commitlog_dir

    @property
    def store_host(self) -> str:
        return f"{self.broker_ip1}:{self.listen_port}"

    @property
    def is_sync_flush(self) -> bool:
        return self.flush_disk_type == "SYNC_FLUSH"

    @property
    def is_slave(self) -> bool:
        return self.broker_role is BrokerRole.SLAVE

    @property
    def is_sync_master(self) -> bool:
        return self.broker_role is BrokerRole.SYNC_MASTER

    def delay_levels_ms(self) -> tuple[int, ...]:
        """Delay of each level in ms; level 1 is index 0."""
        return _parse_delay_levels(self.message_delay_level)

    def delete_hours(self) -> frozenset[int]:
        """Hours of the day (0..23) at which expired files are deleted."""
        return parse_delete_when(self.delete_when)

    def with_changes(self, **changes: object) -> StoreConfig:
        """A copy with `changes` (snake_case names) applied and revalidated."""
        for name in changes:
            if name not in _FIELD_TYPES:
                raise ConfigError(f"unknown setting {name!r}")
        return dataclasses.replace(self, **changes)

    # ---- properties ----

    @classmethod
    def from_properties(
        cls, props: Mapping[str, str], extra_known_keys: frozenset[str] = frozenset()
    ) -> tuple[StoreConfig, list[str]]:
        """Build from RocketMQ keys. Returns the config and the keys that are neither ours
        nor in `extra_known_keys` (in input order), for the caller to report."""
        values: dict[str, object] = {}
        unknown: list[str] = []
        for key, raw in props.items():
            name = FIELD_BY_KEY.get(key)
            if name is None:
                if key not in extra_known_keys:
                    unknown.append(key)
                continue
            values[name] = _convert(name, raw)
        return cls(**values), unknown

    def to_properties(self) -> dict[str, str]:
        """Every setting under its RocketMQ key, as text `from_properties` reads back."""
        out: dict[str, str] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            # Java spells booleans in lower case; Python's str(True) would not read back in Java.
            out[key_for(f.name)] = str(value).lower() if isinstance(value, bool) else str(value)
        return out


def _camel(name: str) -> str:
    first, *rest = name.split("_")
    return first + "".join(part[:1].upper() + part[1:] for part in rest)


def key_for(field_name: str) -> str:
    """The RocketMQ key of a StoreConfig field."""
    if field_name not in _FIELD_TYPES:
        raise ConfigError(f"unknown setting {field_name!r}")
    return _KEY_OVERRIDES.get(field_name) or _camel(field_name)


_HINTS = typing.get_type_hints(StoreConfig)
_FIELD_TYPES: dict[str, type] = {f.name: _HINTS[f.name] for f in dataclasses.fields(StoreConfig)}
FIELD_BY_KEY: Mapping[str, str] = MappingProxyType({key_for(n): n for n in _FIELD_TYPES})
# What each key means (the configuration reference of the docs site is rendered from this
# table with the types and defaults above; tests/docs/test_config_reference.py fails while a
# key has no entry). "Not used by this store": RocketMQ's key, read and checked, no effect here.
_UNUSED = "RocketMQ's key, read and checked; not used by this store."
KEY_DOCS: Mapping[str, KeyDoc] = MappingProxyType({
    "storePathRootDir": KeyDoc("The store's folder: commitlog/, consumequeue/, index/, "
                               "config/, the checkpoint and the abort and lock files "
                               "(store/layout.py). Immutable at runtime."),
    "storePathCommitLog": KeyDoc("The commitlog's folder when it is not <storePathRootDir>/"
                                 "commitlog (empty: that one). Immutable at runtime."),
    "mappedFileSizeCommitLog": KeyDoc("Size of each commitlog file, preallocated. A small "
                                      "volume refuses to start naming the largest size that "
                                      "fits.", "bytes"),
    "mappedFileSizeConsumeQueue": KeyDoc("Size of each consume queue file, rounded up to whole "
                                         "20-byte units.", "bytes"),
    "maxHashSlotNum": KeyDoc("Hash slots of each index file (4 bytes each)."),
    "maxIndexNum": KeyDoc("Entries of each index file; a full file starts the next."),
    "maxMessageSize": KeyDoc("Largest message body accepted; the bodies of one SendMessage "
                             "together stay within it too.", "bytes"),
    "maxPropertiesSize": KeyDoc("Largest encoded properties of one message (a 2-byte field of "
                                "the record).", "bytes"),
    "maxTopicLength": KeyDoc(_UNUSED),
    "flushDiskType": KeyDoc("ASYNC_FLUSH: a put is acknowledged from the page cache and "
                            "flushed in the background; SYNC_FLUSH: only after the group "
                            "commit flushed past its end."),
    "flushIntervalCommitLog": KeyDoc("Time between two rounds of the ASYNC_FLUSH flush "
                                     "service.", "ms"),
    "flushCommitLogLeastPages": KeyDoc("A flush round writes back only when at least this "
                                       "many 4 KiB pages are dirty (0: any).", "pages"),
    "flushCommitLogThoroughInterval": KeyDoc("A flush round writes back whatever is dirty at "
                                             "least this often.", "ms"),
    "flushCommitLogTimed": KeyDoc("true: the flush service only sleeps its interval; false: "
                                  "a put also wakes it when a round would flush something."),
    "commitIntervalCommitLog": KeyDoc("Time between two rounds of the commit service, which "
                                      "writes buffered appends into the files (with "
                                      "transientStorePoolEnable).", "ms"),
    "commitCommitLogLeastPages": KeyDoc("A commit round writes only at least this many pages "
                                        "(0: any).", "pages"),
    "commitCommitLogThoroughInterval": KeyDoc("A commit round writes whatever is buffered at "
                                              "least this often.", "ms"),
    "transientStorePoolEnable": KeyDoc("Appends go to a buffer first and a commit service "
                                       "writes them into the files (RocketMQ's transient store "
                                       "pool)."),
    "transientStorePoolSize": KeyDoc(_UNUSED),
    "writeWithoutMmap": KeyDoc("Ours: write the commitlog with pwrite and sync it with "
                               "fdatasync instead of writing through the mapping and msync; "
                               "reads still use the mapping."),
    "prefaultAheadBytes": KeyDoc("Ours: how far ahead of the writes the commitlog's pages are "
                                 "faulted in (store/commitlog/prefault.py; 0: off). A master "
                                 "skips it while its appends are batches written by pwritev.",
                                 "bytes"),
    "flushIntervalConsumeQueue": KeyDoc("Time between two flushes of the consume queues, the "
                                        "index and the checkpoint.", "ms"),
    "flushConsumeQueueLeastPages": KeyDoc("A consume queue flush writes back only at least "
                                          "this many dirty pages (0: any).", "pages"),
    "flushConsumeQueueThoroughInterval": KeyDoc("The consume queues are flushed whatever is "
                                                "dirty at least this often.", "ms"),
    "syncFlushTimeout": KeyDoc("How long a SYNC_FLUSH put waits for its flush before it "
                               "answers FLUSH_DISK_TIMEOUT.", "ms"),
    "slaveTimeout": KeyDoc("How long a SYNC_MASTER put waits for its slaves' acks before it "
                           "answers FLUSH_SLAVE_TIMEOUT.", "ms"),
    "fileReservedTime": KeyDoc("A commitlog file whose last write is older than this is "
                               "expired and deleted at a deleteWhen hour.", "hours"),
    "deleteWhen": KeyDoc("Hours of the day (local, 00..23, several separated by ';') at which "
                         "expired files are deleted."),
    "diskMaxUsedSpaceRatio": KeyDoc("Above this disk usage expired files are deleted at any "
                                    "hour (clamped to 10..95).", "%"),
    "diskSpaceWarningLevelRatio": KeyDoc("At this disk usage the store refuses writes "
                                         "(DISK_FULL) until usage is below it again (clamped "
                                         "to 35..90).", "%"),
    "diskSpaceCleanForciblyRatio": KeyDoc("At this disk usage files are deleted whatever their "
                                          "age, as diskPressurePolicy allows (clamped to "
                                          "30..85).", "%"),
    "cleanResourceInterval": KeyDoc("Time between two rounds of retention and the disk "
                                    "guard.", "ms"),
    "deleteCommitLogFilesInterval": KeyDoc("Pause between two commitlog file deletions of one "
                                           "round.", "ms"),
    "deleteConsumeQueueFilesInterval": KeyDoc(_UNUSED),
    "destroyMapedFileIntervalForcibly": KeyDoc("A file still held by a reader is destroyed "
                                               "anyway this long after the first attempt "
                                               "(RocketMQ's spelling).", "ms"),
    "redeleteHangedFileInterval": KeyDoc("Outside deletion rounds, files that could not be "
                                         "destroyed yet are retried this often.", "ms"),
    "cleanFileForciblyEnable": KeyDoc("Allows deleting files whatever their age under disk "
                                      "pressure."),
    "diskPressurePolicy": KeyDoc("Ours: what a deletion under disk pressure may remove. "
                                 "protect-unconsumed: only files every subscribed group "
                                 "consumed (or the archive holds), else the node refuses writes "
                                 "with DISK_FULL naming the groups; delete-oldest: RocketMQ's "
                                 "rule."),
    "checkCRCOnRecover": KeyDoc("Recovery checks each record's body CRC."),
    "forceVerifyPropCRC": KeyDoc("Recovery also checks the properties' CRC tail where a record "
                                 "has one."),
    "enabledAppendPropCRC": KeyDoc("Appended records carry a CRC of their properties."),
    "messageIndexEnable": KeyDoc("Build the hash index of message keys (queries by key)."),
    "messageIndexSafe": KeyDoc("true: an abnormal recovery re-dispatches from the "
                               "checkpoint's index time, so the index file being written at "
                               "the crash is rebuilt whole; false (RocketMQ's default): its "
                               "entries older than the recovery point are lost."),
    "messageIndexProcessEnable": KeyDoc("Ours: build the index in a child process "
                                        "(store/index/index_process.py), off the GIL of the "
                                        "process that serves clients. False for an embedded "
                                        "store; a node's default is true."),
    "brokerRole": KeyDoc("ASYNC_MASTER, SYNC_MASTER or SLAVE. Under a controller only the hint "
                         "a new group starts from. Immutable at runtime (roles change with "
                         "SwitchRole or the controller)."),
    "messageDelayLevel": KeyDoc("The delay levels of delayed messages, level 1 first (e.g. "
                                "1s 5s 1m 2h)."),
    "autoMessageVersionOnTopicLen": KeyDoc("Records whose topic is longer than 255 bytes are "
                                           "written as v2 records (2-byte topic length)."),
    "brokerIP1": KeyDoc("The address the node listens on and records as its store host."),
    "listenPort": KeyDoc("The node's one gRPC port, for every service (messaging, admin, "
                         "replication, health); 0 picks a free one."),
    "accessMessageInMemoryMaxRatio": KeyDoc(_UNUSED),
    "maxTransferBytesOnMessageInMemory": KeyDoc("Most bytes one read of a queue returns.",
                                                "bytes"),
    "maxTransferCountOnMessageInMemory": KeyDoc("The archive's most messages per read; not "
                                                "used by a node's store."),
    "maxTransferBytesOnMessageInDisk": KeyDoc(_UNUSED),
    "maxTransferCountOnMessageInDisk": KeyDoc(_UNUSED),
    "defaultQueryMaxNum": KeyDoc(_UNUSED),
    "maxMsgsNumBatch": KeyDoc("Most messages one read of a queue returns."),
    "duplicationEnable": KeyDoc(_UNUSED),
    "timerMaxDelaySec": KeyDoc("A delivery time further ahead than this is illegal.", "s"),
    "reputBatchMaxBytes": KeyDoc("Ours: most commitlog bytes reput hands to the dispatchers "
                                 "in one step.", "bytes"),
    "duplicateWindowSeconds": KeyDoc("Ours: a client send whose message id was stored this "
                                     "recently is answered with the original's receipt and "
                                     "not stored again (store/dedup/); 0: off. At most a "
                                     "day.", "s"),
    "duplicateWindowMaxEntries": KeyDoc("Ours: most ids the duplicate window holds (about 205 "
                                        "bytes each); at the bound the oldest go first."),
    "haMasterAddress": KeyDoc("host:port of the master a SLAVE follows (not needed under a "
                              "controller). Immutable at runtime."),
    "haSendHeartbeatInterval": KeyDoc("Time between two heartbeats on an idle replication "
                                      "stream (and the slave's acks).", "ms"),
    "haHousekeepingInterval": KeyDoc("A replication stream silent this long is closed.", "ms"),
    "haTransferBatchSize": KeyDoc("Most bytes of one replication chunk (RocketMQ: 32 KiB over "
                                  "raw TCP; gRPC wants more).", "bytes"),
    "haMaxGapNotInSync": KeyDoc("A slave further behind than this is not in sync.", "bytes"),
    "haMaxTimeSlaveNotCatchup": KeyDoc("A slave that has not caught up for this long is not "
                                       "in sync.", "ms"),
    "inSyncReplicas": KeyDoc("Replicas a SYNC_MASTER put needs, the master included: it waits "
                             "for max(1, inSyncReplicas - 1) slaves."),
    "minInSyncReplicas": KeyDoc("With fewer replicas in sync (the master included) puts are "
                                "refused with IN_SYNC_REPLICAS_NOT_ENOUGH before anything is "
                                "written; a SYNC_MASTER's sync state set never shrinks below "
                                "it."),
    "allAckInSyncStateSet": KeyDoc("A SYNC_MASTER put waits for every in-sync slave."),
    "syncFromLastFile": KeyDoc("An empty slave starts copying at the master's last file "
                               "instead of its first."),
    "haMaxInFlightBytes": KeyDoc("Ours: most bytes sent to one slave and not acked yet.",
                                 "bytes"),
    "haReconnectMinBackoff": KeyDoc("Ours: a slave's first wait before it reconnects; doubled "
                                    "per failure.", "ms"),
    "haReconnectMaxBackoff": KeyDoc("Ours: the longest wait between a slave's reconnects.",
                                    "ms"),
    "haMaxSlaveAckLatency": KeyDoc("Ours: a sync state set member (not the fastest) whose "
                                   "acks take longer than this for a window is slow and leaves "
                                   "the in-sync set (ha/ack_latency.py); 0 turns the detection "
                                   "off.", "ms"),
    "haSlowSlaveLatencyRatio": KeyDoc("Ours: a member is also slow when its ack latency is "
                                      "over haSlowSlaveMinLatency and this many times the "
                                      "fastest member's; 0 turns this rule off."),
    "haSlowSlaveMinLatency": KeyDoc("Ours: below this ack latency the ratio rule never calls a "
                                    "member slow.", "ms"),
    "haSlowSlaveDetectWindow": KeyDoc("Ours: the window over which the median ack latency is "
                                      "taken, and how long a member must be slow to leave.",
                                      "ms"),
    "haSlowSlaveRejoinTime": KeyDoc("Ours: how long a slow member must be fast again before "
                                    "it rejoins; doubled per removal that follows a return "
                                    "within 8 rejoin times, up to 8x.", "ms"),
})
_PATH_FIELDS = frozenset({"store_path_root_dir", "store_path_commit_log"})
_BIG = 2**63 - 1  # Java long: anything larger could not be configured in RocketMQ either
_CHOICES = {"flush_disk_type": FLUSH_DISK_TYPES, "broker_role": BROKER_ROLES,
            "disk_pressure_policy": frozenset({"protect-unconsumed", "delete-oldest"})}
_CLAMPS = {  # RocketMQ's getter bounds, percent
    "disk_max_used_space_ratio": (10, 95),
    "disk_space_warning_level_ratio": (35, 90),
    "disk_space_clean_forcibly_ratio": (30, 85),
}
_RANGES: dict[str, tuple[int, int]] = {
    "mapped_file_size_commit_log": (MIN_COMMIT_LOG_FILE_SIZE, _BIG),
    # The properties length is a 2-byte field of the commitlog record.
    "max_properties_size": (1, 32767),
    # V1 records hold the topic length in 1 byte, V2 in 2; the V2 switch is automatic.
    "max_topic_length": (1, 32767),
    "listen_port": (0, 65535),  # 0: let the OS pick (tests)
    "access_message_in_memory_max_ratio": (0, 100),
    "duplicate_window_seconds": (0, 24 * 3600),  # a day: longer is retention, not retries
    **{name: (1, _BIG) for name in (
        "mapped_file_size_consume_queue", "max_hash_slot_num", "max_index_num",
        "max_message_size", "transient_store_pool_size", "sync_flush_timeout", "slave_timeout",
        "max_transfer_bytes_on_message_in_memory", "max_transfer_count_on_message_in_memory",
        "max_transfer_bytes_on_message_in_disk", "max_transfer_count_on_message_in_disk",
        "default_query_max_num", "max_msgs_num_batch", "timer_max_delay_sec",
        "reput_batch_max_bytes", "ha_send_heartbeat_interval", "ha_housekeeping_interval",
        "ha_transfer_batch_size", "ha_max_gap_not_in_sync", "ha_max_time_slave_not_catchup",
        "in_sync_replicas", "min_in_sync_replicas", "ha_max_in_flight_bytes",
        "ha_reconnect_min_backoff", "ha_reconnect_max_backoff",
        "duplicate_window_max_entries")},
    **{name: (0, _BIG) for name in (
        "prefault_ahead_bytes", "flush_interval_commit_log", "flush_commit_log_least_pages",
        "flush_commit_log_thorough_interval", "commit_interval_commit_log",
        "commit_commit_log_least_pages", "commit_commit_log_thorough_interval",
        "flush_interval_consume_queue", "flush_consume_queue_least_pages",
        "flush_consume_queue_thorough_interval", "file_reserved_time",
        "clean_resource_interval", "delete_commit_log_files_interval",
        "delete_consume_queue_files_interval", "destroy_mapped_file_interval_forcibly",
        "redelete_hanged_file_interval")},
    # slow members (ha/ack_latency.py): 0 turns the detection / the relative rule off
    **{name: (0, _BIG) for name in ("ha_max_slave_ack_latency", "ha_slow_slave_latency_ratio",
                                    "ha_slow_slave_min_latency")},
    **{name: (1, _BIG) for name in ("ha_slow_slave_detect_window", "ha_slow_slave_rejoin_time")},
}


def _fail(name: str, value: object, reason: str) -> typing.NoReturn:
    raise ConfigError(f"{key_for(name)}={value!r}: {reason}")


def _convert(name: str, raw: str) -> int | bool | str | BrokerRole:
    want, text = _FIELD_TYPES[name], raw.strip()
    if want is bool:
        return parse_bool(key_for(name), raw)
    if want is int:
        return parse_int(key_for(name), raw)
    if want is BrokerRole:
        try:
            return BrokerRole.parse(text)
        except ValueError as e:
            _fail(name, raw, str(e))
    return text


def parse_delete_when(text: str) -> frozenset[int]:
    hours = set()
    for part in text.split(";"):
        part = part.strip()
        if not (part.isdigit() and len(part) <= 2 and int(part) < 24):
            _fail("delete_when", text, f"{part!r} is not an hour 00..23")
        hours.add(int(part))
    return frozenset(hours)


def _parse_delay_levels(text: str) -> tuple[int, ...]:
    levels = []
    for token in text.split():
        m = _DELAY_LEVEL.fullmatch(token)
        if m is None or int(m.group(1)) == 0:
            _fail("message_delay_level", text, f"bad level {token!r} (want e.g. 5s, 1m, 2h, 1d)")
        levels.append(int(m.group(1)) * _DELAY_UNITS_MS[m.group(2)])
    if not levels:
        _fail("message_delay_level", text, "no delay levels")
    return tuple(levels)


# ---- java.util.Properties syntax ----

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_WS = " \t\f"


def _logical_lines(text: str) -> typing.Iterator[str]:
    pending: str | None = None
    for raw in re.split(r"\r\n|\r|\n", text):
        line = raw.lstrip(_WS)
        # A comment or blank line cannot start a continuation, but may be the tail of one.
        if pending is None and (not line or line[0] in "#!"):
            continue
        body = (pending or "") + line
        # An odd number of trailing backslashes escapes the line break.
        if (len(line) - len(line.rstrip("\\"))) % 2 == 1:
            pending = body[:-1]
            continue
        pending = None
        yield body
    if pending:
        yield pending


def _unescape(s: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(s):
        c = s[i]
        i += 1
        if c != "\\":
            out.append(c)
        elif i < len(s) and s[i] == "u":
            digits = s[i + 1:i + 5]
            if not re.fullmatch(r"[0-9a-fA-F]{4}", digits):
                raise ConfigError(f"malformed \\uxxxx escape in {s!r}")
            out.append(chr(int(digits, 16)))
            i += 5
        elif i < len(s):
            out.append(_ESCAPES.get(s[i], s[i]))
            i += 1
    joined = "".join(out)
    # Join UTF-16 surrogate pairs written as two \u escapes into one character.
    return joined.encode("utf-16", "surrogatepass").decode("utf-16", "surrogatepass")


def parse_properties(text: str) -> dict[str, str]:
    """Parse java.util.Properties text: # and ! comments, key=value / key:value / key value,
    trimmed, backslash continuation and escapes. A repeated key keeps its last value."""
    props: dict[str, str] = {}
    for line in _logical_lines(text):
        end = 0
        while end < len(line) and line[end] not in "=:" + _WS:
            end += 2 if line[end] == "\\" else 1  # an escaped separator belongs to the key
        end = min(end, len(line))
        rest = line[end:].lstrip(_WS)
        if rest[:1] in ("=", ":"):
            rest = rest[1:]
        props[_unescape(line[:end])] = _unescape(rest.strip())
    return props


def load_config_file(
    path: str | os.PathLike[str], extra_known_keys: frozenset[str] = frozenset()
) -> tuple[StoreConfig, list[str]]:
    """Read a broker.conf-style file; returns the config and its unknown keys."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read config file {os.fspath(path)}: {e}") from e
    return StoreConfig.from_properties(parse_properties(text), extra_known_keys)
