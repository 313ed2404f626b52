"""A relay backing off from a master that went away tries the node's new master at once, not
after the backoff it reached while the old one was gone (check-backs resume right after an
election)."""
from __future__ import annotations

import threading

from cluster.messaging.send import MasterForwarder
from cluster.messaging.telemetry import ClientStream, StreamBudget, TelemetryHub
from cluster.messaging.telemetry_relay import TelemetryRelay, _Relay


def _relay(master: list[str]) -> _Relay:
    hub = TelemetryHub(StreamBudget(4), lambda: 4 << 20)
    owner = TelemetryRelay(lambda: master[0], hub, MasterForwarder())
    return _Relay(owner, ClientStream("producer-1"))


def test_the_pause_ends_when_the_node_follows_another_master() -> None:
    master = ["127.0.0.1:1"]
    relay = _relay(master)
    flip = threading.Timer(0.2, lambda: master.__setitem__(0, "127.0.0.1:2"))
    flip.start()
    try:
        # A full pause would return False after 30 s; the new master ends it early.
        assert relay._pause("127.0.0.1:1", 30.0) is True
    finally:
        flip.cancel()


def test_the_pause_runs_its_course_while_the_master_stays() -> None:
    relay = _relay(["127.0.0.1:1"])
    assert relay._pause("127.0.0.1:1", 0.3) is False


def test_a_settings_change_ends_the_pause() -> None:
    relay = _relay(["127.0.0.1:1"])
    threading.Timer(0.2, relay.settings_changed).start()
    assert relay._pause("127.0.0.1:1", 30.0) is True
