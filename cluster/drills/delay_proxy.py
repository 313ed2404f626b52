"""A TCP proxy that delays what it forwards: the slow link of the `slow-link-slave` drill.

Every connection to the proxy is forwarded to `target`, each direction by two threads: one
reads whatever arrives and stamps it with the time it may leave (now + `delay_s`), the other
writes it out at that time, in order. So each direction of the link gets `delay_s` of latency
(a round trip 2 x `delay_s`) without a bound on bandwidth, as a long or congested link would
behave, and `delay_s` can change while connections run (0: a plain relay). How a process's
connection reaches the proxy is the firewall's business (partition.Redirect).

A drill runs it in a process of its own (`ProxyProcess`, `python -m cluster.drills.delay_proxy
HOST:PORT`: prints its port, then reads `<seconds>` lines setting the delay), as the network
would be: in the drill's process its threads would compete for the GIL with the load
generator's, and add their own latency to every forwarded byte.
"""
from __future__ import annotations

import logging
import queue
import socket
import subprocess
import sys
import threading
import time

log = logging.getLogger(__name__)
_READ = 256 * 1024
_EOF = b""


class DelayProxy:
    """Listens on 127.0.0.1:`port` and forwards to `target` with `delay_s` each way. Owns the
    listening socket, the connections and their threads; `_lock` guards the delay, the
    connection list and `accepted` (read by every reader thread, set by the drill)."""

    def __init__(self, target: tuple[str, int], port: int = 0) -> None:
        self.target = target
        self._lock = threading.Lock()
        self._delay_s = 0.0
        self._sockets: list[socket.socket] = []
        self._closed = False
        self.accepted = 0  # connections forwarded so far
        self._server = socket.create_server(("127.0.0.1", port))
        self.port = self._server.getsockname()[1]
        self._accepting = threading.Thread(target=self._accept, name="delay-proxy-accept",
                                           daemon=True)

    @property
    def delay_s(self) -> float:
        with self._lock:
            return self._delay_s

    @delay_s.setter
    def delay_s(self, value: float) -> None:
        if value < 0:
            raise ValueError(f"a delay cannot be negative: {value}")
        with self._lock:
            self._delay_s = value

    def start(self) -> "DelayProxy":
        self._accepting.start()
        return self

    def close(self) -> None:
        with self._lock:
            self._closed = True
            sockets, self._sockets = self._sockets, []
        self._server.close()
        for s in sockets:
            _close(s)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return  # closed
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError as e:
                log.warning("delay proxy: cannot reach %s: %s", self.target, e)
                _close(client)
                continue
            for s in (client, upstream):
                # As gRPC does: without it Nagle's algorithm holds small writes (acks) back
                # until the peer's delayed ACK, some 40 ms, on a link meant to add nothing.
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                if self._closed:
                    _close(client)
                    _close(upstream)
                    return
                self._sockets += [client, upstream]
                self.accepted += 1
            for src, dst, name in ((client, upstream, "up"), (upstream, client, "down")):
                pending: queue.Queue[tuple[float, bytes]] = queue.Queue()
                threading.Thread(target=self._read, args=(src, dst, pending),
                                 name=f"delay-proxy-{name}-read", daemon=True).start()
                threading.Thread(target=self._write, args=(dst, src, pending),
                                 name=f"delay-proxy-{name}-write", daemon=True).start()

    def _read(self, src: socket.socket, dst: socket.socket,
              pending: "queue.Queue[tuple[float, bytes]]") -> None:
        while True:
            try:
                data = src.recv(_READ)
            except OSError:
                data = _EOF
            pending.put((time.monotonic() + self.delay_s, data))
            if not data:
                return

    def _write(self, dst: socket.socket, src: socket.socket,
               pending: "queue.Queue[tuple[float, bytes]]") -> None:
        while True:
            due, data = pending.get()
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            if not data:  # the other side closed: pass the end on, then stop
                try:
                    dst.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
                return
            try:
                dst.sendall(data)
            except OSError:  # the far end went away: end both directions
                _close(dst)
                _close(src)
                return


def _close(s: socket.socket) -> None:
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    s.close()


class ProxyProcess:
    """A DelayProxy in a child process (see the module docstring). Owns the child: close()
    ends it (its connections with it)."""

    def __init__(self, target: tuple[str, int]) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "cluster.drills.delay_proxy", f"{target[0]}:{target[1]}"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()
        if not line.strip().isdigit():
            self.close()
            raise RuntimeError(f"the delay proxy did not start (said {line.strip()!r})")
        self.port = int(line)
        self._delay_s = 0.0

    @property
    def delay_s(self) -> float:
        return self._delay_s

    @delay_s.setter
    def delay_s(self, value: float) -> None:
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write(f"{value}\n")
        self._proc.stdin.flush()
        if self._proc.stdout.readline().strip() != "ok":  # applied before the caller goes on
            raise RuntimeError("the delay proxy did not take the delay")
        self._delay_s = value

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.kill()
        self._proc.wait()


def main(argv: list[str]) -> int:
    host, _, port = argv[0].rpartition(":")
    proxy = DelayProxy((host, int(port))).start()
    print(proxy.port, flush=True)
    for line in sys.stdin:
        proxy.delay_s = float(line)
        print("ok", flush=True)
    proxy.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
