"""The operator's Admin API of a node (proto/admin.proto), server side.

    admin_servicer   the gRPC adapter: token-checked calls -> the plain modules below
    admin_error      AdminError (a gRPC code + message), the caller's name for the change log
    admin_token      the bearer token: resolve/generate it, and the interceptor that checks it
    topic_admin      topics: list, create, update, delete (system topics protected)
    group_admin      consumer groups: list, upsert, delete, progress, offset reset
    message_lookup   messages by id, key and time; smoke-test send/get
    maintenance      flush, cleanup, store statistics
    runtime_config   effective config and runtime updates of an allow-list of keys
    store_export     ExportStore: a consistent copy of a running store, streamed

The client side is cluster/client/admin_client.py.
"""
