"""Getting bytes to disk: the commitlog flush services of ASYNC_FLUSH and the commit step
(flush), SYNC_FLUSH group commit (group_commit), and the flush of consume queues and index with
the checkpoint (logics_flush).
"""
