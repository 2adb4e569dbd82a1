"""The store: the only package that talks SQL to PostgreSQL."""

from __future__ import annotations
