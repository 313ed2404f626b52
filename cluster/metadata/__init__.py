"""Node metadata in replicated tables (cluster/replicated/), so a promoted slave has exactly its
master's metadata up to the confirm offset and `config/*.json` are views written from them.

    topic_state   TopicState: every topic's config as a pure state machine, and its records
    topic_table   TopicTable: the replicated table of a node (leader and follower), the
                  topics.json view and the one-time import of an old-style topics.json
"""
