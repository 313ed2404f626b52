"""Security of a cluster: TLS settings and channels, and the throwaway certificate authority."""
