"""The route registry's values on the wire (proto/controller.proto TopicRoute, GroupRoute,
ClusterRoute), both ways: the controller's servicer and the node's controller link
(cluster/assembly/controller_link.py) use the same mapping. A bad topic in a message is a
ConfigError (the TopicConfig's own checks)."""
from __future__ import annotations

from typing import Iterable

from proto import controller_pb2 as pb
from store.json_config import TopicConfig

from cluster.config.cluster_route import ClusterRoute, GroupRoute


def topic_to_pb(t: TopicConfig) -> pb.TopicRoute:
    return pb.TopicRoute(topic_name=t.topic_name, read_queue_nums=t.read_queue_nums,
                         write_queue_nums=t.write_queue_nums, perm=t.perm, order=t.order,
                         topic_filter_type=t.topic_filter_type, topic_sys_flag=t.topic_sys_flag,
                         attributes=dict(t.attributes))


def topic_from_pb(t: pb.TopicRoute) -> TopicConfig:
    return TopicConfig(topic_name=t.topic_name, read_queue_nums=t.read_queue_nums,
                       write_queue_nums=t.write_queue_nums, perm=t.perm, order=t.order,
                       topic_filter_type=t.topic_filter_type or "SINGLE_TAG",
                       topic_sys_flag=t.topic_sys_flag, attributes=dict(t.attributes))


def topics_from_pb(topics: Iterable[pb.TopicRoute]) -> list[TopicConfig]:
    return [topic_from_pb(t) for t in topics]


def route_to_pb(route: ClusterRoute) -> pb.ClusterRoute:
    return pb.ClusterRoute(version=route.version, groups=[
        pb.GroupRoute(broker_name=g.broker_name, master_id=g.master_id,
                      master_address=g.master_address, note=g.note, endpoints=list(g.endpoints),
                      registered=g.registered,
                      topics=[topic_to_pb(t) for t in g.topics.values()],
                      topics_version=g.topics_version)
        for g in route.groups])


def route_from_pb(route: pb.ClusterRoute) -> ClusterRoute:
    return ClusterRoute(route.version, tuple(
        GroupRoute(g.broker_name, master_id=g.master_id, master_address=g.master_address,
                   note=g.note, endpoints=tuple(g.endpoints), registered=g.registered,
                   topics=topics_from_pb(g.topics), topics_version=g.topics_version)
        for g in route.groups))
