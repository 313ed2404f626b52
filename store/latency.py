"""Latency histograms the write path records into and the metrics read (cluster/metrics/):
fixed buckets, one lock, no allocation per observation.

`LatencyHistogram.observe(seconds)`; `snapshot()` gives the cumulative counts per upper bound
(Prometheus' `le` buckets, +Inf last), the sum and the count. `ByStatus` keeps one per status
name (PUT_OK, FLUSH_DISK_TIMEOUT, ...), created on first use.
"""
from __future__ import annotations

import bisect
import threading

BUCKETS_S = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
             0.5, 1.0, 2.5, 5.0)


class LatencyHistogram:
    """Counts per bucket; `_lock` guards them (observers on many threads)."""

    def __init__(self, buckets: tuple[float, ...] = BUCKETS_S) -> None:
        self.buckets = buckets
        self._counts = [0] * (len(buckets) + 1)
        self._sum = 0.0
        self._lock = threading.Lock()

    def observe(self, seconds: float) -> None:
        i = bisect.bisect_left(self.buckets, seconds)
        with self._lock:
            self._counts[i] += 1
            self._sum += seconds

    def snapshot(self) -> tuple[list[tuple[float, int]], float, int]:
        """([(upper bound, cumulative count)], sum, count); the last bound is +inf."""
        with self._lock:
            counts, total = list(self._counts), self._sum
        out, running = [], 0
        for bound, n in zip((*self.buckets, float("inf")), counts):
            running += n
            out.append((bound, running))
        return out, total, running


class ByStatus:
    """One histogram per status name; `_lock` guards the dict."""

    def __init__(self) -> None:
        self._by: dict[str, LatencyHistogram] = {}
        self._lock = threading.Lock()

    def observe(self, status: str, seconds: float) -> None:
        h = self._by.get(status)
        if h is None:
            with self._lock:
                h = self._by.setdefault(status, LatencyHistogram())
        h.observe(seconds)

    def items(self) -> list[tuple[str, LatencyHistogram]]:
        with self._lock:
            return sorted(self._by.items())
