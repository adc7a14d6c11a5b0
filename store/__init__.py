"""RocketMQ-compatible message store (CommitLog, ConsumeQueue, IndexFile) and LMDB metadata.

Knows nothing of the network; the broker's processors use the small interface in ``store.api``.
"""
