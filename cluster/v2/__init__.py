"""RocketMQ 5 protocol helpers shared by messaging and consume.
"""
