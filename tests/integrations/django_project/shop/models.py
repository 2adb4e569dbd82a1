"""An order, paid by a workflow."""

from __future__ import annotations

from django.db import models


class Order(models.Model):
    """An order: created by a view, paid by the ``pay`` workflow."""

    item = models.CharField(max_length=100)
    paid = models.BooleanField(default=False)
    payments = models.IntegerField(default=0)

    class Meta:
        app_label = "shop"
