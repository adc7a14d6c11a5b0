"""Shared test configuration: where the golden corpus lives."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent
CORPUS = Path(os.environ.get("RMQGATE_CORPUS", ROOT.parent / "shared" / "corpus"))


@pytest.fixture(scope="session")
def corpus() -> Path:
    if not CORPUS.is_dir():
        pytest.fail(f"golden corpus not found at {CORPUS} (set RMQGATE_CORPUS)")
    return CORPUS


def corpus_pcaps() -> list[Path]:
    return sorted(CORPUS.glob("pcap*/*.pcap"))
