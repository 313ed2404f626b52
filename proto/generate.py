"""Regenerate the Python modules of every .proto under proto/ (run: python -m proto.generate).

The generated *_pb2.py / *_pb2_grpc.py files are committed and never edited by hand;
tests/proto/test_generated.py fails when they differ from what this command writes.
`--check` compares without writing and exits 1 when something is stale.
"""
from __future__ import annotations

import argparse
import filecmp
import os
import shutil
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROTO_DIR = os.path.join(ROOT, "proto")


def proto_sources() -> list[str]:
    """Paths of the .proto files, relative to the repository root (protoc's include path)."""
    out = []
    for dirpath, _, files in os.walk(PROTO_DIR):
        out += [os.path.relpath(os.path.join(dirpath, f), ROOT) for f in files if f.endswith(".proto")]
    return sorted(out)


def generated_names(source: str) -> list[str]:
    base = source[:-len(".proto")]
    return [base + "_pb2.py", base + "_pb2_grpc.py"]


def generate(out_dir: str) -> None:
    from grpc_tools import protoc  # test/dev dependency: only needed to regenerate
    include = os.path.join(os.path.dirname(protoc.__file__), "_proto")
    sources = proto_sources()
    args = ["protoc", f"-I{ROOT}", f"-I{include}", f"--python_out={out_dir}",
            f"--grpc_python_out={out_dir}", *[os.path.join(ROOT, s) for s in sources]]
    if protoc.main(args) != 0:
        raise SystemExit(f"protoc failed on {', '.join(sources)}")


def stale_files() -> list[str]:
    """Generated files that are missing or differ from a fresh generation."""
    with tempfile.TemporaryDirectory() as tmp:
        generate(tmp)
        stale = []
        for source in proto_sources():
            for name in generated_names(source):
                fresh, committed = os.path.join(tmp, name), os.path.join(ROOT, name)
                if not os.path.exists(committed) or not filecmp.cmp(fresh, committed, shallow=False):
                    stale.append(name)
        return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m proto.generate", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if generated files are stale")
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_files()
        for name in stale:
            print(f"stale: {name}")
        return 1 if stale else 0
    with tempfile.TemporaryDirectory() as tmp:
        generate(tmp)
        for source in proto_sources():
            for name in generated_names(source):
                shutil.copyfile(os.path.join(tmp, name), os.path.join(ROOT, name))
                print(f"wrote {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
