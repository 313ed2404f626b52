"""The throttled refusal log: once per peer host and reason every 10 s of the clock, with the
count held back, and every refusal counted."""
from __future__ import annotations

import logging

from cluster.security.refusal_log import LOG_EVERY_S, RefusalLog
from common.clock import ManualClock


def test_a_peer_retrying_in_a_loop_is_logged_once_per_interval(caplog):
    clock = ManualClock()
    refusals = RefusalLog(logging.getLogger("test.refusals"), logging.INFO, clock)
    with caplog.at_level(logging.INFO, logger="test.refusals"):
        for port in range(100):  # a new connection (port) each time: still the same host
            refusals.refused("SendMessage", f"ipv4:10.0.0.1:{port}", "no signature")
        refusals.refused("SendMessage", "ipv4:10.0.0.2:5", "no signature")
        refusals.refused("SendMessage", "ipv4:10.0.0.1:7", "unknown user")
        clock.advance(LOG_EVERY_S)
        refusals.refused("SendMessage", "ipv4:10.0.0.1:9", "no signature")
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "refused SendMessage from ipv4:10.0.0.1:0: no signature",
        "refused SendMessage from ipv4:10.0.0.2:5: no signature",
        "refused SendMessage from ipv4:10.0.0.1:7: unknown user",
        "refused SendMessage from ipv4:10.0.0.1:9: no signature (99 more since the last report)",
    ]
    assert refusals.refusals == 103
