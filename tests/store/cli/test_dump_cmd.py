"""`python -m store dump`: JSON lines, filters, --from, --limit and --body."""
from __future__ import annotations

import base64
import json

from store import codec
from tests.store.tool_helpers import json_lines, run, run_json


def test_dump_json_lines_and_filters(demo, capsys):
    rc, out, _ = run(capsys, "dump", demo, "--topic", "DemoPayments", "--queue", "2", "--json")
    assert rc == 0
    recs = json_lines(out)
    assert recs and all(r["topic"] == "DemoPayments" and r["queue_id"] == 2 for r in recs)
    assert [r["queue_offset"] for r in recs] == list(range(len(recs)))
    _, info = run_json(capsys, "inspect", demo)
    q = next(q for q in info["consume_queues"] if (q["topic"], q["queue_id"]) == ("DemoPayments", 2))
    assert len(recs) == q["max_offset"]
    r = recs[0]
    body = base64.b64decode(r["body_base64"])
    assert len(body) == r["body_length"] and r["body_crc_ok"]
    assert json.loads(body)["topic"] == "DemoPayments"
    assert r["body_preview"].startswith('{"id"')
    assert r["tags"] in ("TagA", "TagB", "TagC")
    assert r["keys"] == [f"order-{json.loads(body)['id']}"] and len(r["uniq_key"]) == 32
    assert codec.decode_offset_msg_id(r["msg_id"])[2] == r["offset"]
    assert r["store_time"] and r["store_timestamp"] > 0

    rc, out, _ = run(capsys, "dump", demo, "--topic", "DemoAudit", "--json")
    assert {x["queue_id"] for x in json_lines(out)} == {0, 1, 2, 3}

    rc, out, _ = run(capsys, "dump", demo, "--limit", "5", "--json")
    first5 = json_lines(out)
    assert len(first5) == 5
    rc, out, _ = run(capsys, "dump", demo, "--from", first5[3]["offset"], "--limit", "2", "--json")
    assert [x["offset"] for x in json_lines(out)] == [first5[3]["offset"], first5[4]["offset"]]
    # --from inside a record starts at the next record
    rc, out, _ = run(capsys, "dump", demo, "--from", first5[3]["offset"] + 1, "--limit", "1", "--json")
    assert json_lines(out)[0]["offset"] == first5[4]["offset"]

    rc, out, _ = run(capsys, "dump", demo, "--limit", "3", "--body")
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["OFFSET", "SIZE", "TOPIC"]
    assert sum(1 for ln in lines if ln.startswith("    | ")) == 3
    assert first5[0]["msg_id"] in out
