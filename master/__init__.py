"""Master role: write path, replication servicer, schedule and transaction services."""
