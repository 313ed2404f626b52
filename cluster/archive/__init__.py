"""The commitlog archive (seed 002): shipper, archive server, Spark search.

    ship_plan.py         which file ships next and how far retention may delete (no I/O)
    shipper.py           ArchiveShipper: the service that ships (a node's store, or a group
                         of an archive in mixed mode)
    upload.py            receiving one file: checks, resume, checksums, fsync and rename
    archived_commitlog.py  a group's files, read-only, gaps allowed
    archive_group.py     one group: files, consume queues, index, catalog
    archive.py           the archive: groups, receive rules, queries across groups
    archive_servicer.py  the gRPC adapter (proto/archive.proto)
    reconsume.py         archived messages sent back to a live cluster
    archive_retention.py the archive's own retention and mixed mode (chained archives)
    registry.py          the registry file of archives and their time ranges
    archive_config.py    the archive server's keys
    search_filter.py, spark_search.py   the search over every archived file (Spark)

Elsewhere: a node's archive keys (archiveAddress, archiveShipFrom, ...) are
cluster/config/shipping_config.py; the archive server process, `python -m cluster archive` (its
HTTP JSON endpoint on cluster/metrics/exposition.py), is cluster/assembly/archive_process.py.
"""
