"""Settings of a controller process, read from a properties file like broker.conf.

    listenAddress                    host:port the controller serves on (127.0.0.1:9878)
    controllerStorePath              folder of its state file (data/controller)
    adminTokenFile                   the bearer token operators' calls need (GetGroups,
                                     SwitchMaster); generated into <store>/admin.token if unset
    controllerFailoverTimeoutMillis  a master silent or unhealthy this long is replaced (3000)
    controllerLeaseMillis            a master that heard nothing from the controller this long
                                     stops acknowledging writes unless its in-sync slaves ack
                                     them (2000; must be below the failover timeout)
    controllerSettleMillis           after a start, how long to wait for a group's in-sync
                                     nodes to report before electing (3000)
    enableElectUncleanMaster         elect outside the sync state set (false: never lose an
                                     acknowledged write; true: prefer availability)
    controllerDefaultMasterRole      what a new group's master is when no node says
                                     (SYNC_MASTER)
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from store.broker_role import BrokerRole
from store.errors import ConfigError
from store.layout import ADMIN_TOKEN_FILE

from cluster.controller.election import ElectionConfig

KEYS = frozenset({"listenAddress", "controllerStorePath", "adminTokenFile",
                  "controllerFailoverTimeoutMillis", "controllerLeaseMillis",
                  "controllerSettleMillis", "enableElectUncleanMaster",
                  "controllerDefaultMasterRole"})
STATE_FILE = "controller.json"


@dataclass(frozen=True)
class ControllerConfig:
    listen_address: str = "127.0.0.1:9878"
    store_path: str = "data/controller"
    admin_token_file: str = ""
    election: ElectionConfig = ElectionConfig()

    @property
    def state_path(self) -> str:
        return os.path.join(self.store_path, STATE_FILE)

    @property
    def token_path(self) -> str:
        return self.admin_token_file or os.path.join(self.store_path, ADMIN_TOKEN_FILE)


def controller_config_from_properties(props: dict[str, str]) -> ControllerConfig:
    unknown = sorted(set(props) - KEYS)
    if unknown:
        raise ConfigError(f"unknown controller keys: {', '.join(unknown)}")

    def number(key: str, default: int) -> int:
        text = props.get(key, str(default)).strip()
        if not text.isdigit():
            raise ConfigError(f"{key}={text!r}: must be a non-negative integer")
        return int(text)
    unclean = props.get("enableElectUncleanMaster", "false").strip().lower()
    if unclean not in ("true", "false"):
        raise ConfigError(f"enableElectUncleanMaster={unclean!r}: must be true or false")
    try:
        role = BrokerRole.parse(props.get("controllerDefaultMasterRole", "SYNC_MASTER").strip())
        election = ElectionConfig(
            failover_timeout_ms=number("controllerFailoverTimeoutMillis", 3000),
            lease_ms=number("controllerLeaseMillis", 2000),
            settle_ms=number("controllerSettleMillis", 3000), unclean=unclean == "true",
            default_master_role=role)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    address = props.get("listenAddress", "127.0.0.1:9878").strip()
    host, sep, port = address.rpartition(":")
    if not host or not sep or not port.isdigit():
        raise ConfigError(f"listenAddress={address!r}: want host:port")
    return ControllerConfig(listen_address=address,
                            store_path=props.get("controllerStorePath", "data/controller").strip(),
                            admin_token_file=props.get("adminTokenFile", "").strip(),
                            election=election)
