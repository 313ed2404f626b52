"""Process logs: text by default and JSON on request, each line naming the process's id, epoch
and role; a real node started with RMQSTORE_LOG_FORMAT=json writes only JSON lines, and they
follow its role."""
from __future__ import annotations

import json
import logging

from cluster.cli.log_setup import JsonFormatter, ProcessContext, TextFormatter
from tests.integration.harness import NodeProcess


def record(context: ProcessContext, message: str = "hello %s") -> logging.LogRecord:
    r = logging.LogRecord("cluster.assembly.node", logging.INFO, __file__, 1, message, ("world",),
                          None)
    context.filter(r)
    return r


def test_text_and_json_lines_name_the_process():
    context = ProcessContext("node")
    assert "[node epoch 0] cluster.assembly.node: hello world" in TextFormatter().format(
        record(context))
    context.describe = lambda: ("broker-a:0", 3, "SYNC_MASTER")
    assert "[broker-a:0 epoch 3 SYNC_MASTER]" in TextFormatter().format(record(context))
    line = json.loads(JsonFormatter().format(record(context)))
    assert line["node"] == "broker-a:0" and line["epoch"] == 3 and line["role"] == "SYNC_MASTER"
    assert line["message"] == "hello world" and line["level"] == "INFO"
    assert line["time"].endswith("Z")

    def broken():
        raise RuntimeError("half built")
    context.describe = broken
    assert json.loads(JsonFormatter().format(record(context)))["node"] == "?"


def test_a_node_logs_json_lines_with_its_role(tmp_path):
    node = NodeProcess(str(tmp_path), "node", {"brokerRole": "ASYNC_MASTER"},
                       env={"RMQSTORE_LOG_FORMAT": "json"})
    try:
        node.start()
        node.stop()
    finally:
        node.kill()
    lines = [json.loads(x) for x in node.log_text().splitlines() if x.strip()]
    assert lines and all({"time", "level", "node", "epoch", "role", "message"} <= set(x)
                         for x in lines)
    listening = [x for x in lines if "listening on" in x["message"]]
    assert listening and listening[0]["node"] == "broker-a:0"
    assert listening[0]["role"] == "ASYNC_MASTER" and listening[0]["epoch"] >= 1
