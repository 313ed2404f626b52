"""Apache RocketMQ protocols."""
