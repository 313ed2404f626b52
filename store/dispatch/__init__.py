"""Reput and dispatch: the reput service walks committed commitlog bytes (reput) and hands each
record, as a DispatchRequest (dispatch), to the consume queues and the index.
"""
