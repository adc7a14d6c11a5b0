"""Fixtures shared by the tests of rmqgate.server."""

from __future__ import annotations

from pathlib import Path

import pytest

from rmqgate.server.testing import LocalBroker


@pytest.fixture
def Broker(tmp_path: Path):
    """Factory of test brokers, each on its own real store in tmp_path."""
    counter = iter(range(1000))

    def make(**overrides: object) -> LocalBroker:
        return LocalBroker(str(tmp_path / f"store{next(counter)}"), **overrides)

    return make
