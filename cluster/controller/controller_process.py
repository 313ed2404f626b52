"""A controller process: its gRPC server, its service and the ticker that elects on time.
`python -m cluster controller` (cluster/cli/serve_cmd.py) runs one until a signal."""
from __future__ import annotations

import logging
import os
from concurrent import futures

import grpc

from proto import controller_pb2_grpc
from store.clock import SYSTEM_CLOCK, Clock
from store.errors import StoreError
from store.service import PeriodicTask

from cluster.admin.admin_token import BearerTokenInterceptor, ensure_token_file
from cluster.controller.controller_config import ControllerConfig
from cluster.controller.controller_service import ControllerService, FileStateStore
from cluster.controller.controller_servicer import PROTECTED_METHODS, ControllerServicer

log = logging.getLogger(__name__)
TICK_S = 0.1


class ControllerProcess:
    """The controller's gRPC server, its service and the ticker that elects on time."""

    def __init__(self, config: ControllerConfig, clock: Clock = SYSTEM_CLOCK) -> None:
        self.config = config
        os.makedirs(config.store_path, exist_ok=True)
        self.token, _ = ensure_token_file(config.token_path)
        self.service = ControllerService(FileStateStore(config.state_path), config.election,
                                         clock)
        self._ticker = PeriodicTask("controller-tick", self.service.tick, TICK_S)
        self._server: grpc.Server | None = None
        self.address = ""

    def start(self) -> None:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=16,
                                                        thread_name_prefix="controller"),
                             interceptors=[BearerTokenInterceptor(self.token, PROTECTED_METHODS)])
        host = self.config.listen_address.rpartition(":")[0]
        port = server.add_insecure_port(self.config.listen_address)
        if port == 0:
            raise StoreError(f"cannot listen on {self.config.listen_address}")
        self.address = f"{host}:{port}"
        controller_pb2_grpc.add_ControllerServicer_to_server(
            ControllerServicer(self.service, self.address), server)
        server.start()
        self._server = server
        self._ticker.start()
        log.info("controller listening on %s (state %s)", self.address, self.config.state_path)

    def stop(self) -> None:
        self._ticker.stop()
        if self._server is not None:
            self._server.stop(grace=1.0).wait(5)
