"""Master role: the write path and the replication servicer.
"""
