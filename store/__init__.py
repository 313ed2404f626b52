"""The embedded store: RocketMQ-compatible commitlog, consume queues, index, flush, reput,
recovery and retention. Imports nothing from the other top-level packages.

Data flow, top to bottom:
    MessageStore.put -> CommitLog (MappedFileQueue of MappedFile) -> FlushService
    ReputService -> Dispatchers (ConsumeQueueStore, IndexService)
"""
