"""Security: membership proofs, TLS, ACL and request signatures.
"""
