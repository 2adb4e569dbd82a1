"""The engine: workers, task execution, leases and recovery. It talks to the store only."""

from __future__ import annotations
