"""What user code touches: App, Context, RunHandle. No SQL here."""

from __future__ import annotations
