"""A node's encode process (messageEncodeProcessEnable): the parent's end. Converting,
checking and encoding a SendMessage batch is most of what a batched send costs the serving
process's one core (the GIL); here it runs in `python -m cluster.messaging.encode_worker`, and
the serving process only picks the queue, appends the records and answers.

    event loop: SendMessage -> pick queue -> encode(request) --pipe--> child: encode_send
                        <- EncodedSend <- reply frame (in request order) <-
                -> MasterRole.put_encoded -> answer

The child is a pure function of its requests: it writes nothing, so losing it loses nothing.
`encode` answers None whenever the child cannot take or finish a batch (too many in flight, no
reply in time, the child dead or failing), and the caller
encodes that batch itself: with more batches in flight than the child keeps up with, both
processes encode. The node starts the child with its services; a dead one is replaced at the
next batch (at most once a second; the restart's pace is wall time, between processes).

Used from the node's event loop only: `encode` and the pipe's reader and writer (non-blocking,
driven by the loop) run there, so the pending replies and the write buffer need no lock. `close` runs after the loop stopped (Node.stop) or on it.
"""
from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
import marshal
import os
import subprocess
import sys
import time
from typing import Callable

from proto.apache.rocketmq.v2 import service_pb2 as s
from store.index_wire import FRAME_HEADER, MAX_FRAME
from store.put_encoding import EncodeSettings

from cluster.messaging.convert import SendLimits
from cluster.messaging.send_encoding import EncodedSend, unpack
from cluster.messaging.v2_status import V2Error

log = logging.getLogger(__name__)

MAX_IN_FLIGHT = 4  # batches sent to the child and not answered yet
REPLY_TIMEOUT_S = 10.0  # a child that answers nothing this long is replaced
RESTART_INTERVAL_S = 1.0


