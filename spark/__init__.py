"""PySpark job that replays captured RocketMQ traffic at scale."""
