"""The conversion process, the parent's end: a receive's records turned into their delivered
v2 form (`delivery_bytes.MessageParts`) by a child process (conversion_worker.py) that reads
them from the commitlog files itself, on the other core, instead of under the GIL that serves
the clients. Reading the records and building their messages were 27-57% of a master's
samples under consumers (docs/performance/history.md).

Requests and replies are frames (common/pipe_frames.py) on the child's stdin and stdout, on the
event loop of the server: written without blocking (what the pipe does not take yet is
written when it can), replies read as they come and matched to their request by id, so the
receives of many consumers are in flight at once:

    ("parts", id, [(phy, size), ...], [(phy, size), ...] prefetch, min_offset, truncations)
        -> ("parts", id, [(head, sp, body_field) or None, ...] or None)
    ("stats", id) -> ("stats", id, [cache hits, records converted, of them prefetched])
    child, once started: ("ready",)

`parts` answers None when the child cannot serve the call: not started yet (until its
`ready`), dead, on another event loop, or slower than `timeout_s` (then it is killed and a new
one starts after `restart_after_s`); an item answered None is a record the child could not
read. The caller then converts those records itself (`ConsumerCalls`): the child only ever
saves work, it never decides what is delivered.

Locking: none; everything runs on the one event loop the child was started from.
"""
from __future__ import annotations

import asyncio
import itertools
import logging
import os
import subprocess
import sys
import time
from typing import Callable

from common.pipe_frames import PIPE_READ, FrameDecoder, PipeError, encode_frame

from cluster.consume.delivery_bytes import MessageParts

log = logging.getLogger(__name__)

TIMEOUT_S = 2.0
RESTART_AFTER_S = 1.0
CLOSE_WAIT_S = 5.0


