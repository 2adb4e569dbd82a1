"""The Django app that brings ``manage.py perdure_worker``."""

from __future__ import annotations

from django.apps import AppConfig


class PerdureConfig(AppConfig):  # type: ignore[misc]  # Django is untyped
    """perdure's Django app (label ``perdure``)."""

    name = "perdure.integrations.django"
    label = "perdure"
    verbose_name = "perdure"
