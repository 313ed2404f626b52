"""The embedded store: RocketMQ-compatible commitlog, queues, index, flush.

Imports nothing from the other top-level packages except common/.

Data flow, top to bottom:
    MessageStore.put -> CommitLog (MappedFileQueue of MappedFile) -> flush (AsyncFlushService,
                    or the SYNC_FLUSH group commit)
    ReputService -> Dispatchers (ConsumeQueueStore, IndexService; or IndexProcess, which
                    runs the IndexService in a child process: index/index_process.py)

Where the files are and what their states mean after a crash: layout.py. Walking the commitlog
record after record: commitlog/commitlog_walk.py. Reading a store directory without opening it:
readonly/ (the store tool, `python -m store`, is cli/).
"""
