"""Which controller a heartbeat goes to: the last that answered, then the one a standby's
refusal names, then the rest in order, each once per round."""
from __future__ import annotations

import pytest

from cluster.assembly.controller_choice import ControllerChoice, named_active
from cluster.config.node_config import node_config_from_properties
from common.config_values import ConfigError

A, B, C = "127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"


def tried(choice: ControllerChoice, refusals: dict[str, str]) -> list[str]:
    """Addresses tried in one round; each address in `refusals` refuses with that detail."""
    out = []
    for address in choice.round():
        out.append(address)
        if address not in refusals:
            choice.answered(address)
            break
        choice.refused(address, refusals[address])
    return out


def test_the_last_answering_controller_first_then_the_others_in_order():
    choice = ControllerChoice([A, B, C])
    assert tried(choice, {}) == [A]
    assert tried(choice, {A: "", B: ""}) == [A, B, C]
    assert choice.current == C
    assert tried(choice, {}) == [C]
    assert tried(choice, {A: "", B: "", C: ""}) == [C, A, B]  # nobody: each once


def test_a_refusal_naming_the_active_controller_sends_the_heartbeat_there():
    choice = ControllerChoice([A, B, C])
    refusal = f"not the active controller; the active one is {C}"
    assert tried(choice, {A: refusal}) == [A, C]
    assert choice.current == C
    # A name outside the configured list is not followed.
    assert tried(ControllerChoice([A, B]), {A: "... the active one is 10.9.9.9:1"}) == [A, B]


def test_named_active():
    assert named_active(f"not the active controller; the active one is {B}") == B
    assert named_active(f"not the active controller; the active one is {B} (lease gone)") == B
    assert named_active("not the active controller; no active controller is known") == ""


def test_controller_addr_takes_several_addresses():
    props = {"brokerName": "b", "brokerId": "1", "brokerRole": "SLAVE",
             "controllerAddr": f"{A}; {B}", "clusterSecret": "0123456789abcdef"}
    assert node_config_from_properties(props).controller_addresses == [A, B]
    with pytest.raises(ConfigError, match="host:port;host:port"):
        node_config_from_properties({**props, "controllerAddr": f"{A};nope"})
