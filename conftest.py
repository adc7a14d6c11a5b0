"""Shared test configuration: where the golden corpus lives; hypothesis settings.

Property tests have no deadline (a stalled CI machine must not fail an example for its timing) and,
under CI, a fixed seed: every run tries the same examples, so a failure there reproduces. Local
runs keep exploring new examples.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("dev", deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True)
settings.register_profile("ci", settings.get_profile("dev"), derandomize=True)
settings.load_profile("ci" if os.environ.get("CI") else "dev")

ROOT = Path(__file__).resolve().parent
CORPUS = Path(os.environ.get("RMQGATE_CORPUS", ROOT.parent / "shared" / "corpus"))


@pytest.fixture(scope="session")
def corpus() -> Path:
    if not CORPUS.is_dir():
        pytest.fail(f"golden corpus not found at {CORPUS} (set RMQGATE_CORPUS)")
    return CORPUS


def corpus_pcaps() -> list[Path]:
    return sorted(CORPUS.glob("pcap*/*.pcap"))
