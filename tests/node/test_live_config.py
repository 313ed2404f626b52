"""LiveConfig, in memory: the one path by which a running node's config changes. An update
publishes the new object and tells every subscriber (old, new) in order; a change that raises
changes nothing and tells nobody; a change to an equal config tells nobody."""
from __future__ import annotations

import dataclasses
import threading

import pytest

from cluster.config.live_config import LiveConfig
from cluster.config.node_config import NodeConfig
from store.config import StoreConfig
from common.config_values import ConfigError


def base() -> NodeConfig:
    return NodeConfig(store=StoreConfig(store_path_root_dir="store"))


def with_queues(n: int):
    return lambda c: dataclasses.replace(c, default_topic_queue_nums=n)


def test_update_publishes_and_tells_every_subscriber_in_order():
    live = LiveConfig(base())
    old = live.current
    told: list[tuple[str, NodeConfig, NodeConfig, NodeConfig]] = []
    live.subscribe(lambda o, n: told.append(("first", o, n, live.current)))
    live.subscribe(lambda o, n: told.append(("second", o, n, live.current)))
    new = live.update(with_queues(8))
    assert live.current is new and new.default_topic_queue_nums == 8
    assert old.default_topic_queue_nums == 4  # the old object is left as it was
    # each subscriber gets (old, new) and already reads the new config as current
    assert told == [("first", old, new, new), ("second", old, new, new)]


def test_a_change_that_raises_changes_nothing_and_tells_nobody():
    live = LiveConfig(base())
    before = live.current
    told = []
    live.subscribe(lambda o, n: told.append(n))

    def bad(c: NodeConfig) -> NodeConfig:
        return dataclasses.replace(c, default_topic_queue_nums=0)  # NodeConfig refuses it

    with pytest.raises(ConfigError, match="defaultTopicQueueNums"):
        live.update(bad)
    assert live.current is before and told == []


def test_an_equal_config_tells_nobody():
    live = LiveConfig(base())
    before = live.current
    told = []
    live.subscribe(lambda o, n: told.append(n))
    assert live.update(lambda c: dataclasses.replace(c)) is before  # equal, not the same object
    assert live.update(lambda c: c) is before
    assert live.current is before and told == []


def test_updates_do_not_interleave():
    """Two threads updating at once: each subscriber call sees the config it was told about
    as current (the lock covers publish and tell), and no update is lost."""
    live = LiveConfig(base())
    seen = []
    live.subscribe(lambda o, n: seen.append((o.default_topic_queue_nums,
                                             n.default_topic_queue_nums,
                                             live.current.default_topic_queue_nums)))
    start = threading.Barrier(2)

    def bump():
        start.wait()
        for _ in range(200):
            live.update(lambda c: dataclasses.replace(
                c, default_topic_queue_nums=c.default_topic_queue_nums % 1000 + 1))

    threads = [threading.Thread(target=bump) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(seen) == 400
    assert all(current == new and new == old % 1000 + 1 for old, new, current in seen)
    assert [new for _, new, _ in seen] == list(range(5, 405))
