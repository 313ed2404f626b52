"""The ACL's decisions (cluster/security/acl.py): deny by default, RocketMQ's permission rules,
retry/DLQ topics checked as their group, refusals naming user, permission and resource."""
from __future__ import annotations

from hypothesis import given, strategies as st

from cluster.security.acl import Account, Acl, Kind, Need, Perm, parse_perm

import pytest
from common.config_values import ConfigError

APP = Account("app1-key", "app1-secret", topic_perms={"orders": Perm.PUB, "audit": Perm.SUB,
                                                      "both": Perm.PUB | Perm.SUB,
                                                      "closed": Perm.DENY},
              group_perms={"billing": Perm.SUB})
OPEN = Account("open-key", "open-secret", default_topic_perm=Perm.PUB | Perm.SUB,
               default_group_perm=Perm.SUB, topic_perms={"secret": Perm.DENY})
ADMIN = Account("admin-key", "admin-secret", admin=True)
ACL = Acl({a.access_key: a for a in (APP, OPEN, ADMIN)})


def test_explicit_permissions():
    assert ACL.decide("app1-key", [Need.topic("orders", Perm.PUB)]) is None
    refusal = ACL.decide("app1-key", [Need.topic("orders", Perm.SUB)])
    assert not refusal.unauthorized
    assert refusal.message == "user 'app1-key' lacks SUB on topic 'orders'"
    assert ACL.decide("app1-key", [Need.topic("audit", Perm.SUB)]) is None
    assert ACL.decide("app1-key", [Need.topic("both", Perm.PUB), Need.topic("both", Perm.SUB)]) \
        is None
    assert ACL.decide("app1-key", [Need.topic("closed", Perm.PUB)]).message == \
        "user 'app1-key' lacks PUB on topic 'closed'"
    # the first missing one is named
    assert "group 'other'" in ACL.decide("app1-key", [Need.group("billing"), Need.group("other"),
                                                      Need.topic("x", Perm.PUB)]).message


def test_pub_or_sub_is_met_by_either():
    either = [Need(Kind.TOPIC, "orders", Perm.PUB, either=True)]
    assert ACL.decide("app1-key", either) is None
    audit = [Need(Kind.TOPIC, "audit", Perm.PUB, either=True)]
    assert ACL.decide("app1-key", audit) is None
    refusal = ACL.decide("app1-key", [Need(Kind.TOPIC, "closed", Perm.PUB, either=True)])
    assert refusal.message == "user 'app1-key' lacks PUB or SUB on topic 'closed'"


def test_defaults_and_explicit_deny():
    assert ACL.decide("open-key", [Need.topic("anything", Perm.PUB)]) is None
    assert ACL.decide("open-key", [Need.group("any-group")]) is None
    assert ACL.decide("open-key", [Need.topic("secret", Perm.SUB)]) is not None
    assert ACL.decide("open-key", [Need.group("g", Perm.PUB)]) is not None  # defaultGroupPerm SUB


def test_retry_and_dlq_topics_are_their_group():
    assert Need.topic("%RETRY%billing", Perm.SUB) == Need.group("billing")
    assert Need.topic("%DLQ%billing", Perm.SUB) == Need.group("billing")
    assert Need.topic("%RETRY%", Perm.SUB).kind is Kind.TOPIC  # no group named: a plain name
    assert ACL.decide("app1-key", [Need.topic("%RETRY%billing", Perm.SUB)]) is None
    assert ACL.decide("app1-key", [Need.topic("%DLQ%other", Perm.SUB)]).message == \
        "user 'app1-key' lacks SUB on group 'other'"


def test_unknown_user_is_unauthorized_and_admin_holds_everything():
    refusal = ACL.decide("nobody", [])
    assert refusal.unauthorized and "nobody" in refusal.message
    assert ACL.decide("admin-key", [Need.topic("t", Perm.PUB), Need.group("g", Perm.PUB)]) is None
    assert ACL.is_admin("admin-key") and not ACL.is_admin("app1-key") and not ACL.is_admin("x")


def test_permission_words():
    assert parse_perm("PUB|SUB") == parse_perm("sub|pub") == Perm.PUB | Perm.SUB
    assert parse_perm(" DENY ") == Perm.DENY
    with pytest.raises(ConfigError, match="DENY, PUB, SUB or PUB|SUB"):
        parse_perm("PUBLISH")
    with pytest.raises(ConfigError, match="longer than 6"):
        Account("short", "long-enough-secret")
    with pytest.raises(ConfigError, match="spaces"):
        Account("has space", "long-enough-secret")


names = st.text(st.characters(codec="ascii", exclude_characters="%"), min_size=1, max_size=12)
perms = st.sampled_from([Perm.DENY, Perm.PUB, Perm.SUB, Perm.PUB | Perm.SUB])


@given(granted_topics=st.dictionaries(names, perms, max_size=6),
       granted_groups=st.dictionaries(names, perms, max_size=6),
       kind=st.sampled_from([Kind.TOPIC, Kind.GROUP]), name=names,
       wanted=st.sampled_from([Perm.PUB, Perm.SUB]), either=st.booleans())
def test_deny_by_default_for_everything_not_granted(granted_topics, granted_groups, kind, name,
                                                    wanted, either):
    """A user without defaults gets exactly what its entries grant: a resource without an entry,
    or an entry without the permission, is refused as FORBIDDEN naming all three."""
    user = Account("user-key", "user-secret", topic_perms=granted_topics,
                   group_perms=granted_groups)
    acl = Acl({"user-key": user})
    need = Need(kind, name, wanted, either=either)
    owned = (granted_topics if kind is Kind.TOPIC else granted_groups).get(name, Perm.DENY)
    allowed = owned != Perm.DENY if either else bool(owned & wanted)
    refusal = acl.decide("user-key", [need])
    if allowed:
        assert refusal is None
    else:
        assert refusal is not None and not refusal.unauthorized
        assert f"'user-key' lacks {need.words} on {kind.value} {name!r}" in refusal.message
    # nobody else is anybody
    assert acl.decide("other-key", [need]).unauthorized
