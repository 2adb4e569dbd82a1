"""Identifiers perdure mints."""

from __future__ import annotations

import secrets
import time
import uuid


def new_run_id() -> str:
    """A time-ordered UUID (version 7 layout): new runs land at the right edge of the index."""
    millis = time.time_ns() // 1_000_000
    value = (millis & ((1 << 48) - 1)) << 80 | secrets.randbits(80)
    value = (value & ~(0xF << 76)) | (0x7 << 76)
    value = (value & ~(0x3 << 62)) | (0x2 << 62)
    return str(uuid.UUID(int=value))
