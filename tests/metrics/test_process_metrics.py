"""The controller's and the archive's /metrics from real processes: a group's epoch, master
and heartbeats on the controller; files, bytes and messages per group on the archive."""
from __future__ import annotations

from tests.integration.harness import CLUSTER_SECRET, ArchiveServerProcess, wait_until
from tests.support.archive import ship_sealed_files
from tests.support.scrape import scrape


def test_controller_metrics(group):
    controller = group.controller(metricsListenAddress="127.0.0.1:0")
    group.controlled(controller, "n0", 0, preferred_role="ASYNC_MASTER")
    wait_until(lambda: scrape(controller).get(
        ("rmqstore_controller_group_has_master", (("group", "broker-a"),))) == 1, 30)
    m = scrape(controller)
    assert m[("rmqstore_controller_active", ())] == 1
    assert m[("rmqstore_controller_group_epoch", (("group", "broker-a"),))] >= 1
    assert m[("rmqstore_controller_group_sync_state_epoch", (("group", "broker-a"),))] >= 1
    assert m[("rmqstore_controller_node_healthy", (("group", "broker-a"),
                                                  ("node", "broker-a:0")))] == 1
    assert m[("rmqstore_controller_node_heartbeat_age_seconds", (("group", "broker-a"),
                                                                ("node", "broker-a:0")))] < 5
    assert m[("rmqstore_controller_group_routed_writable", (("group", "broker-a"),))] == 1
    # the master registers its (empty) table at its next heartbeat: a known count, 0 topics
    wait_until(lambda: scrape(controller).get(
        ("rmqstore_controller_group_routed_topics", (("group", "broker-a"),))) == 0, 10)


def test_archive_metrics(group, tmp_path):
    archive = group.add(ArchiveServerProcess(str(tmp_path), "archive", {
        "metricsListenAddress": "127.0.0.1:0"}))
    archive.start()
    ship_sealed_files(tmp_path / "node", archive.address, CLUSTER_SECRET)
    key = (("group", "g"),)
    wait_until(lambda: scrape(archive).get(("rmqstore_archive_unindexed_files", key)) == 0, 20)
    m = scrape(archive)
    assert m[("rmqstore_archive_files", key)] == 2
    assert m[("rmqstore_archive_bytes", key)] == 2 * 4 * 4096
    assert m[("rmqstore_archive_messages", key)] > 0
    assert m[("rmqstore_archive_first_store_timestamp_seconds", key)] <= \
        m[("rmqstore_archive_last_store_timestamp_seconds", key)]
