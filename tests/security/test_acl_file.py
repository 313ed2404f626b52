"""Reading plain_acl.yml (cluster/security/acl_file.py): RocketMQ's sample reads as RocketMQ means
it; every mistake is an error naming the line and the field."""
from __future__ import annotations

import pytest

from cluster.security.acl import Need, Perm
from cluster.security.acl_file import parse_acl, read_acl_file
from common.config_values import ConfigError

# RocketMQ's distributed conf/plain_acl.yml (4.x), comments trimmed.
ROCKETMQ_SAMPLE = """\
globalWhiteRemoteAddresses:
  - 10.10.103.*
  - 192.168.0.*

accounts:
  - accessKey: RocketMQ
    secretKey: 12345678
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - topicA=DENY
      - topicB=PUB|SUB
      - topicC=SUB
    groupPerms:
      # the group should convert to retry topic
      - groupA=DENY
      - groupB=PUB|SUB
      - groupC=SUB

  - accessKey: rocketmq2
    secretKey: 12345678
    whiteRemoteAddress: 192.168.1.*
    # if it is admin, it could access all resources
    admin: true
"""


def test_rocketmqs_sample_file():
    acl = parse_acl(ROCKETMQ_SAMPLE)
    assert sorted(acl.accounts) == ["RocketMQ", "rocketmq2"]
    user = acl.accounts["RocketMQ"]
    assert user.secret_key == "12345678"  # a YAML number, meant as text
    assert acl.decide("RocketMQ", [Need.topic("topicB", Perm.PUB)]) is None
    assert acl.decide("RocketMQ", [Need.topic("topicC", Perm.SUB)]) is None
    assert acl.decide("RocketMQ", [Need.topic("topicC", Perm.PUB)]) is not None
    assert acl.decide("RocketMQ", [Need.topic("topicA", Perm.SUB)]) is not None
    assert acl.decide("RocketMQ", [Need.topic("unlisted", Perm.SUB)]) is not None
    assert acl.decide("RocketMQ", [Need.group("groupA")]) is not None
    assert acl.decide("RocketMQ", [Need.group("unlisted")]) is None  # defaultGroupPerm SUB
    assert acl.is_admin("rocketmq2")


def test_values_stay_the_text_written():
    """Secrets like 0123 or yes are text (YAML 1.1 would make them a number or a boolean)."""
    acl = parse_acl("accounts:\n  - accessKey: 0x1234567\n    secretKey: 0123456\n"
                    "  - accessKey: yes-user\n    secretKey: 1e10000\n    admin: TRUE\n"
                    "    defaultTopicPerm: ~\n")
    assert acl.accounts["0x1234567"].secret_key == "0123456"
    assert acl.accounts["yes-user"].secret_key == "1e10000" and acl.is_admin("yes-user")


def test_empty_file_has_no_users():
    assert dict(parse_acl("").accounts) == {}
    assert dict(parse_acl("accounts:\n").accounts) == {}


@pytest.mark.parametrize("text, words", [
    ("accounts: [", "not valid YAML"),
    ("- a\n- b\n", "top level must be a mapping"),
    ("acounts: []\n", "line 1: unknown field 'acounts'"),
    ("accounts: {a: 1}\n", "'accounts' must be a list"),
    ("accounts:\n  - just-a-string\n", "accounts[0] must be a mapping"),
    ("accounts:\n  - secretKey: 12345678\n", "line 2 (accounts[0]): accessKey is required"),
    ("accounts:\n  - accessKey: user-one\n    secretKey: 1234\n",
     "line 2 (accounts[0]): secretKey must be longer than 6"),
    ("accounts:\n  - accessKey: user-one\n    secretKey: 12345678\n"
     "  - accessKey: user-two\n    secretKey: 12345678\n    defaultTopicPerm: WRITE\n",
     "line 4 (accounts[1]): defaultTopicPerm: permission 'WRITE' must be DENY, PUB, SUB"),
    ("accounts:\n  - accessKey: user-one\n    secretKey: 12345678\n    topicPerms:\n"
     "      - orders\n", "topicPerms entry 'orders': want 'name=PERM'"),
    ("accounts:\n  - accessKey: user-one\n    secretKey: 12345678\n    groupPerms:\n"
     "      - g=PUBSUB\n", "groupPerms entry 'g=PUBSUB': permission 'PUBSUB'"),
    ("accounts:\n  - accessKey: user-one\n    secretKey: 12345678\n    admin: yes-please\n",
     "admin='yes-please': must be true or false"),
    ("accounts:\n  - accessKey: user-one\n    secretKey: 12345678\n    topicPerm: []\n",
     "unknown field 'topicPerm'"),
    ("accounts:\n  - accessKey: user-one\n    secretKey: 12345678\n"
     "  - accessKey: user-one\n    secretKey: 87654321\n",
     "line 4 (accounts[1]): accessKey 'user-one' appears twice"),
    ("accounts:\n  - accessKey: user-one\n    secretKey: !!python/object/apply:os.system "
     "[touch pwned]\n", "secretKey is required"),  # the base loader runs and builds nothing
])
def test_mistakes_name_line_and_field(text, words):
    with pytest.raises(ConfigError) as e:
        parse_acl(text, "acl.yml")
    assert words in str(e.value) and str(e.value).startswith("acl.yml")


def test_unreadable_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot read the ACL file"):
        read_acl_file(str(tmp_path / "missing.yml"))
