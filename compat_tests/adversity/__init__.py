"""Adversity suite: rmqgate under hostile and pathological load (``make adversity``, not ``make test``)."""
