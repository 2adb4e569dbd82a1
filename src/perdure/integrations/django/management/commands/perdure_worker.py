"""``manage.py perdure_worker``: run a worker of the App ``settings.PERDURE_APP`` names."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from perdure.integrations.django import get_app


class Command(BaseCommand):  # type: ignore[misc]  # Django is untyped
    """Run a perdure worker until SIGINT or SIGTERM (a second one stops at once)."""

    help = "Run a perdure worker for the App that settings.PERDURE_APP names."

    def add_arguments(self, parser: CommandParser) -> None:
        """The worker's options, as ``perdure worker`` has them."""
        parser.add_argument("--concurrency", type=int, default=None)
        parser.add_argument("--queues", default=None, help="comma-separated queue names")
        parser.add_argument("--lease-seconds", type=float, default=None)
        parser.add_argument("--poll-seconds", type=float, default=None)

    def handle(self, *args: Any, **options: Any) -> None:
        """Build the worker from the options given and run it."""
        worker_options: dict[str, Any] = {}
        for name in ("concurrency", "lease_seconds", "poll_seconds"):
            if options[name] is not None:
                worker_options[name] = options[name]
        if options["queues"]:
            worker_options["queues"] = [q.strip() for q in options["queues"].split(",")]
        app = get_app()
        self.stdout.write("perdure worker started")
        worker = app.run_worker(**worker_options)
        self.stdout.write(f"perdure worker stopped: {worker.counts}")
