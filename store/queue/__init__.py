"""Consume queues: the 20-byte units of one topic-queue (consume_queue) and the table of all of
them (consume_queue_store).
"""
