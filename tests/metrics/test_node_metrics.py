"""A node's /metrics under load, scraped over HTTP from real node processes: role, epoch,
offsets, replication lag per slave, counters and consumer lag per queue, in Prometheus' text
format (parsed with prometheus-client's own parser)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request

import psutil

from tests.integration.harness import ROOT, messages, wait_until
from tests.support.processes import conversion_process_pid, index_process_pid
from tests.support.scrape import scrape


def test_metrics_of_a_master_and_its_slave(group):
    metrics = {"metricsListenAddress": "127.0.0.1:0"}
    master = group.master("SYNC_MASTER", **metrics)
    slave = group.slave(master, 1, **metrics)
    wait_until(lambda: len(master.status().in_sync_set) == 1, 20, "slave in sync")
    for start in range(0, 400, 100):
        assert master.admin().send(messages("Orders", 100, start)).status == "PUT_OK"
    out = subprocess.run([sys.executable, "-m", "cluster", "receive", "--address", master.address,
                          "--topic", "Orders", "--group", "Billing", "--count", "10"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": ROOT})
    assert out.returncode == 0, out.stderr

    from cluster.client.admin_client import AdminClient
    import grpc
    with AdminClient(master.address, "wrong-token", timeout=5) as intruder:
        try:
            intruder.status()
        except grpc.RpcError:
            pass
    calls = "rmqstore_grpc_calls_total"
    refused = (calls, (("code", "UNAUTHENTICATED"),
                       ("method", "/rmqstore.admin.v1.Admin/GetNodeStatus")))

    def with_the_refusal_counted():
        # a call is counted when its handler returns, which may be just after the client
        # has its status
        metrics = scrape(master)
        return metrics if refused in metrics else None
    m = wait_until(with_the_refusal_counted, 10, "the refused call counted")
    status = master.status()
    assert m[(calls, (("code", "OK"), ("method", "/rmqstore.admin.v1.Admin/SendMessages")))] == 4
    assert m[refused] == 1
    assert m[(calls, (("code", "OK"), ("method",
                                       "/apache.rocketmq.v2.MessagingService/AckMessage")))] >= 1
    assert m[("rmqstore_role", (("role", "SYNC_MASTER"),))] == 1
    assert m[("rmqstore_role", (("role", "SLAVE"),))] == 0
    assert m[("rmqstore_epoch", ())] == status.epoch
    assert m[("rmqstore_commitlog_max_offset", ())] >= 400 * 256
    assert m[("rmqstore_put_messages_total", ())] >= 400
    assert m[("rmqstore_writable", ())] == 1
    assert m[("rmqstore_in_sync_replicas", ())] == 1
    assert m[("rmqstore_slave_in_sync", (("slave", "broker-a:1"),))] == 1
    assert ("rmqstore_slave_lag_bytes", (("slave", "broker-a:1"),)) in m
    one = (("slave", "broker-a:1"),)
    assert m[("rmqstore_slave_ack_latency_seconds", one)] >= 0  # the slow-member rule's figures
    assert ("rmqstore_slave_ack_latency_p99_seconds", one) in m
    assert ("rmqstore_slave_ack_pending_seconds", one) in m
    assert m[("rmqstore_slave_held_out", one)] == 0
    assert m[("rmqstore_slave_in_sync_changes_total", one)] == 1
    assert m[("rmqstore_slave_last_in_sync_change", (("cause", "caught_up"), ("change", "joined"),
                                                     ("slave", "broker-a:1")))] == 1
    assert m[("rmqstore_slave_released_puts_total", one)] >= 1  # the 4 sends waited for it
    assert m[("rmqstore_slave_released_wait_seconds_total", one)] > 0
    lag = sum(v for (name, labels), v in m.items() if name == "rmqstore_consumer_lag_messages"
              and ("group", "Billing") in labels)
    assert lag == 400 - 10  # Orders has 4 queues; 10 received and acked
    assert m[("rmqstore_put_latency_seconds_count", (("status", "PUT_OK"),))] >= 4
    assert m[("rmqstore_put_latency_seconds_bucket", (("le", "+Inf"), ("status", "PUT_OK")))] \
        == m[("rmqstore_put_latency_seconds_count", (("status", "PUT_OK"),))]
    assert m[("rmqstore_flush_latency_seconds_count", ())] >= 1
    assert m[("rmqstore_flush_failed", ())] == 0
    disk = [v for (n, _), v in m.items() if n == "rmqstore_disk_used_ratio"]
    assert disk and all(0 < v < 1 for v in disk)

    s = scrape(slave)
    assert s[("rmqstore_role", (("role", "SLAVE"),))] == 1
    wait_until(lambda: scrape(slave)[("rmqstore_dispatched_offset", ())] ==
               scrape(master)[("rmqstore_commitlog_max_offset", ())], 20, "the slave's reput")
    assert not any(n == "rmqstore_consumer_lag_messages" for n, _ in s)  # the master keeps it
    info = [labels for (n, labels) in s if n == "rmqstore_node_info"]
    assert info == [(("broker_name", "broker-a"), ("cluster", "DefaultCluster"),
                     ("node_id", "broker-a:1"))]


def test_a_node_serves_its_own_console(group):
    import json

    from tests.integration.harness import TOKEN
    node = group.master("ASYNC_MASTER", metricsListenAddress="127.0.0.1:0")
    base = f"http://{node.ready['metrics']}"
    with urllib.request.urlopen(base + "/", timeout=10) as resp:
        assert b"rmqstore console" in resp.read()
    try:
        urllib.request.urlopen(base + "/api/node", timeout=10)
        raise AssertionError("the API answered without the token")
    except urllib.error.HTTPError as e:
        assert e.code == 401
    req = urllib.request.Request(base + "/api/node", headers={"Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        status = json.load(resp)
    assert status["node_id"] == "broker-a:0" and status["role"] == "ASYNC_MASTER"
    assert node.admin().send(messages("T", 3)).status == "PUT_OK"
    req = urllib.request.Request(base + "/api/messages?topic=T&key=key-1",
                                 headers={"Authorization": f"Bearer {TOKEN}"})

    def found() -> list:  # reput indexes the keys right after the send
        with urllib.request.urlopen(req, timeout=10) as resp:
            return [m["keys"] for m in json.load(resp)["messages"]]
    assert wait_until(found, 10, "the key indexed") == ["key-1"]


def test_a_killed_index_process_is_started_again_and_counted(group):
    """A node's index process (messageIndexProcessEnable, on by default) killed by pid: the
    node starts another, every key is found again, and the metric counts the restart."""
    node = group.master("ASYNC_MASTER", metricsListenAddress="127.0.0.1:0")
    admin = node.admin()
    assert admin.send(messages("Orders", 100)).status == "PUT_OK"
    wait_until(lambda: len(admin.query("Orders", "key-99").messages) == 1, 20, "key-99 indexed")
    first = index_process_pid(node.pid)
    assert first is not None and scrape(node)[("rmqstore_index_process_restarts_total", ())] == 0
    os.kill(first, signal.SIGKILL)
    assert admin.send(messages("Orders", 100, 100)).status == "PUT_OK"
    wait_until(lambda: scrape(node)[("rmqstore_index_process_restarts_total", ())] == 1, 20,
               "the restart")
    wait_until(lambda: len(admin.query("Orders", "key-199").messages) == 1, 20, "key-199")
    assert [i for i in range(200) if len(admin.query("Orders", f"key-{i}").messages) != 1] == []
    second = index_process_pid(node.pid)
    assert second not in (None, first) and not psutil.pid_exists(first)
    assert scrape(node)[("rmqstore_writable", ())] == 1


def test_a_killed_conversion_process_is_started_again_and_counted(group):
    """A node's conversion process (receiveConversionProcessEnable, on by default) killed by
    pid: receives go on (built in the node meanwhile), another starts, the metrics count."""
    node = group.master("ASYNC_MASTER", metricsListenAddress="127.0.0.1:0")
    assert node.admin().send(messages("Orders", 200)).status == "PUT_OK"

    def receive(count: int) -> str:
        out = subprocess.run([sys.executable, "-m", "cluster", "receive", "--address",
                              node.address, "--topic", "Orders", "--group", "Billing",
                              "--count", str(count)], cwd=ROOT, capture_output=True, text=True,
                             timeout=60, env={**os.environ, "PYTHONPATH": ROOT})
        assert out.returncode == 0, out.stderr
        return out.stdout

    receive(10)
    first = wait_until(lambda: conversion_process_pid(node.pid), 20, "the conversion process")
    assert scrape(node)[("rmqstore_receive_conversion_starts_total", ())] == 1
    os.kill(first, signal.SIGKILL)
    wait_until(lambda: not psutil.pid_exists(first) or
               psutil.Process(first).status() == psutil.STATUS_ZOMBIE, 10, "the kill")
    # another starts on a receive at least restart_after_s (1 s) after the loss: receive until
    # one has (three receives in a row can all come sooner on a fast host; 200 messages last
    # for 19 more)
    def restarted() -> bool:
        receive(10)
        return scrape(node)[("rmqstore_receive_conversion_starts_total", ())] == 2
    wait_until(restarted, 20, "the restart", interval=0)
    assert scrape(node)[("rmqstore_receive_conversion_fallbacks_total", ())] >= 1
    assert conversion_process_pid(node.pid) not in (None, first)
