"""A small client of the Admin API, shared by the CLI, the tests and the benchmarks."""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Callable, Iterable


from proto import admin_pb2 as pb
from proto import admin_pb2_grpc as pb_grpc
from slave.replication_client import GRPC_OPTIONS

from cluster.admin.admin_error import OPERATOR_METADATA
from cluster.admin.store_export import DEFAULT_CHUNK_BYTES, ExportPathError, check_relative_path
from cluster.security.tls import ClientTls, open_channel


class ExportError(RuntimeError):
    """export_store refused the destination or got a stream it cannot trust."""


@dataclass
class ExportProgress:
    bytes_done: int
    bytes_total: int
    files_done: int
    files_total: int
    path: str  # the file the last chunk belonged to
    seconds: float


@dataclass
class ExportSummary:
    """A finished export_store: where it went, files, bytes and time, the exported
    commitlog range, the node it came from and the manifest received."""

    dest_dir: str
    files: int
    bytes: int
    seconds: float
    commitlog_min_offset: int
    commitlog_end_offset: int  # the exported commitlog end (node's max offset at the start)
    node_id: str
    manifest: pb.ExportManifest


def _prepare_destination(dest_dir: str) -> None:
    if os.path.lexists(dest_dir):
        if not os.path.isdir(dest_dir):
            raise ExportError(f"destination {dest_dir} exists and is not a directory")
        if os.listdir(dest_dir):
            raise ExportError(f"destination {dest_dir} is not empty: export into a new or "
                              f"empty directory")
    os.makedirs(dest_dir, exist_ok=True)


def _check_manifest(manifest: pb.ExportManifest) -> dict[str, pb.ExportFile]:
    files: dict[str, pb.ExportFile] = {}
    for f in manifest.files:
        try:
            check_relative_path(f.path)
        except ExportPathError as e:
            raise ExportError(f"the manifest names an unsafe path: {e}") from None
        if f.path in files or f.path.endswith(".part"):
            raise ExportError(f"the manifest names {f.path!r} twice or as a temporary file")
        if f.size < 0 or f.file_length < f.size:
            raise ExportError(f"the manifest gives {f.path} size {f.size}, length {f.file_length}")
        files[f.path] = f
    if sum(f.size for f in files.values()) != manifest.total_bytes:
        raise ExportError("the manifest's total_bytes is not the sum of its file sizes")
    return files


def _topic_request(name: str, fields: dict) -> pb.TopicRequest:
    req = pb.TopicRequest(name=name)
    for field, value in fields.items():
        if value is not None:
            setattr(req, field, value)  # AttributeError names a wrong field
    return req