class EncodeProcess:
    """Owns the child process, its two pipe ends and the futures of the batches it holds
    (answered in order). Counts `restarts` (children started after the first) and `batches`."""

    def __init__(self, settings: Callable[[], EncodeSettings],
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        """`monotonic`: seconds, for the restarts' pace."""
        self.settings = settings
        self.monotonic = monotonic
        self.restarts = 0
        self.batches = 0  # batches the child encoded (the rest were encoded by their callers)
        self._proc: subprocess.Popen | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pending: collections.deque[asyncio.Future] = collections.deque()
        self._buf = bytearray()  # replies read and not yet whole
        self._out = bytearray()  # requests not yet taken by the pipe
        self._waiting_to_write = False
        self._started_at: float | None = None
        self.closed = False

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    async def encode(self, request: s.SendMessageRequest, queue_id: int, limits: SendLimits,
                     now_ms: int, peer_ip: str) -> EncodedSend | None:
        """The batch encoded by the child; raises V2Error for what the send must refuse; None
        when the caller must encode it itself."""
        if self.closed or len(self._pending) >= MAX_IN_FLIGHT or not self._running():
            return None
        payload = marshal.dumps(("encode", request.SerializeToString(), queue_id,
                                 dataclasses.astuple(limits), now_ms, peer_ip,
                                 self.settings().as_tuple()))
        reply_of = self._loop.create_future()
        self._pending.append(reply_of)
        self._out += FRAME_HEADER.pack(len(payload))
        self._out += payload
        self._writable()
        try:
            reply = await asyncio.wait_for(asyncio.shield(reply_of), REPLY_TIMEOUT_S)
        except asyncio.TimeoutError:
            self._lost(f"no reply in {REPLY_TIMEOUT_S:.0f} s")
            return None
        except EncodeLost:
            return None
        kind = reply[0]
        if kind == "refused":
            raise V2Error(reply[1], reply[2])
        if kind == "ok":
            try:
                sent = unpack(reply[1])
            except (ValueError, TypeError) as e:
                log.error("the encode process answered a batch that does not unpack: %s", e)
                return None
            self.batches += 1
            return sent
        log.warning("the encode process failed a batch (%s: %s); encoding it here", *reply[1:3])
        return None

    def _writable(self) -> None:
        """Write what the pipe takes now; the loop calls again when it takes more."""
        try:
            n = os.write(self._proc.stdin.fileno(), self._out)
        except BlockingIOError:
            n = 0
        except OSError as e:
            self._lost(f"writing to it failed: {e}")
            return
        del self._out[:n]
        if self._out and not self._waiting_to_write:
            self._loop.add_writer(self._proc.stdin.fileno(), self._writable)
        elif not self._out and self._waiting_to_write:
            self._loop.remove_writer(self._proc.stdin.fileno())
        self._waiting_to_write = bool(self._out)

    # -- the child --------------------------------------------------------------------------
    def start(self) -> None:
        """Start the child now (a node starts it with its services, so its pid is there to see
        from the start); `encode` starts it otherwise."""
        self._spawn(self.monotonic())

    def _running(self) -> bool:
        """The child is there and its replies are read on this loop; starts a new one (at most
        once a RESTART_INTERVAL_S) when it is not."""
        loop = asyncio.get_running_loop()
        if self._proc is None:
            now = self.monotonic()
            if self._started_at is not None and now - self._started_at < RESTART_INTERVAL_S:
                return False
            if self._started_at is not None:
                self.restarts += 1
            if not self._spawn(now):
                return False
        if self._loop is not loop:
            os.set_blocking(self._proc.stdout.fileno(), False)
            os.set_blocking(self._proc.stdin.fileno(), False)
            loop.add_reader(self._proc.stdout.fileno(), self._readable)
            self._loop = loop
        return True

    def _spawn(self, now: float) -> bool:
        self._started_at = now
        try:
            proc = subprocess.Popen([sys.executable, "-m", "cluster.messaging.encode_worker"],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    cwd=_SOURCE_ROOT)
        except OSError as e:
            log.error("cannot start the encode process: %s", e)
            return False
        self._proc, self._loop = proc, None
        self._buf, self._out, self._waiting_to_write = bytearray(), bytearray(), False
        log.info("encode process %d started", proc.pid)
        return True

    def _readable(self) -> None:
        try:
            data = os.read(self._proc.stdout.fileno(), 1 << 20)
        except BlockingIOError:
            return
        except OSError as e:
            self._lost(f"reading its replies failed: {e}")
            return
        if not data:
            self._lost(f"it exited (status {self._proc.poll()})")
            return
        buf = self._buf
        buf += data
        pos = 0
        while len(buf) - pos >= FRAME_HEADER.size:
            (length,) = FRAME_HEADER.unpack_from(buf, pos)
            if length > MAX_FRAME or not self._pending:
                self._lost("it sent a reply to nothing")
                return
            end = pos + FRAME_HEADER.size + length
            if len(buf) < end:
                break
            reply = marshal.loads(memoryview(buf)[pos + FRAME_HEADER.size:end])
            pos = end
            reply_of = self._pending.popleft()
            if not reply_of.done():
                reply_of.set_result(reply)
        del buf[:pos]

    def _lost(self, reason: str) -> None:
        """Drop the child; the batches it held are encoded by their callers."""
        proc = self._proc
        if proc is None:
            return
        log.warning("encode process %d lost: %s", proc.pid, reason)
        self._detach()
        while self._pending:
            reply_of = self._pending.popleft()
            if not reply_of.done():
                reply_of.set_exception(EncodeLost(reason))

    def _detach(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        loop, self._loop = self._loop, None
        if loop is not None and not loop.is_closed():
            loop.remove_reader(proc.stdout.fileno())
            loop.remove_writer(proc.stdin.fileno())
        proc.stdin.close()  # the child sees its input end and exits
        proc.stdout.close()
        try:
            proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def close(self) -> None:
        self.closed = True
        self._detach()


class EncodeLost(Exception):
    """The child went away with batches in flight."""


# The checkout the node runs from: the child imports the same modules.
_SOURCE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
