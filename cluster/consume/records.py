"""Consumer state events as records of the internal topic `rmq_sys_CONSUMER_STATE`, so they
replicate with the data and a new master rebuilds every group's progress after a failover.

The record format is the replicated tables' (cluster/replicated/table_records.py): queue 0, the
event kind as the tag, the event as a compact JSON body. The kinds (state.py has their fields):

    kind       waits for the flush/replication policy
    group      yes   a group's config, or its deletion
    pop        no    offsets handed out (at-least-once: a lost pop only means a redelivery)
    ack        yes   an offset done
    acks       yes   the offsets of one AckMessage request done (one record for all its entries)
    change     yes   a delivery's invisibility moved (new handle)
    offset     yes   a committed offset set by UpdateOffset or an offset reset
    snapshot   yes   the whole state; replay may start at the newest one
"""
from __future__ import annotations

from cluster.replicated.table_records import TableRecords

STATE_TOPIC = "rmq_sys_CONSUMER_STATE"
CONSUMER_STATE_RECORDS = TableRecords(STATE_TOPIC, no_wait_kinds=frozenset({"pop"}))
