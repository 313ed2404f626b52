"""Value types every cluster package may import: role, configs, limits, the cluster's route.

They import only the store, common/ and cluster/security's
settings types.
"""
