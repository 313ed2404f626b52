"""The encode process's parent end with a real child (python -m cluster.messaging.encode_worker)
on an asyncio loop: batches come back as the master would encode them, refusals as V2Error;
when the child cannot take a batch (too many in flight, killed by pid) the caller is told to
encode it itself, and a new child is started at the pace of the injected clock."""
from __future__ import annotations

import asyncio
import os
import signal

import psutil
import pytest

from cluster.messaging.encode_process import MAX_IN_FLIGHT, EncodeProcess
from cluster.messaging.v2_status import V2Error
from proto.apache.rocketmq.v2 import definition_pb2 as d
from proto.apache.rocketmq.v2 import service_pb2 as s

from tests.messaging.test_send_encoding import SETTINGS, inline, same_records
from tests.support.v2 import LIMITS, NOW, msg
from tests.support.waiting import wait_until


class Seconds:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def encoder():
    seconds = Seconds()
    process = EncodeProcess(lambda: SETTINGS, seconds)
    process.seconds = seconds
    yield process
    pid = process.pid
    process.close()
    assert pid is None or not psutil.pid_exists(pid)


def request(n: int = 8, body: bytes = b"x" * 100, **sp) -> s.SendMessageRequest:
    return s.SendMessageRequest(messages=[msg(body=body, **sp) for _ in range(n)])


def encode(encoder, req, queue_id=1):
    return encoder.encode(req, queue_id, LIMITS, NOW, "127.0.0.1")


def test_a_batch_comes_back_as_the_master_would_encode_it(encoder):
    req = request(tag="TagA")
    sent = asyncio.run(encode(encoder, req))
    want, _ = inline(req.messages, 1)
    same_records(sent.encoded, want)
    assert encoder.batches == 1 and encoder.restarts == 0
    with pytest.raises(V2Error) as refused:
        asyncio.run(encode(encoder, request(tag="a|b")))
    assert refused.value.code == d.ILLEGAL_MESSAGE_TAG


def test_batches_larger_than_the_pipe_go_through_whole(encoder):
    """Four batches of 600 KB in flight: the loop writes what the pipe takes, as it takes it."""
    reqs = [request(600, bytes([65 + i]) * 1000) for i in range(MAX_IN_FLIGHT)]

    async def all_of_them():
        return await asyncio.gather(*(encode(encoder, r, queue_id=i) for i, r in enumerate(reqs)))
    for i, (req, sent) in enumerate(zip(reqs, asyncio.run(all_of_them()))):
        want, _ = inline(req.messages, i)
        same_records(sent.encoded, want)


def test_more_batches_than_it_holds_are_left_to_the_caller(encoder):
    async def many():
        return await asyncio.gather(*(encode(encoder, request()) for _ in range(MAX_IN_FLIGHT + 2)))
    got = asyncio.run(many())
    assert [r is not None for r in got] == [True] * MAX_IN_FLIGHT + [False, False]


def test_a_killed_child_is_replaced_at_the_clocks_pace(encoder):
    encoder.start()
    first = encoder.pid
    os.kill(first, signal.SIGKILL)
    wait_until(lambda: psutil.Process(first).status() == psutil.STATUS_ZOMBIE, 10, "the kill")

    async def after_the_kill():
        lost = await encode(encoder, request())  # the write or the reply finds it gone
        again = await encode(encoder, request())  # too soon to start another
        encoder.seconds.now += 1.5
        return lost, again, await encode(encoder, request())
    lost, again, replaced = asyncio.run(after_the_kill())
    assert lost is None and again is None and replaced is not None
    assert encoder.restarts == 1 and encoder.pid not in (None, first)
    assert not psutil.pid_exists(first)


def test_close_ends_the_child(encoder):
    encoder.start()
    pid = encoder.pid
    encoder.close()
    assert not psutil.pid_exists(pid)
    assert asyncio.run(encode(encoder, request())) is None