class ConversionProcess:
    """Owns the child, its pipes, the requests waiting for their replies (id -> future) and
    the bytes not yet written to the child."""

    def __init__(self, commitlog_dir: str, *, timeout_s: float = TIMEOUT_S,
                 restart_after_s: float = RESTART_AFTER_S,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.commitlog_dir = commitlog_dir
        self.timeout_s = timeout_s
        self.restart_after_s = restart_after_s
        self.monotonic = monotonic
        self.starts = 0  # children started (the first and the restarts)
        self.fallbacks = 0  # calls answered None while enabled
        self._proc: subprocess.Popen | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = False
        self._decoder = FrameDecoder()
        self._waiting: dict[int, asyncio.Future] = {}
        self._ids = itertools.count()
        self._unwritten = bytearray()
        self._start_after = 0.0
        self._closed = False

    @property
    def pid(self) -> int | None:
        proc = self._proc
        return proc.pid if proc is not None else None

    @property
    def ready(self) -> bool:
        return self._ready

    async def parts(self, items: list[tuple[int, int]], prefetch: list[tuple[int, int]] = (),
                    min_offset: int = 0, truncations: int = 0
                    ) -> list[MessageParts | None] | None:
        """The parts of the records at `items` ((offset, size) each), or None (the module
        doc). `prefetch`: records the next receives will likely ask for, which the child
        converts while it waits; `min_offset`: the commitlog's first offset (the child lets
        go of the files before it); `truncations`: CommitLog.truncations (when it changed,
        the child maps the files again and forgets what it converted)."""
        answers = await self._ask("parts", items, list(prefetch), min_offset, truncations)
        if answers is None:
            self.fallbacks += 1
        return answers  # (head, sp, body_field) tuples: what MessageParts holds

    async def stats(self) -> list[int] | None:
        """The child's counters [cache hits, records converted, of which prefetched], None
        when it cannot answer."""
        return await self._ask("stats")

    async def _ask(self, op: str, *args):
        """Send (op, id, *args) and return the reply's value; None when the child cannot
        serve (the module doc), or does not answer within timeout_s (then it is lost)."""
        if not self._usable():
            return None
        request_id = next(self._ids)
        future = self._loop.create_future()
        self._waiting[request_id] = future
        self._send((op, request_id, *args))
        try:
            return await asyncio.wait_for(future, self.timeout_s)
        except asyncio.TimeoutError:
            self._lost(f"no answer within {self.timeout_s} s")
            return None
        finally:
            self._waiting.pop(request_id, None)

    # -- the child --------------------------------------------------------------------------
    def _usable(self) -> bool:
        if self._closed:
            return False
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
        elif loop is not self._loop:
            return False  # the child's pipes are watched by the first loop
        if self._proc is None and self.monotonic() >= self._start_after:
            self._start()
        return self._proc is not None and self._ready

    def _start(self) -> None:
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "cluster.consume.conversion_worker", self.commitlog_dir],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
        except OSError as e:
            log.error("cannot start the conversion process: %s", e)
            self._start_after = self.monotonic() + self.restart_after_s
            return
        self._proc, self._ready, self._decoder = proc, False, FrameDecoder()
        self._unwritten.clear()
        self.starts += 1
        os.set_blocking(proc.stdin.fileno(), False)
        os.set_blocking(proc.stdout.fileno(), False)
        self._loop.add_reader(proc.stdout.fileno(), self._readable, proc)
        log.info("conversion process started (pid %d)", proc.pid)

    def _readable(self, proc: subprocess.Popen) -> None:
        if proc is not self._proc:
            return
        try:
            data = os.read(proc.stdout.fileno(), PIPE_READ)
        except BlockingIOError:
            return
        except OSError as e:
            self._lost(f"reading its answers: {e}")
            return
        if not data:
            self._lost("its output ended")
            return
        try:
            frames = self._decoder.feed(data)
        except PipeError as e:
            self._lost(str(e))
            return
        for frame in frames:
            if frame[0] == "ready":
                self._ready = True
            elif frame[0] in ("parts", "stats") and len(frame) == 3:
                future = self._waiting.pop(frame[1], None)
                if future is not None and not future.done():
                    future.set_result(frame[2])

    def _send(self, request: tuple) -> None:
        self._unwritten += encode_frame(request)
        self._write()

    def _write(self) -> None:
        proc = self._proc
        if proc is None:
            return
        fd = proc.stdin.fileno()
        try:
            while self._unwritten:
                written = os.write(fd, self._unwritten)
                del self._unwritten[:written]
        except BlockingIOError:  # the pipe is full: the rest when the child has read some
            self._loop.add_writer(fd, self._write)
            return
        except OSError as e:
            self._lost(f"writing a request: {e}")
            return
        self._loop.remove_writer(fd)

    def _lost(self, why: str) -> None:
        """The child is of no further use: kill it, answer every waiting request None (its
        caller converts itself) and start a new one after restart_after_s."""
        proc = self._proc
        if proc is None:
            return
        log.error("conversion process (pid %d) lost: %s; receives convert their records "
                  "themselves until a new one starts", proc.pid, why)
        self._stop(proc, kill=True)
        self._start_after = self.monotonic() + self.restart_after_s

    def _stop(self, proc: subprocess.Popen, *, kill: bool) -> None:
        self._proc, self._ready = None, False
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.remove_reader(proc.stdout.fileno())
            loop.remove_writer(proc.stdin.fileno())
        for future in self._waiting.values():
            if not future.done():
                future.set_result(None)
        self._waiting.clear()
        self._unwritten.clear()
        if kill:
            proc.kill()
        for pipe in (proc.stdin, proc.stdout):
            try:
                pipe.close()  # the child's input ends: it exits
            except OSError:
                pass
        try:
            proc.wait(CLOSE_WAIT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def close(self) -> None:
        """Stop the child (its input closed, killed after CLOSE_WAIT_S). From the loop's
        thread, or from any thread once the loop has stopped."""
        self._closed = True
        proc = self._proc
        if proc is not None:
            self._stop(proc, kill=False)
