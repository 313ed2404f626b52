"""The running node's configuration, and the one path by which it changes.

NodeConfig (and the StoreConfig inside it) is frozen, so a change is a new object. Two things
change it while the node runs: Admin.UpdateConfig (an allow-list of keys the services re-read,
cluster/admin/runtime_config.py) and a role switch (StoreConfig.brokerRole/haMasterAddress, which
the store's schedule service reads). Both call `LiveConfig.update`, which builds the new object,
publishes it and tells the subscribers (the store, which hands it to its services; the role's
MasterRole or ReplicationClient), all under one lock so two changes never interleave.

Readers call `current` whenever they need a value and read it once per decision: the object is
immutable, so one read is a consistent view.
"""
from __future__ import annotations

import threading
from typing import Callable

from .node_config import NodeConfig

Subscriber = Callable[[NodeConfig, NodeConfig], None]  # (old, new)


class LiveConfig:
    """Owns the current NodeConfig; `_lock` serializes updates (readers take no lock)."""

    def __init__(self, config: NodeConfig) -> None:
        self._config = config
        self._lock = threading.RLock()  # a subscriber may read `current` while it is told
        self._subscribers: list[Subscriber] = []

    @property
    def current(self) -> NodeConfig:
        return self._config

    def subscribe(self, subscriber: Subscriber) -> None:
        with self._lock:
            self._subscribers.append(subscriber)

    def update(self, change: Callable[[NodeConfig], NodeConfig]) -> NodeConfig:
        """Apply `change` to the current config (it may raise; nothing changes then), publish
        the result and tell every subscriber. Returns the new config."""
        with self._lock:
            old = self._config
            new = change(old)
            if new == old:
                return old
            self._config = new
            for subscriber in self._subscribers:
                subscriber(old, new)
            return new
