"""Compatibility suite: runs against rmqgate by default, or any name server via --namesrv."""
