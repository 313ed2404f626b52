"""Configuration over the Admin API: the effective key/values under RocketMQ's names, and
runtime updates of an explicit allow-list.

Only keys that the running services really read again after start are updatable. StoreConfig
and NodeConfig are frozen: an update builds a new object with dataclasses.replace (validated
like a config file) and the node's LiveConfig publishes it (cluster/config/live_config.py: the one
path of a runtime change); services read the keys below from the live config, or from
`store.config`, when they use them. Each key below says where it is read; a key read
only when something is built (flush intervals, index sizes, HA tracker thresholds, delay
levels, ...) is not here, because changing it in memory would change nothing and lie to the
operator. Updates are in memory only: a restart reads broker.conf again.

Store paths and role keys are refused as immutable at runtime (roles change with SwitchRole);
other known keys as read once at start; unknown keys with NOT_FOUND.
"""
from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING

import grpc

from proto import admin_pb2 as pb
from store.config import FIELD_BY_KEY, StoreConfig
from common.config_values import ConfigError, parse_bool, parse_int

from cluster.admin.admin_error import AdminError, invalid

if TYPE_CHECKING:
    from cluster.admin.admin_node import AdminNode
    from cluster.config.node_config import NodeConfig

log = logging.getLogger(__name__)

_RETENTION = "retention reads it every round (every cleanResourceInterval ms)"
_PUT = "read by every put (Admin SendMessages and MessagingService SendMessage)"
# RocketMQ key -> where the running node reads it.
RUNTIME_KEYS: dict[str, str] = {
    "fileReservedTime": _RETENTION,
    "deleteWhen": _RETENTION,
    "diskMaxUsedSpaceRatio": _RETENTION,
    "diskSpaceWarningLevelRatio": _RETENTION,
    "diskSpaceCleanForciblyRatio": _RETENTION,
    "cleanFileForciblyEnable": _RETENTION,
    "diskPressurePolicy": _RETENTION,
    "deleteCommitLogFilesInterval": _RETENTION,
    "destroyMapedFileIntervalForcibly": _RETENTION,
    "redeleteHangedFileInterval": _RETENTION,
    "cleanResourceInterval": "retention's wait after its current round",
    "maxMessageSize": _PUT,
    "maxPropertiesSize": _PUT,
    "timerMaxDelaySec": _PUT + " with a delivery time",
    "slaveTimeout": "a SYNC_MASTER's next put waits this long for its slaves' acks",
    "duplicateWindowSeconds": "every put and dispatch (the duplicate window, store/dedup/): 0 "
                              "empties it and turns it off; once on again it holds the sends "
                              "from then on",
    "duplicateWindowMaxEntries": "every put and dispatch (the duplicate window): a lower bound "
                                 "evicts the oldest ids at the next one",
    "autoCreateTopicEnable": "the next QueryRoute/SendMessage of an unknown topic (master)",
    "defaultTopicQueueNums": "topics created from now on (auto-created, or CreateTopic "
                             "without queue counts)",
    "transactionTimeOut": "the master's next transaction check-back round",
    "transactionCheckMax": "the master's next transaction check-back round",
    "transactionCheckInterval": "the wait after the master's current check-back round",
}
NODE_RUNTIME_FIELDS = {"autoCreateTopicEnable": "auto_create_topic_enable",
                       "defaultTopicQueueNums": "default_topic_queue_nums",
                       "transactionTimeOut": "transaction_timeout_ms",
                       "transactionCheckMax": "transaction_check_max",
                       "transactionCheckInterval": "transaction_check_interval_ms"}
PATH_KEYS = frozenset({"storePathRootDir", "storePathCommitLog"})
ROLE_KEYS = frozenset({"brokerRole", "haMasterAddress", "brokerId", "brokerName",
                       "brokerClusterName"})
SECRET_KEYS = frozenset({"adminToken", "secretKey"})


