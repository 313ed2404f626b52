"""common/pipe_frames.py: frames written and read whole, and fed in pieces."""
import io
import marshal

import pytest

from common.pipe_frames import (
    FRAME_HEADER,
    FrameDecoder,
    PipeError,
    encode_frame,
    read_frame,
    write_frame,
)


def test_frames_round_trip_and_a_torn_frame_is_an_error():
    buf = io.BytesIO()
    write_frame(buf, ("put", [("T#k", 1, 2)], 3))
    write_frame(buf, ("ok", None))
    raw = buf.getvalue()
    src = io.BytesIO(raw)
    assert read_frame(src) == ("put", [("T#k", 1, 2)], 3)
    assert read_frame(src) == ("ok", None)
    assert read_frame(src) is None  # a clean end
    for cut in (2, 10):
        with pytest.raises(PipeError, match="closed inside a frame"):
            read_frame(io.BytesIO(raw[:cut]))
    with pytest.raises(PipeError, match="is broken"):
        read_frame(io.BytesIO(b"\xff\xff\xff\xff" + b"x"))


def test_a_stream_fed_in_pieces_yields_each_frame_once_complete():
    frames = [("parts", 7, [(1, 2)], b"\x00" * 300), ("ok", None), ("x",)]
    raw = b"".join(encode_frame(f) for f in frames)
    for step in (1, 3, 7, len(raw)):
        decoder, got = FrameDecoder(), []
        for pos in range(0, len(raw), step):
            got += decoder.feed(raw[pos:pos + step])
        assert got == frames and not decoder.inside_frame
    decoder = FrameDecoder()
    assert decoder.feed(raw[:5]) == [] and decoder.inside_frame
    with pytest.raises(PipeError, match="is broken"):
        FrameDecoder().feed(b"\xff\xff\xff\xff")
    not_a_tuple = marshal.dumps(5)
    with pytest.raises(PipeError, match="not a request or reply"):
        FrameDecoder().feed(FRAME_HEADER.pack(len(not_a_tuple)) + not_a_tuple)
