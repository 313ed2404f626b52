"""Security: peer membership, TLS and the throwaway CA, access control of the client API (ACL)
and request signatures."""
