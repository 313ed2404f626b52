"""Reading a process's /metrics over HTTP (node, controller or archive process from
tests/integration/harness.py), parsed with prometheus-client's own parser."""
from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families


def scrape(node) -> dict[tuple[str, tuple], float]:
    """{(sample name, sorted label pairs): value} of the process's metrics endpoint."""
    url = f"http://{node.ready['metrics']}/metrics"
    with urllib.request.urlopen(url, timeout=10) as resp:
        text = resp.read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out
