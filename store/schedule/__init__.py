"""Delayed messages (RocketMQ ScheduleMessageService): the put side that moves a delayed message
to the schedule topic (schedule_rewrite), the delivery service (schedule) and its state without
I/O (schedule_state).
"""
