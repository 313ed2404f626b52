"""The gRPC serving plumbing: server, thread pool, shared interceptor parts.
"""
