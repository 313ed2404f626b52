"""Tests of cluster/security: TLS on every port and the throwaway certificate authority."""
