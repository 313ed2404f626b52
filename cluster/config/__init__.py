"""Value types every cluster package may import: role, configs, limits.

They import only the store, common/ and cluster/security's
settings types. The cluster's route (cluster_route) is one of them.
"""
