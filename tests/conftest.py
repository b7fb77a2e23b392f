"""Shared pytest configuration. Area-specific fixtures live in tests/fixtures_*.py modules."""

from __future__ import annotations

import os

# Tests never reach the Hub or any network: the Hub client talks to the local test server only.
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("HF_HUB_DISABLE_IMPLICIT_TOKEN", "1")
