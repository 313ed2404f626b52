"""Node metadata in replicated tables: the topic table.

    topic_state   TopicState: every topic's config as a pure state machine, and its records
    topic_table   TopicTable: the replicated table of a node (leader and follower), the
                  topics.json view and the one-time import of an old-style topics.json
"""
