"""Tables replicated through internal topics of the commitlog.

    table_records     an event <-> a record of the table's topic (JSON body, kind as tag)
    replicated_table  ReplicatedTable: append-then-apply under one lock, durability wait
                      outside it, lazy replay for the current master, snapshots, JSON views;
                      TableService steps every table of a node
"""
