"""Security: access control of the client API (ACL), request signatures, TLS and peer membership."""
