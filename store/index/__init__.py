"""The message index (RocketMQ IndexService): index files (index_file), the run of them
(index_service), and the child process that builds it off the node's GIL (index_process in the
parent, index_worker in the child, index_wire between them).
"""
