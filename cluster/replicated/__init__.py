"""Tables replicated through internal topics of the commitlog (events + snapshots + replay on
promotion), so node metadata survives a failover the way the messages do.

    table_records     an event <-> a record of the table's topic (JSON body, kind as tag)
    replicated_table  ReplicatedTable: append-then-apply under one lock, durability wait
                      outside it, lazy replay for the current master, snapshots, JSON views;
                      TableService steps every table of a node
"""
