"""Consumer groups on a master: receive, ack, redelivery, DLQ, FIFO, offsets.

    state     the pure state machine (events -> per-queue cursor and in-flight deliveries)
    records   events <-> commitlog records of rmq_sys_CONSUMER_STATE
    receipt   receipt handles bound to topic and group
    planner   which messages of a queue a receive hands out (redelivery, DLQ, FIFO, filter)
    consumer_service  the lock, replay, append-then-apply, groups, progress, offset reset,
                      snapshots
    consumer_calls    the v2 calls: ReceiveMessage, AckMessage, ChangeInvisibleDuration,
                      ForwardMessageToDeadLetterQueue, UpdateOffset, GetOffset
"""
