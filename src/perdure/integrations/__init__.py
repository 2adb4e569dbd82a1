"""Integrations of perdure with frameworks: Pydantic AI, FastAPI and Django.

Each lives in its own module and needs its own extra (``perdure[pydantic-ai]``,
``perdure[fastapi]``, ``perdure[django]``); importing this package imports none
of them.
"""

from __future__ import annotations
