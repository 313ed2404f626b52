"""The latency histograms the metrics read: cumulative buckets, sum and count."""
from __future__ import annotations

from store.latency import ByStatus, LatencyHistogram


def test_buckets_are_cumulative_and_the_last_is_everything():
    h = LatencyHistogram((0.001, 0.01))
    for s in (0.0005, 0.001, 0.005, 2.0):
        h.observe(s)
    buckets, total, count = h.snapshot()
    assert buckets == [(0.001, 2), (0.01, 3), (float("inf"), 4)]
    assert count == 4 and abs(total - 2.0065) < 1e-9


def test_one_histogram_per_status():
    by = ByStatus()
    by.observe("PUT_OK", 0.001)
    by.observe("FLUSH_DISK_TIMEOUT", 5.0)
    by.observe("PUT_OK", 0.002)
    assert [(s, h.snapshot()[2]) for s, h in by.items()] == [("FLUSH_DISK_TIMEOUT", 1),
                                                             ("PUT_OK", 2)]
