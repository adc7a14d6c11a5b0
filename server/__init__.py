"""Name server and broker: asyncio connections over the sans-I/O codec, one processor per request family."""
