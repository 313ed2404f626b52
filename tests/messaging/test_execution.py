"""Where each client API call runs is cluster/serving/execution.py's table, and the servicers
obey it: every method of both services is in the table, a LOOP method is a coroutine (or an
async generator, for a server stream), a POOL method a plain function; and no consumer or send
path keeps a second, `_async` copy of itself."""
from __future__ import annotations

import inspect

import pytest

from cluster.consume.consumer_calls import ConsumerCalls
from cluster.consume.settle_calls import SettleCalls
from cluster.messaging.consumer_router import ConsumerRouter
from cluster.messaging.messaging_service import MessagingService
from cluster.messaging.messaging_servicer import BatchReceiveServicer, MessagingServicer
from cluster.messaging.send import MasterForwarder, Sender
from cluster.replicated.replicated_table import ReplicatedTable
from cluster.serving.execution import EXECUTION, LOOP, POOL, in_pool
from master.master_role import MasterRole

SERVICERS = (MessagingServicer, BatchReceiveServicer)


def runs_on_loop(fn) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn)


def test_the_table_names_every_method_of_both_services():
    for servicer in SERVICERS:
        service = servicer.SERVICE
        assert set(EXECUTION[service.full_name]) == {m.name for m in service.methods}


@pytest.mark.parametrize("servicer", SERVICERS, ids=lambda s: s.__name__)
def test_each_handler_is_what_the_table_says(servicer):
    for method, runs in EXECUTION[servicer.SERVICE.full_name].items():
        handler = getattr(servicer, method)
        assert runs in (LOOP, POOL)
        assert runs_on_loop(handler) == (runs is LOOP), \
            f"{servicer.__name__}.{method} must be {'a coroutine' if runs is LOOP else 'plain'}"


def test_no_call_path_is_written_twice():
    """A method and an `_async` twin of it: the same logic in two execution models."""
    for cls in (ConsumerCalls, SettleCalls, ConsumerRouter, MessagingService, Sender,
                MasterForwarder, ReplicatedTable, MasterRole, MessagingServicer,
                BatchReceiveServicer):
        names = {n for n, _ in inspect.getmembers(cls, inspect.isfunction)}
        twins = sorted(n for n in names if n.endswith("_async") and n[:-6] in names)
        assert not twins, f"{cls.__name__} has twins: {twins}"


def test_in_pool_runs_in_another_thread_and_keeps_the_context():
    import asyncio
    import contextvars
    import threading
    var = contextvars.ContextVar("caller", default="")

    async def scenario():
        var.set("signed-by-alice")
        here = threading.get_ident()
        return here, await in_pool(lambda: (threading.get_ident(), var.get()))

    here, (there, seen) = asyncio.run(scenario())
    assert there != here and seen == "signed-by-alice"
