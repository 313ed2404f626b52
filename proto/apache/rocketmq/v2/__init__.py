"""RocketMQ 5 gRPC messaging protocol (package apache.rocketmq.v2), written from the public
interface of rocketmq-python-client 5.1.2; tests/proto/test_v2_interop.py checks it field by field.

The client's own modules register the same package under the file names "definition.proto" /
"service.proto", so never import them in the same process as these modules.
"""
