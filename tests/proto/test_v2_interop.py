"""Our RocketMQ 5 schema (proto/apache/rocketmq/v2) is wire-identical to the official client's.

The official client (rocketmq-python-client, a declared test dependency) ships generated modules
registering the same symbols under other file names, so they are loaded only in subprocesses
(tests/proto/v2_interop_tool.py); this process loads ours. No skipping: a missing client fails.
"""
from __future__ import annotations

import base64
import json
import os
import subprocess
import sys

import pytest

from . import v2_interop_tool as tool

TOOL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "v2_interop_tool.py")


def run_official(mode: str, tmp_path_factory, stdin: dict | None = None) -> dict:
    # HOME: importing the client creates ~/logs/rocketmq_python; keep that out of the real home.
    home = tmp_path_factory.mktemp("official-client-home")
    env = {**os.environ, "HOME": str(home)}
    proc = subprocess.run([sys.executable, TOOL, mode], input=json.dumps(stdin) if stdin is not None else "",
                          capture_output=True, text=True, env=env, timeout=120)
    if proc.returncode == tool.EXIT_NO_CLIENT:
        pytest.fail(f"{tool.OFFICIAL_DIST}=={tool.OFFICIAL_VERSION} is a declared test dependency "
                    f"(pip install -e '.[test]') but could not be imported:\n{proc.stderr}")
    assert proc.returncode == 0, f"{TOOL} {mode} failed ({proc.returncode}):\n{proc.stderr}"
    out = json.loads(proc.stdout)
    assert out["client_version"] == tool.OFFICIAL_VERSION, (
        f"schema reproduced from {tool.OFFICIAL_DIST} {tool.OFFICIAL_VERSION}, found {out['client_version']}")
    return out["result"]


@pytest.fixture(scope="module")
def official_description(tmp_path_factory):
    return run_official("describe", tmp_path_factory)


@pytest.fixture(scope="module")
def ours():
    return tool.ours()


def _diff(kind: str, theirs: dict, mine: dict) -> list[str]:
    lines = [f"{kind} {k}: missing in ours" for k in sorted(theirs.keys() - mine.keys())]
    lines += [f"{kind} {k}: not in the official schema" for k in sorted(mine.keys() - theirs.keys())]
    for k in sorted(theirs.keys() & mine.keys()):
        a, b = theirs[k], mine[k]
        if a == b:
            continue
        for attr in sorted(a.keys() | b.keys()):  # name only what differs, field by field
            x, y = a.get(attr), b.get(attr)
            if attr in ("fields", "methods") and isinstance(x, list) and isinstance(y, list):
                mx, my = {f["name"]: f for f in x}, {f["name"]: f for f in y}
                for n in sorted(mx.keys() | my.keys()):
                    if mx.get(n) != my.get(n):
                        lines.append(f"{kind} {k}.{n}:\n  official {mx.get(n)}\n  ours     {my.get(n)}")
                if [f["name"] for f in x] != [f["name"] for f in y] and mx == my:
                    lines.append(f"{kind} {k}: {attr} declared in another order")
            elif x != y:
                lines.append(f"{kind} {k} {attr}:\n  official {x}\n  ours     {y}")
    return lines


def test_schema_matches_official_client(official_description, ours):
    mine = tool.describe(ours)
    theirs = official_description
    problems = []
    for kind in ("files", "messages", "enums", "services"):
        problems += _diff(kind, theirs[kind], mine[kind])
    assert not problems, "schema drift from the official client:\n" + "\n".join(problems)
    # sanity: the comparison really covered the whole interface
    assert len(mine["messages"]) >= 60 and len(mine["enums"]) >= 15
    methods = {m["name"] for m in mine["services"]["apache.rocketmq.v2.MessagingService"]["methods"]}
    assert {"QueryRoute", "SendMessage", "ReceiveMessage", "AckMessage", "Telemetry",
            "SyncLiteSubscription", "RecallMessage"} <= methods


def test_field_level_drift_is_detected(ours):
    """The description is sensitive to every property the comparison relies on."""
    base = tool.describe(ours)
    fields = base["messages"]["apache.rocketmq.v2.SystemProperties"]["fields"]
    for key, value in [("number", 99), ("type", "TYPE_SINT32"), ("name", "tags"),
                       ("label", "LABEL_REPEATED"), ("oneof", None), ("proto3_optional", False)]:
        changed = json.loads(json.dumps(base))
        target = changed["messages"]["apache.rocketmq.v2.SystemProperties"]["fields"][0]
        assert fields[0]["name"] == "tag" and target[key] != value
        target[key] = value
        assert _diff("messages", base["messages"], changed["messages"])
    assert base["messages"]["apache.rocketmq.v2.Message.UserPropertiesEntry"]["map_entry"]


def _assert_same(direction: str, expected: dict, got: dict) -> None:
    assert expected.keys() == got.keys()
    for name in expected:
        assert got[name]["json"] == expected[name]["json"], f"{direction}: {name} differs"
        assert got[name]["bytes"] == expected[name]["bytes"], f"{direction}: {name} re-serializes differently"


def test_ours_serialize_official_parses(ours, tmp_path_factory):
    encoded = tool.encode(tool.build_samples(ours))
    parsed = run_official("parse", tmp_path_factory, encoded)
    _assert_same("ours -> official", encoded, parsed)
    # the samples are rich: spot-check what the official side saw
    send = parsed["send_request"]["json"]["messages"]
    assert send[0]["system_properties"]["message_id"] == "01A1B2C3D4E5F60718293A4B5C6D7E8F90"
    assert send[0]["system_properties"]["keys"] == ["k1", "k2"]
    assert send[0]["user_properties"]["ünï"] == "çødé"
    assert send[1]["system_properties"]["delivery_timestamp"] == "2025-11-22T01:47:41Z"
    assert send[2]["system_properties"]["message_group"] == "order-7"
    assert send[2]["system_properties"]["priority"] == 0  # optional: presence survives
    route = parsed["query_route_response"]["json"]["message_queues"][0]
    assert route["permission"] == "READ_WRITE" and route["broker"]["endpoints"]["scheme"] == "IPv4"
    assert route["accept_message_types"] == ["NORMAL", "FIFO", "DELAY", "TRANSACTION"]
    sub = parsed["telemetry_subscription"]["json"]["settings"]["subscription"]
    assert sub["fifo"] is False and sub["long_polling_timeout"] == "20s"


def test_official_serializes_ours_parse(ours, tmp_path_factory):
    official = run_official("build", tmp_path_factory)
    parsed = tool.parse(ours, official)
    _assert_same("official -> ours", official, parsed)
    # and the official encoding of each sample is byte-identical to ours
    mine = tool.encode(tool.build_samples(ours))
    assert mine.keys() == official.keys()
    for name in mine:
        assert mine[name]["type"] == official[name]["type"]
        assert mine[name]["bytes"] == official[name]["bytes"], f"{name}: encodings differ"
        assert mine[name]["json"] == official[name]["json"], f"{name}: JSON differs"
    recv = ours.ReceiveMessageRequest.FromString(base64.b64decode(official["receive_request"]["bytes"]))
    assert recv.filter_expression.expression == "TagA||TagB" and recv.invisible_duration.seconds == 15
    assert recv.long_polling_timeout.ToMilliseconds() == 20_500 and recv.HasField("attempt_id")
    tel = ours.TelemetryCommand.FromString(base64.b64decode(official["telemetry_publishing"]["bytes"]))
    assert tel.settings.WhichOneof("pub_sub") == "publishing"
    assert tel.settings.publishing.max_body_size == 4 * 1024 * 1024
