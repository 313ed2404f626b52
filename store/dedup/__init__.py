"""The duplicate window: a retried send is stored once (like NATS JetStream's Nats-Msg-Id
window). The window itself without I/O (window: the recent message ids of client sends, where
each was stored, what a repeat is answered with) and its rebuild from the commitlog's tail when
a store opens (rebuild).
"""