def node_entries(node: "AdminNode") -> dict[str, str]:
    """The node's own keys (node_config.NODE_KEYS) with their effective values."""
    c = node.config.current
    return {
        "brokerClusterName": c.cluster_name, "brokerName": c.broker_name,
        "brokerId": str(c.broker_id),
        "adminToken": "<set>" if c.admin_token else "",
        "adminTokenFile": c.admin_token_file,
        "advertisedAddress": c.advertised_address,
        "groupAddresses": ",".join(c.group_addresses),
        "autoCreateTopicEnable": str(c.auto_create_topic_enable).lower(),
        "defaultTopicQueueNums": str(c.default_topic_queue_nums),
        "accessKey": c.access_key, "secretKey": "<set>" if c.secret_key else "",
        "minInvisibleTimeMillsForRecv": str(c.min_invisible_time_ms),
        "transactionTimeOut": str(c.transaction_timeout_ms),
        "transactionCheckMax": str(c.transaction_check_max),
        "transactionCheckInterval": str(c.transaction_check_interval_ms),
        "controllerAddr": c.controller_address,
        "controllerHeartbeatInterval": str(c.controller_heartbeat_interval_ms),
        "brokerElectionPriority": str(c.election_priority),
        "aclEnable": str(c.acl.enable).lower(),
        "aclFile": c.acl.path(c.store.store_path_root_dir),
        "aclDateTimeWindowSeconds": str(c.acl.date_time_window_s),
    }


def effective(node: "AdminNode") -> dict[str, str]:
    """Every key, node keys first. brokerRole and haMasterAddress are the live role (SwitchRole
    changes them without touching the config)."""
    out = node_entries(node)
    out.update(node.config.current.store.to_properties())
    out["brokerRole"] = node.role.name
    out["haMasterAddress"] = node.role.followed_address
    return out


def get_config(node: "AdminNode", req: pb.GetConfigRequest) -> pb.ConfigResponse:
    values = effective(node)
    keys = list(req.keys) or list(values)
    unknown = [k for k in keys if k not in values]
    if unknown:
        raise AdminError(grpc.StatusCode.NOT_FOUND, f"unknown config key(s): {', '.join(unknown)}")
    return pb.ConfigResponse(entries=[pb.ConfigEntry(key=k, value=values[k],
                                                     runtime_updatable=k in RUNTIME_KEYS)
                                      for k in keys])


def _refuse(key: str, values: dict[str, str]) -> AdminError:
    if key in PATH_KEYS:
        return AdminError(grpc.StatusCode.PERMISSION_DENIED,
                          f"{key} is immutable at runtime: store paths are fixed while the node "
                          f"runs (stop it, move the data, change broker.conf)")
    if key in ROLE_KEYS:
        return AdminError(grpc.StatusCode.PERMISSION_DENIED,
                          f"{key} is immutable at runtime: it is the node's identity or role "
                          f"(change roles with SwitchRole, identities in broker.conf)")
    if key in values:
        return AdminError(grpc.StatusCode.PERMISSION_DENIED,
                          f"{key} is read once at start and cannot be changed at runtime (set it "
                          f"in broker.conf and restart); updatable keys: "
                          f"{', '.join(sorted(RUNTIME_KEYS))}")
    return AdminError(grpc.StatusCode.NOT_FOUND, f"unknown config key {key!r}")


def _with_store_key(config: "NodeConfig", key: str, value: str) -> "NodeConfig":
    """`config` with one StoreConfig key changed, parsed and validated like broker.conf (in
    the context of the current values) and applied with dataclasses.replace."""
    current = config.store
    parsed, _ = StoreConfig.from_properties({**current.to_properties(), key: value})
    name = FIELD_BY_KEY[key]
    return dataclasses.replace(config, store=current.with_changes(**{name: getattr(parsed, name)}))


def _with_node_key(config: "NodeConfig", key: str, value: str) -> "NodeConfig":
    new = parse_bool(key, value) if key == "autoCreateTopicEnable" else parse_int(key, value)
    return dataclasses.replace(config, **{NODE_RUNTIME_FIELDS[key]: new})


def update_config(node: "AdminNode", req: pb.UpdateConfigRequest, caller: str) -> pb.UpdateConfigResponse:
    key = req.key.strip()
    if not key:
        raise invalid("the config key is empty")
    values = effective(node)
    if key not in RUNTIME_KEYS:
        raise _refuse(key, values)
    change = _with_node_key if key in NODE_RUNTIME_FIELDS else _with_store_key
    try:
        node.update_config(lambda config: change(config, key, req.value))
    except ConfigError as e:
        raise invalid(str(e)) from None
    new_value = effective(node)[key]
    log.warning("admin UpdateConfig by %s: %s %s -> %s (in memory until restart)", caller, key,
                values[key], new_value)
    return pb.UpdateConfigResponse(
        key=key, old_value=values[key], value=new_value,
        note=f"in effect now: {RUNTIME_KEYS[key]}; in memory only (broker.conf is unchanged, a "
             f"restart reads it again)")
