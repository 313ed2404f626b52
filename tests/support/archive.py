"""Archives in tests: a store of tiny files (tests/store/retention_env.Env) shipped to an
archive server by the node's own shipper."""
from __future__ import annotations

from cluster.archive.shipper import ArchiveShipper, StoreFiles
from cluster.config.shipping_config import ShippingConfig
from cluster.security.member_gate import MemberCredentials


def ship_sealed_files(root, address: str, secret: str, files: int = 3,
                      group: str = "g") -> None:
    """Fill a store under `root` until it has `files` files, ship every sealed one to the
    archive at `address` (proving `secret`), then shut the store."""
    from tests.store.retention_env import Env

    env = Env(root)
    env.fill_files(files)
    shipper = ArchiveShipper(StoreFiles(env.store), ShippingConfig(address=address,
                                                                   ship_all=True),
                             group, f"{group}:1", lambda: True,
                             MemberCredentials(secret.encode(), f"{group}:1"))
    while shipper.step() is not None:
        pass
    env.store.shutdown()