class AdminClient:
    """One node's Admin API. `operator` (e.g. the local user name) travels as `x-operator`
    metadata so the node's log of changes says who asked; it is not authenticated. `tls`: the
    CA (and client certificate) of a node serving TLS; None: plaintext."""

    def __init__(self, address: str, token: str, timeout: float = 30.0, operator: str = "",
                 tls: ClientTls | None = None) -> None:
        self.address = address
        self.timeout = timeout
        # A channel of its own connections: gRPC otherwise shares them per target in the
        # process, and a new client of a node that just restarted would inherit the reconnect
        # backoff of an old one and fail at once.
        self._channel = open_channel(
            address, tls, [*GRPC_OPTIONS, ("grpc.use_local_subchannel_pool", 1)])
        self._stub = pb_grpc.AdminStub(self._channel)
        metadata = [("authorization", f"Bearer {token}")]
        if operator:
            metadata.append((OPERATOR_METADATA, operator))
        self._metadata = tuple(metadata)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> "AdminClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _call(self, method, request, timeout: float | None = None):
        return method(request, metadata=self._metadata, timeout=timeout or self.timeout)

    def status(self, timeout: float | None = None) -> pb.NodeStatus:
        return self._call(self._stub.GetNodeStatus, pb.NodeStatusRequest(), timeout)

    def switch_role(self, role: str, master_address: str = "", epoch: int = 0) -> pb.NodeStatus:
        return self._call(self._stub.SwitchRole, pb.SwitchRoleRequest(
            role=role, master_address=master_address, epoch=epoch))

    def send(self, messages: list[pb.Message]) -> pb.SendMessagesResponse:
        return self._call(self._stub.SendMessages, pb.SendMessagesRequest(messages=messages))

    def get(self, topic: str, queue_id: int, offset: int, max_count: int = 32,
            tag_expression: str = "") -> pb.GetMessagesResponse:
        return self._call(self._stub.GetMessages, pb.GetMessagesRequest(
            topic=topic, queue_id=queue_id, offset=offset, max_count=max_count,
            tag_expression=tag_expression))

    def query(self, topic: str, key: str = "", max_count: int = 32, *, msg_id: str = "",
              begin_ms: int = 0, end_ms: int = 0, queue_id: int | None = None,
              omit_body: bool = False) -> pb.GetMessagesResponse:
        """By key (with topic), by message id (offset id or UNIQ_KEY; topic optional) or by
        store time range (with topic; optionally one queue)."""
        req = pb.QueryMessagesRequest(topic=topic, key=key, max_count=max_count, msg_id=msg_id,
                                      begin_timestamp_ms=begin_ms, end_timestamp_ms=end_ms,
                                      omit_body=omit_body)
        if queue_id is not None:
            req.queue_id = queue_id
        return self._call(self._stub.QueryMessages, req)

    # -- topics -----------------------------------------------------------------------------
    def list_topics(self, *, include_system: bool = False, with_offsets: bool = False,
                    topic: str = "") -> pb.ListTopicsResponse:
        return self._call(self._stub.ListTopics, pb.ListTopicsRequest(
            include_system=include_system, with_offsets=with_offsets, topic=topic))

    def create_topic(self, name: str, **fields: int | bool | None) -> pb.TopicInfo:
        """fields: read_queue_nums, write_queue_nums, queue_nums, perm, order (None: unset)."""
        return self._call(self._stub.CreateTopic, _topic_request(name, fields))

    def update_topic(self, name: str, **fields: int | bool | None) -> pb.TopicInfo:
        return self._call(self._stub.UpdateTopic, _topic_request(name, fields))

    def delete_topic(self, name: str) -> pb.DeleteTopicResponse:
        return self._call(self._stub.DeleteTopic, pb.DeleteTopicRequest(name=name))

    # -- consumer groups --------------------------------------------------------------------
    def list_groups(self) -> pb.ListGroupsResponse:
        return self._call(self._stub.ListGroups, pb.ListGroupsRequest())

    def upsert_group(self, name: str, *, fifo: bool | None = None,
                     retry_max_times: int | None = None,
                     consume_enable: bool | None = None) -> pb.GroupInfo:
        req = pb.UpsertGroupRequest(name=name)
        for field, value in (("fifo", fifo), ("retry_max_times", retry_max_times),
                             ("consume_enable", consume_enable)):
            if value is not None:
                setattr(req, field, value)
        return self._call(self._stub.UpsertGroup, req)

    def delete_group(self, name: str) -> pb.DeleteGroupResponse:
        return self._call(self._stub.DeleteGroup, pb.DeleteGroupRequest(name=name))

    def consumer_progress(self, group: str) -> pb.ConsumerProgress:
        return self._call(self._stub.GetConsumerProgress, pb.ConsumerProgressRequest(group=group))

    def reset_offset(self, group: str, topic: str, *, queue_id: int | None = None,
                     offset: int | None = None, timestamp_ms: int | None = None
                     ) -> pb.ResetOffsetResponse:
        req = pb.ResetOffsetRequest(group=group, topic=topic)
        if queue_id is not None:
            req.queue_id = queue_id
        if offset is not None:
            req.offset = offset
        if timestamp_ms is not None:
            req.timestamp_ms = timestamp_ms
        return self._call(self._stub.ResetOffset, req)

    # -- store ------------------------------------------------------------------------------
    def flush(self) -> pb.FlushResponse:
        return self._call(self._stub.Flush, pb.FlushRequest())

    def trigger_cleanup(self, wait_ms: int = 0) -> pb.CleanupResponse:
        return self._call(self._stub.TriggerCleanup, pb.CleanupRequest(wait_ms=wait_ms),
                          timeout=max(self.timeout, (wait_ms or 10_000) / 1000.0 + 5))

    def ship_to_archive(self, up_to_offset: int = 0, wait_ms: int = 0) -> pb.ShipToArchiveResponse:
        return self._call(self._stub.ShipToArchive,
                          pb.ShipToArchiveRequest(up_to_offset=up_to_offset, wait_ms=wait_ms),
                          timeout=max(self.timeout, (wait_ms or 30_000) / 1000.0 + 5))

    def store_stats(self) -> pb.StoreStats:
        return self._call(self._stub.GetStoreStats, pb.StoreStatsRequest())

    # -- configuration ----------------------------------------------------------------------
    def get_config(self, keys: Iterable[str] = ()) -> pb.ConfigResponse:
        return self._call(self._stub.GetConfig, pb.GetConfigRequest(keys=list(keys)))

    def update_config(self, key: str, value: str) -> pb.UpdateConfigResponse:
        return self._call(self._stub.UpdateConfig, pb.UpdateConfigRequest(key=key, value=value))

    def export_store(self, dest_dir: str, include: Iterable[str] | None = None,
                     chunk_bytes: int = DEFAULT_CHUNK_BYTES,
                     progress: Callable[[ExportProgress], None] | None = None,
                     timeout: float | None = None) -> ExportSummary:
        """Copy the node's store directory into `dest_dir` (which must not exist or be empty)
        with Admin.ExportStore. Each file is written to `<file>.part`, checked against the
        manifest size, extended to its length on the node (sparse zeros) and renamed; a broken
        stream leaves no partial file under a final name (grpc.RpcError or ExportError is
        raised). `timeout`: deadline of the whole export (None: none)."""
        _prepare_destination(dest_dir)
        started = time.monotonic()
        call = self._stub.ExportStore(
            pb.ExportStoreRequest(include=list(include or ()), chunk_bytes=chunk_bytes),
            metadata=self._metadata, timeout=timeout)
        manifest: pb.ExportManifest | None = None
        expected: dict[str, pb.ExportFile] = {}
        finished: set[str] = set()
        current: pb.ExportFile | None = None
        fh = None
        part = ""
        written = received = 0
        try:
            for msg in call:
                which = msg.WhichOneof("payload")
                if manifest is None:
                    if which != "manifest":
                        raise ExportError(f"the stream began with {which}, not the manifest")
                    manifest = msg.manifest
                    expected = _check_manifest(manifest)
                    continue
                if which == "done":
                    missing = sorted(set(expected) - finished)
                    if fh is not None or missing:
                        raise ExportError(f"the export ended without {len(missing) or 1} "
                                          f"file(s): {', '.join(missing[:5])}")
                    break
                if which != "chunk":
                    raise ExportError(f"unexpected {which} in the stream")
                chunk = msg.chunk
                if current is None or chunk.path != current.path:
                    if fh is not None:
                        raise ExportError(f"{current.path} was not finished before {chunk.path}")
                    current = expected.get(chunk.path)
                    if current is None or chunk.path in finished:
                        raise ExportError(f"chunk of {chunk.path!r}, not expected")
                    final = os.path.join(dest_dir, *chunk.path.split("/"))
                    part = final + ".part"
                    os.makedirs(os.path.dirname(final), exist_ok=True)
                    fh = open(part, "wb")
                    written = 0
                if chunk.offset != written or written + len(chunk.data) > current.size:
                    raise ExportError(f"{current.path}: chunk at {chunk.offset} of "
                                      f"{len(chunk.data)} bytes, but {written} of {current.size} "
                                      f"bytes received")
                fh.write(chunk.data)
                written += len(chunk.data)
                received += len(chunk.data)
                if chunk.file_done:
                    if written != current.size:
                        raise ExportError(f"{current.path}: {written} bytes received, the "
                                          f"manifest says {current.size}")
                    if current.file_length > written:
                        fh.truncate(current.file_length)  # the node's zeros, as a sparse tail
                    fh.close()
                    fh = None
                    os.replace(part, part[:-len(".part")])
                    finished.add(current.path)
                if progress is not None:
                    progress(ExportProgress(received, manifest.total_bytes, len(finished),
                                            len(expected), current.path,
                                            time.monotonic() - started))
                if chunk.file_done:
                    current = None
            else:
                raise ExportError("the stream ended before the export was done"
                                  if manifest is not None else "the stream ended without a manifest")
        except BaseException:
            call.cancel()
            if fh is not None:
                fh.close()
                try:
                    os.unlink(part)
                except FileNotFoundError:
                    pass
            raise
        return ExportSummary(dest_dir=dest_dir, files=len(finished), bytes=received,
                             seconds=time.monotonic() - started,
                             commitlog_min_offset=manifest.commitlog_min_offset,
                             commitlog_end_offset=manifest.commitlog_end_offset,
                             node_id=manifest.node_id, manifest=manifest)
