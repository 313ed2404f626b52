"""A topic created in several broker groups (mqadmin updateTopic -c): the one code path of
`python -m cluster topic create NAME --groups all|a,b` and of the drills' `--groups N` set-up.

The controller's route names the groups and each group's master; every named group is checked
first (the controller knows it, it has a master now, it lacks the topic), so a refusal creates
the topic in no group. Each group's topic is created through that group's master.

Created is not yet routed: each master registers its table with the controller at its next
heartbeat, and every node takes the new route at the heartbeat after (its QueryRoute answers
from the route it holds; an official client keeps the route it got for 30 s). `not_routed`
says what is still missing from the controller's view (the topic in each group's registration,
the route version each live node reports holding), and `wait_routed` polls it.
"""
from __future__ import annotations

import time
from typing import Callable

import grpc

from proto import admin_pb2 as pb

from cluster.client.admin_client import AdminClient
from cluster.client.controller_client import ControllerClient
from cluster.config.cluster_route import ClusterRoute
from cluster.controller.route_wire import route_from_pb
from cluster.security.tls import ClientTls


# a node not heard from for this long is down or cut off: it takes the route when it is back
LIVE_NODE_MS = 10_000


class GroupTopicError(Exception):
    """A topic create across groups refused before anything was created (a group without a
    master, a group that has the topic already); the message names the groups."""


class GroupCallError(Exception):
    """A group's master refused a call or did not answer: `group` names it, `error` is gRPC's."""

    def __init__(self, group: str, error: grpc.RpcError) -> None:
        super().__init__(f"{group}: {error}")
        self.group = group
        self.error = error


def parse_groups(spec: str, known: list[str]) -> list[str]:
    """`all`, or a comma list of broker names (broker-a) or their suffixes (a); ValueError
    naming an unknown one."""
    if spec.strip() == "all":
        if not known:
            raise ValueError("the controller knows no broker group yet")
        return known
    out = []
    for raw in (part.strip() for part in spec.split(",")):
        name = raw if raw in known else f"broker-{raw}"
        if not raw or name not in known:
            raise ValueError(f"--groups: no broker group {raw!r} (the controller knows "
                             f"{', '.join(known) or 'none'})")
        if name not in out:
            out.append(name)
    return out


def cluster_route(controller_address: str, token: str, tls: ClientTls | None = None,
                  timeout: float = 10.0) -> ClusterRoute:
    """The controller's route now (grpc.RpcError when it does not answer)."""
    with ControllerClient(controller_address, token, timeout=timeout, tls=tls) as client:
        return route_from_pb(client.groups().route)


def has_topic(client: AdminClient, name: str) -> bool:
    try:
        return bool(client.list_topics(topic=name).topics)
    except grpc.RpcError as e:
        if e.code() is grpc.StatusCode.NOT_FOUND:
            return False
        raise


def masters(route: ClusterRoute, names: list[str], token: str, tls: ClientTls | None = None,
            operator: str = "", timeout: float = 30.0) -> dict[str, AdminClient]:
    """An AdminClient on each named group's master now (the caller closes them);
    GroupTopicError when one of the groups has no master."""
    masterless = [n for n in names if route.group(n) is None or not route.group(n).has_master]
    if masterless:
        notes = "; ".join(g.note for g in (route.group(n) for n in masterless) if g and g.note)
        raise GroupTopicError(f"{', '.join(masterless)} has no master now"
                              + (f" ({notes})" if notes else ""))
    return {n: AdminClient(route.group(n).master_address, token, timeout=timeout,  # type: ignore[union-attr]
                           operator=operator, tls=tls) for n in names}


def create_in_groups(route: ClusterRoute, names: list[str], token: str, topic: str,
                     fields: dict, tls: ClientTls | None = None, operator: str = ""
                     ) -> list[tuple[str, pb.TopicInfo]]:
    """Create `topic` (AdminClient.create_topic's `fields`) in every group of `names`, in
    order; GroupTopicError when a check refuses (nothing created), GroupCallError when a
    master refuses a call (the groups before it have the topic)."""
    clients = masters(route, names, token, tls, operator)
    n = ""
    try:
        for n, client in clients.items():  # every group is checked before any is changed
            if has_topic(client, topic):
                raise GroupTopicError(f"{topic} exists in {n} already (topic update "
                                      f"--node @master:{n} changes it)")
        created = []
        for n, client in clients.items():
            created.append((n, client.create_topic(topic, **fields)))
        return created
    except grpc.RpcError as e:
        raise GroupCallError(n, e) from e
    finally:
        for client in clients.values():
            client.close()


def not_routed(view: pb.GroupsView, topic: str, names: list[str]) -> list[str]:
    """What keeps `topic` from being routed in every group of `names` by every live node, from
    the controller's view (GetGroups): groups whose registration lacks it, then nodes holding
    another route version than the controller's. [] when nothing does."""
    route = route_from_pb(view.route)
    holding = {g.broker_name for g, _ in route.holding(topic)}
    missing = [f"{n} has not registered it yet" for n in names if n not in holding]
    return missing or nodes_behind(view)


def nodes_behind(view: pb.GroupsView) -> list[str]:
    """The live nodes (heard from in the last LIVE_NODE_MS) that hold another route version
    than the controller's, each as "<node id> holds route <version>, not <current>"."""
    current = view.route.version
    return [f"{node.node_id} holds route {node.route_version or 'none'}, not {current}"
            for g in view.groups for node in g.nodes
            if 0 <= node.last_heartbeat_age_ms <= LIVE_NODE_MS
            and node.route_version != current]


def wait_routed(controller_address: str, token: str, topic: str, names: list[str],
                timeout_s: float, tls: ClientTls | None = None,
                sleep: Callable[[float], None] = time.sleep,
                monotonic: Callable[[], float] = time.monotonic) -> list[str]:
    """Poll the controller until `not_routed` is empty or `timeout_s` passed; what is still
    missing ([] routed). A controller that does not answer counts as missing, not an error."""
    deadline = monotonic() + timeout_s
    with ControllerClient(controller_address, token, timeout=5, tls=tls) as client:
        while True:
            try:
                missing = not_routed(client.groups(), topic, names)
            except grpc.RpcError as e:
                missing = [f"the controller did not answer: {e.code().name}"]
            if not missing or monotonic() >= deadline:
                return missing
            sleep(0.2)
