"""Receipt handles: what they encode, and that they are bound to their topic and group."""
from __future__ import annotations

import pytest

from cluster.consume import receipt


def test_receipt_handles_are_bound_to_topic_and_group():
    text = receipt.encode("T", "G", 3, 42, 7)
    assert receipt.decode(text, "T", "G") == receipt.Receipt(3, 42, 7)
    for topic, group in (("T2", "G"), ("T", "G2")):
        with pytest.raises(receipt.BadReceiptHandle):
            receipt.decode(text, topic, group)


def test_the_text_layout():
    text = receipt.encode("T", "G", 3, 42, 7)
    prefix, queue_id, offset, handle, check = text.split(":")
    assert (prefix, queue_id, offset, handle) == ("R1", "3", "42", "7")
    assert len(check) == 8 and int(check, 16) >= 0


GOOD = receipt.encode("T", "G", 3, 42, 7)


@pytest.mark.parametrize("text", [
    "", "R1:" + "9" * 200, GOOD.replace("R1", "R2", 1), GOOD.replace(":42:", ":4x:"),
    ":".join(GOOD.split(":")[:4]), GOOD.replace(":42:", ":43:"),  # no check; altered offset
])
def test_malformed_or_altered_handles_are_refused(text):
    with pytest.raises(receipt.BadReceiptHandle):
        receipt.decode(text, "T", "G")
