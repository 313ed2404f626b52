"""A store led by a MasterRole without a node: what a replicated table (cluster/replicated/)
needs in a unit test. Small files, a ManualClock, an ASYNC_MASTER (or, with sync_master=True, a
SYNC_MASTER without slaves: every put that waits times out after slaveTimeout) in epoch 1.

    ls = LeaderStore(root)        # started; ls.role is a Leader of ls.master
    ls.follow("127.0.0.1:1")      # the role becomes a Follower (the master stops; like on a
                                  # slave, reput stops at the confirm offset)
    ls.confirm()                  # the confirm offset moves to the end, reput catches up
    ls.lead()                     # a new MasterRole in the next epoch leads again
    ls.dispatched()               # reput caught up with everything below its bound
    ls.close()
"""
from __future__ import annotations

from ha.epoch import EpochCache
from master.master_role import MasterRole
from store.broker_role import BrokerRole
from common.clock import ManualClock
from store.config import StoreConfig
from store.message_store import MessageStore

from cluster.config.node_role import Follower, Leader, Role


class LeaderStore:
    def __init__(self, root: str, *, sync_master: bool = False, **store_config) -> None:
        self.sync_master = sync_master
        self.clock = ManualClock()
        self.store = MessageStore(StoreConfig(**{
            "store_path_root_dir": root, "mapped_file_size_commit_log": 64 * 1024,
            "mapped_file_size_consume_queue": 20 * 256, "max_hash_slot_num": 64,
            "max_index_num": 256, **store_config}), clock=self.clock)
        self.store.start()
        self.epochs = EpochCache()
        self.epochs.append(1, 0)
        self.role = Role("broker-a:0")
        self.master = self.lead(first=True)

    def lead(self, first: bool = False) -> MasterRole:
        if not first:
            self.epochs.append(self.epochs.last_epoch + 1, self.store.max_phy_offset())
        master = MasterRole(self.store, self.epochs, "broker-a", self.clock,
                            sync_master=self.sync_master)
        master.start()
        self.master = master
        kind = BrokerRole.SYNC_MASTER if self.sync_master else BrokerRole.ASYNC_MASTER
        self.role.set(Leader(kind, self.epochs.last_epoch, master))
        return master

    def follow(self, address: str = "127.0.0.1:1") -> None:
        self.master.stop("following")
        self.role.set(Follower(address))

    def confirm(self) -> None:
        end = self.store.max_phy_offset()
        self.store.confirm_source = lambda: end
        self.dispatched()

    def dispatched(self) -> None:
        self.store.reput.catch_up()

    def close(self) -> None:
        self.master.stop()
        self.store.shutdown()
