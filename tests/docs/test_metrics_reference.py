"""The metrics reference (generated from the collectors' source by
cluster/reference/metrics_reference.py) lists what the collectors really export: every family a
node, a controller and an archive collect, with its type, labels and help text."""
from __future__ import annotations

import importlib.util
from types import SimpleNamespace

import pytest

from cluster.metrics.node_collector import NodeCollector
from cluster.metrics.process_collectors import ArchiveCollector, ControllerCollector
from cluster.reference import metrics_reference as ref


def exported(collector) -> dict[str, tuple[str, tuple[str, ...], str]]:
    """name as exported -> (type, labels, help) of each family collect() yields."""
    out = {}
    for family in collector.collect():
        name = family.name + "_total" if family.type == "counter" else family.name
        labels = tuple(dict.fromkeys(k for s in family.samples for k in s.labels if k != "le"))
        out[name] = (family.type, labels, family.documentation)
    return out


def documented(collector: str) -> dict[str, tuple[str, tuple[str, ...], str]]:
    return {f.name: (f.kind, f.labels, f.help) for f in ref.families()[collector]}


def same(got: dict, docs: dict) -> None:
    for name, (kind, labels, help_text) in got.items():
        assert name in docs, f"{name} is exported but not in the metrics reference"
        doc_kind, doc_labels, doc_help = docs[name]
        assert kind == doc_kind and help_text == doc_help, name
        assert set(labels) <= set(doc_labels), name  # a family without samples shows none


def test_the_controllers_families_are_the_documented_ones():
    process = SimpleNamespace(service=None, servicer=None, clock=None)
    got = exported(ControllerCollector(process))
    assert set(got) == set(documented("ControllerCollector"))
    same(got, documented("ControllerCollector"))


def test_the_archives_families_are_the_documented_ones():
    retention = SimpleNamespace(deleted=0, unforwarded_deleted=0, forwarders={})
    process = SimpleNamespace(archive=SimpleNamespace(holdings=lambda: []), retention=retention)
    got = exported(ArchiveCollector(process))
    assert set(got) == set(documented("ArchiveCollector"))
    same(got, documented("ArchiveCollector"))


def test_a_master_and_a_slave_export_only_documented_families(nodes):
    master = nodes.start()
    slave = nodes.slave(master)
    docs = documented("NodeCollector")
    on_master, on_slave = exported(NodeCollector(master)), exported(NodeCollector(slave))
    same(on_master, docs)
    same(on_slave, docs)
    assert "rmqstore_slave_lag_bytes" in on_master and "rmqstore_slave_lag_bytes" not in on_slave
    assert on_master["rmqstore_slave_last_in_sync_change"][1] == ("slave", "change", "cause")


def test_the_page_has_a_row_per_family():
    page = ref.render()
    for found in ref.families().values():
        for f in found:
            assert f"| `{f.name}`" in page, f.name


def test_a_family_named_at_scrape_time_fails_the_reference(tmp_path):
    source = tmp_path / "odd_collector.py"
    source.write_text(
        "from prometheus_client.core import GaugeMetricFamily\n"
        "class OddCollector:\n"
        "    def collect(self):\n"
        "        for name in self.names():\n"
        "            yield GaugeMetricFamily(name, 'computed')\n")
    spec = importlib.util.spec_from_file_location("odd_collector", source)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    reader = ref.Reader(module)
    with pytest.raises(ValueError, match="only known at scrape time"):
        reader.read(next(reader.collectors()))
