"""The child's end of a node's encode process (encode_process.py is the parent's): it converts,
checks and encodes SendMessage batches (send_encoding.encode_send), so that work runs on a core
of its own while the node's serving process appends and answers.

Frames are index_wire.py's (a u32 big-endian length, then marshal of a tuple), one reply per
request, in order:

    ("encode", request, queue_id, limits, now_ms, peer_ip, settings)
        request:  a SendMessageRequest, serialized
        limits:   SendLimits' fields in order; settings: EncodeSettings.as_tuple()
    -> ("ok", send_encoding.pack(...))
     | ("refused", v2 status code, message)     what Sender.send answers for it
     | ("error", exception type, message)       a bug or a bad request frame: the parent
                                                encodes that batch itself

`EncodeWorker.handle` is the protocol with no I/O; `main` is the process
(`python -m cluster.messaging.encode_worker`). It keeps nothing between requests but the cache
of topic names found valid, writes no file, and exits when its input ends.
"""
from __future__ import annotations

import logging
import os
import sys

from proto.apache.rocketmq.v2 import service_pb2 as s
from store.index_wire import read_frame, write_frame
from store.put_encoding import EncodeSettings, TopicCache

from cluster.messaging.convert import SendLimits
from cluster.messaging.send_encoding import encode_send, pack
from cluster.messaging.v2_status import V2Error

log = logging.getLogger(__name__)


class EncodeWorker:
    """Answers encode requests; one at a time (the pipe delivers them in order)."""

    def __init__(self) -> None:
        self.topics = TopicCache()

    def handle(self, request: tuple) -> tuple:
        try:
            op, raw, queue_id, limits, now_ms, peer_ip, settings = request
            if op != "encode":
                raise ValueError(f"unknown request {op!r}")
            messages = s.SendMessageRequest.FromString(raw).messages
            sent = encode_send(messages, queue_id, SendLimits(*limits), now_ms, peer_ip,
                               EncodeSettings.from_tuple(settings), self.topics)
        except V2Error as e:
            return ("refused", e.code, e.message)
        except Exception as e:  # answered, never fatal: the parent encodes the batch itself
            log.exception("encode request failed")
            return ("error", type(e).__name__, str(e))
        return ("ok", pack(sent))


def main() -> int:
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="%(asctime)s encode-worker %(levelname)s %(message)s")
    # The replies own the real stdout; anything else printed goes to stderr.
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    worker = EncodeWorker()
    src = sys.stdin.buffer
    while (request := read_frame(src)) is not None:
        write_frame(out, worker.handle(request))
    return 0


if __name__ == "__main__":
    sys.exit(main())
