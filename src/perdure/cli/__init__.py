"""The ``perdure`` command line: one module per noun."""

from __future__ import annotations
