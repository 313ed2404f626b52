"""What the official-client tool scripts (official_*_tool.py) share. They run as scripts in their
own process with this folder first on sys.path; nothing here imports our code (the official
client's generated modules clash with ours in one process)."""
from __future__ import annotations

import time
from importlib import metadata


def client_version() -> str:
    return metadata.version("rocketmq-python-client")


def client_config(spec: dict):
    """The ClientConfiguration for spec's endpoint, optional ak/sk and request_timeout."""
    from rocketmq import ClientConfiguration, Credentials

    return ClientConfiguration(spec["endpoint"], Credentials(spec.get("ak", ""), spec.get("sk", "")),
                               namespace="", request_timeout=spec.get("request_timeout", 5))


def to_message(topic: str, m: dict):
    """An official-client Message from {"body", "tag", "keys", "properties", "message_group",
    "delay_ms"} (all but the body optional)."""
    from rocketmq import Message

    msg = Message()
    msg.topic = topic
    msg.body = m["body"].encode()
    if m.get("tag"):
        msg.tag = m["tag"]
    for key in m.get("keys", []):
        msg.keys = key
    for name, value in m.get("properties", {}).items():
        msg.add_property(name, value)
    if m.get("message_group"):
        msg.message_group = m["message_group"]
    if m.get("delay_ms"):
        msg.delivery_timestamp = int(time.time() * 1000) + m["delay_ms"]
    return msg
