"""Many long-polling consumers in one process (grpc.aio): the load of bench_long_poll.py.

    python -m tests.perf.long_poll_consumers --endpoint H:P --topic T --group G --consumers 2000

Each consumer loops: ReceiveMessage (batch `--batch`, long polling `--poll` s, invisible 60 s),
then one AckMessage for what it got. `--form one` receives through ReceiveMessages instead
(proto/batch_receive.proto: the answer in one response, what cluster/client uses). The calls are spread over `--channels` connections. The
process prints one JSON line when every consumer has its first call in flight ("ready"), then,
when its stdin closes, one JSON line of totals and exits:

    {"event": "ready", "consumers": 2000}
    {"event": "done", "received": N, "acked": N, "empty_early": N, "empty": N, "errors": N,
     "client_cancelled": N, "first_error": "..."}

`client_cancelled` counts receives that grpc.aio's client itself ended with CANCELLED: with
thousands of concurrent streams it cancels a few percent of them shortly after they start,
against a bare threaded grpc server as well, so they are the client's, not the node's; such a
receive is issued again.

`empty_early` counts receives answered "no new message" well before their long-poll time: a
server that cannot hold the call answers at once (the old threaded server did past 40 waiting
calls), so that figure shows whether the waits were really held.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time

import grpc
import grpc.aio
from google.protobuf.duration_pb2 import Duration

from proto import batch_receive_pb2_grpc as br_grpc
from proto.apache.rocketmq.v2 import definition_pb2 as d
from proto.apache.rocketmq.v2 import service_pb2 as s
from proto.apache.rocketmq.v2 import service_pb2_grpc as s_grpc


EARLY_FRACTION = 0.5  # an empty answer before half the poll time counts as "early"


class Totals:
    def __init__(self) -> None:
        self.received = self.acked = self.empty = self.empty_early = self.errors = 0
        self.first_error = ""
        self.started = 0
        self.stopping = False
        self.client_cancelled = 0

    def error(self, e: BaseException, call: str) -> None:
        if self.stopping:
            return  # the benchmark ended the calls
        self.errors += 1
        self.first_error = self.first_error or f"{call}: {type(e).__name__}: {e!r}"[:600]


async def consumer(stub, args, totals: Totals, index: int, stop: asyncio.Event) -> None:
    metadata = (("x-mq-client-id", f"lp-{index}"),)
    request = s.ReceiveMessageRequest(
        group=d.Resource(name=args.group),
        message_queue=d.MessageQueue(topic=d.Resource(name=args.topic), id=index % 8),
        filter_expression=d.FilterExpression(type=d.TAG, expression="*"),
        batch_size=args.batch, invisible_duration=Duration(seconds=60),
        long_polling_timeout=Duration(seconds=int(args.poll)))
    first = True
    while not stop.is_set():
        handles: list[s.AckMessageEntry] = []
        t0 = time.monotonic()
        try:
            status, messages = await receive(stub, request, args, metadata, totals, first)
            first = False
            handles = [s.AckMessageEntry(message_id=m.system_properties.message_id,
                                         receipt_handle=m.system_properties.receipt_handle)
                       for m in messages]
            if status is not None and status.code == d.MESSAGE_NOT_FOUND:
                totals.empty += 1
                if time.monotonic() - t0 < args.poll * EARLY_FRACTION and not stop.is_set():
                    totals.empty_early += 1
            elif status is not None and status.code != d.OK:
                totals.error(RuntimeError(f"{status.code} {status.message}"), "receive")
                await asyncio.sleep(0.5)
        except grpc.aio.AioRpcError as e:
            if stop.is_set():
                return
            if e.code() == grpc.StatusCode.CANCELLED:
                # grpc.aio's client cancels some of thousands of concurrent streams by itself
                # (seen against a bare threaded grpc server too): counted apart, retried
                totals.client_cancelled += 1
                continue
            totals.error(e, "receive")
            await asyncio.sleep(0.5)
            continue
        if not handles:
            continue
        totals.received += len(handles)
        await ack(stub, args, totals, handles, metadata, stop)


async def receive(stub, request, args, metadata, totals: Totals, first: bool):
    """(status, messages) of one receive in the chosen form; counts the first call as started
    once it is issued."""
    if args.form == "one":
        call = stub.batch.ReceiveMessages(request, timeout=args.poll + 10, metadata=metadata)
        if first:
            totals.started += 1
        answer = await call
        return answer.status, list(answer.messages)
    call = stub.ReceiveMessage(request, timeout=args.poll + 10, metadata=metadata)
    if first:
        totals.started += 1
    status, messages = None, []
    async for response in call:
        kind = response.WhichOneof("content")
        if kind == "status":
            status = response.status
        elif kind == "message":
            messages.append(response.message)
    return status, messages


async def ack(stub, args, totals: Totals, handles: list, metadata, stop: asyncio.Event) -> None:
    """One AckMessage for `handles`, issued again when the client cancelled it itself."""
    request = s.AckMessageRequest(group=d.Resource(name=args.group),
                                  topic=d.Resource(name=args.topic), entries=handles)
    for _ in range(3):
        try:
            answer = await stub.AckMessage(request, timeout=30, metadata=metadata)
        except grpc.aio.AioRpcError as e:
            if stop.is_set():
                return
            if e.code() == grpc.StatusCode.CANCELLED:
                totals.client_cancelled += 1
                continue
            totals.error(e, "ack")
            return
        if answer.status.code == d.OK:
            totals.acked += len(handles)
        else:
            totals.error(RuntimeError(f"{answer.status.code} {answer.status.message}"), "ack")
        return


async def main_async(args) -> int:
    channels = [grpc.aio.insecure_channel(args.endpoint) for _ in range(args.channels)]
    stubs = [s_grpc.MessagingServiceStub(c) for c in channels]
    for stub, channel in zip(stubs, channels):
        stub.batch = br_grpc.BatchReceiveStub(channel)
    totals = Totals()
    stop = asyncio.Event()
    tasks = [asyncio.create_task(consumer(stubs[i % len(stubs)], args, totals, i, stop))
             for i in range(args.consumers)]
    while totals.started < args.consumers:
        await asyncio.sleep(0.05)
    print(json.dumps({"event": "ready", "consumers": totals.started}), flush=True)
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, sys.stdin.read)  # the benchmark closes stdin to stop us
    stop.set()
    totals.stopping = True
    for channel in channels:
        await channel.close(grace=None)  # ends the waiting calls
    await asyncio.gather(*tasks, return_exceptions=True)
    print(json.dumps({"event": "done", "received": totals.received, "acked": totals.acked,
                      "empty": totals.empty, "empty_early": totals.empty_early,
                      "errors": totals.errors, "client_cancelled": totals.client_cancelled,
                      "first_error": totals.first_error}), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--endpoint", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--consumers", type=int, default=2000)
    p.add_argument("--channels", type=int, default=20)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--poll", type=float, default=20.0)
    p.add_argument("--form", choices=("stream", "one"), default="stream",
                   help="the v2 ReceiveMessage stream, or ReceiveMessages (one response)")
    return asyncio.run(main_async(p.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
