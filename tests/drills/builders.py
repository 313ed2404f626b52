"""Hand-built drill histories for the drill tests: one send / receive per call, with times and
message ids derived from the key unless given."""
from __future__ import annotations

from cluster.drills.checker import Expectation
from cluster.drills.history import History, Receive, Send, SendOutcome

OK, FAILED, UNKNOWN = SendOutcome.OK, SendOutcome.FAILED, SendOutcome.UNKNOWN
TOPIC, GROUP = "t", "g"
EXPECT = Expectation(groups=(GROUP,), topics_of_group={GROUP: TOPIC})


def send(h: History, key: str, outcome: SendOutcome = OK, *, started: float = 0.0,
         finished: float | None = None, seq: int = 0, message_group: str | None = None,
         detail: str = "", topic: str = TOPIC, client: str = "own") -> None:
    h.record_send(Send(key, topic, message_group, seq, started,
                       started + 0.01 if finished is None else finished, outcome, detail,
                       message_id=f"id-{key}", client=client))


def receive(h: History, key: str | None, at: float = 1.0, *, group: str = GROUP,
            message_id: str | None = None, attempt: int = 1, offset: int = 0) -> None:
    h.record_receive(Receive(key, TOPIC, group, 0, offset, message_id or f"id-{key}", attempt,
                             at))


def clean_history(n: int = 3) -> History:
    """n acknowledged sends k0.. to TOPIC, each received once by GROUP."""
    h = History()
    for i in range(n):
        send(h, f"k{i}", started=i, seq=i)
        receive(h, f"k{i}", at=i + 0.5)
    return h


def fifo_history() -> History:
    """Message groups A (delivered in order) and B (seq 2 delivered before seq 1)."""
    h = History()
    for seq in range(3):
        send(h, f"a{seq}", seq=seq, message_group="A", started=seq)
        send(h, f"b{seq}", seq=seq, message_group="B", started=seq)
    # the late a0 is a redelivery, not a first delivery: it does not break A's order
    for at, key in enumerate(["a0", "b0", "a1", "b2", "a2", "b1", "a0"]):
        receive(h, key, at=10 + at)
    return h
