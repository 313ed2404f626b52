"""The committed *_pb2 modules are what `python -m proto.generate` writes from the .proto files."""
from proto import generate


def test_generated_modules_are_fresh():
    stale = generate.stale_files()
    assert not stale, f"regenerate with `python -m proto.generate`: {stale}"


def test_every_proto_has_both_modules():
    sources = generate.proto_sources()
    assert "proto/replication.proto" in sources and "proto/admin.proto" in sources
