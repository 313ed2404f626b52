"""cluster/grpc_env.py: the nodes' gRPC transport is chosen before grpc is imported, an
operator's GRPC_EXPERIMENTS wins, and `python -m cluster` applies it first."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from cluster.grpc_env import NODE_EXPERIMENTS, use_node_transport

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_it_sets_the_experiments_unless_the_environment_names_some():
    env: dict[str, str] = {}
    assert use_node_transport(env) is True and env["GRPC_EXPERIMENTS"] == NODE_EXPERIMENTS
    mine = {"GRPC_EXPERIMENTS": "-event_engine_dns"}
    assert use_node_transport(mine) is False and mine["GRPC_EXPERIMENTS"] == "-event_engine_dns"
    empty = {"GRPC_EXPERIMENTS": ""}  # gRPC's own default, kept
    assert use_node_transport(empty) is False and empty["GRPC_EXPERIMENTS"] == ""


def test_too_late_once_grpc_is_imported(monkeypatch):
    assert "grpc" in sys.modules  # this process has it already
    monkeypatch.delenv("GRPC_EXPERIMENTS", raising=False)
    with pytest.raises(RuntimeError, match="before grpc is imported"):
        use_node_transport()
    assert "GRPC_EXPERIMENTS" not in os.environ


@pytest.mark.parametrize("given,expected", [(None, NODE_EXPERIMENTS), ("", "")])
def test_the_command_line_applies_it_before_importing_grpc(given, expected):
    env = {k: v for k, v in os.environ.items() if k != "GRPC_EXPERIMENTS"}
    if given is not None:
        env["GRPC_EXPERIMENTS"] = given
    env["PYTHONPATH"] = ROOT
    out = subprocess.run([sys.executable, "-c", "import os, cluster.__main__, grpc; "
                          "print(repr(os.environ['GRPC_EXPERIMENTS']))"],
                         env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == repr(expected)
