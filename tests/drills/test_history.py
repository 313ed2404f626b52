"""The drill History on its own: JSON lines round trip, a bad line named by its number,
recording from many threads, and the message body that carries the key."""
from __future__ import annotations

import json
import threading

import pytest

from cluster.drills.checker import check
from cluster.drills.history import Ack, History, SendOutcome, body_for, key_of

from tests.drills.builders import EXPECT, GROUP, UNKNOWN, fifo_history, receive, send


def test_save_load_round_trip(tmp_path) -> None:
    h = fifo_history()
    send(h, "u", UNKNOWN, detail="DEADLINE_EXCEEDED")
    receive(h, None, message_id="foreign")
    h.record_ack(Ack("a0", GROUP, "id-a0", True, 10.5, "OK"))
    h.fault_healed(h.fault_started("partition", at=1.5), at=2.25)
    h.fault_started("kill -9 master (pid 123)", at=3.0)   # never healed: None survives
    path = str(tmp_path / "history.jsonl")
    h.save(path)
    loaded = History.load(path)
    assert loaded.sends() == h.sends() and loaded.receives() == h.receives()
    assert loaded.acks() == h.acks() and loaded.faults() == h.faults()
    assert loaded.faults()[1].healed is None
    assert all(s.outcome.__class__ is SendOutcome for s in loaded.sends())
    types = [json.loads(line)["type"] for line in open(path, encoding="utf-8")]
    assert set(types) == {"send", "receive", "ack", "fault"}


@pytest.mark.parametrize("bad", [
    "not json",
    '{"type": "bogus"}',
    '{"type": "fault", "name": "x"}',                                   # missing field
    '{"type": "fault", "name": "x", "started": "soon", "healed": null}',  # wrong type
    '{"type": "send", "key": "k", "topic": "t", "message_group": null, "seq": 0, '
    '"started": 0, "finished": 1, "outcome": "maybe"}',                 # unknown outcome
])
def test_load_bad_line_names_it(tmp_path, bad: str) -> None:
    path = tmp_path / "history.jsonl"
    good = '{"type": "fault", "name": "x", "started": 1.0, "healed": null}'
    path.write_text(good + "\n\n" + bad + "\n")     # line 2 is blank: skipped but counted
    with pytest.raises(ValueError, match="line 3"):
        History.load(str(path))


def test_body_round_trip_and_foreign_bytes() -> None:
    body = body_for("p1-42", 64)
    assert len(body) == 64 and body.startswith(b"drill:p1-42|") and body.endswith(b".")
    assert key_of(body) == "p1-42"
    assert key_of(body_for("k", len(b"drill:k|"))) == "k"
    for foreign in [b"", b"hello", b"drill:no-end", b"drill:k|x...", b"xdrill:k|", b"drill:\xff|"]:
        assert key_of(foreign) is None, foreign
    with pytest.raises(ValueError):
        body_for("k", 3)


def test_history_records_from_many_threads() -> None:
    h = History()

    def worker(w: int) -> None:
        for i in range(200):
            send(h, f"w{w}-{i}", started=i)
            receive(h, f"w{w}-{i}", at=i + 0.5)

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({s.key for s in h.sends()}) == 800 and len(h.receives()) == 800
    assert check(h, EXPECT).passed
