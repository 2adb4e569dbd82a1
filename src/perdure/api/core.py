"""The App's core: where the database is, its pool, its statements and its definitions.

Every feature module (starting, reading, managing, messaging, queues,
schedules, retention) is a set of coroutines over one ``Core``. They run
on the core's ``Portal`` loop, where the pool lives.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import os
import threading
import uuid
from typing import Protocol, TypeVar

from perdure.api.notices import Notices
from perdure.api.portal import Portal
from perdure.api.queue_settings import QueueDef
from perdure.api.registry import Registry
from perdure.api.schedule_def import ScheduleDef
from perdure.clock import Clock
from perdure.engine import arguments
from perdure.errors import ConfigurationError, RunNotFound
from perdure.store import caller, connect
from perdure.store import migrate as migrations
from perdure.store.codec import PLAIN, Payloads
from perdure.store.connect import direct_url_from_env
from perdure.store.statement import Statement
from perdure.store.statements import Statements, validate_schema
from perdure.store.store import AsyncStore
from perdure.types import Run

log = logging.getLogger("perdure")
T = TypeVar("T")


class HasCore(Protocol):
    """What the derived sync and async forms need of their object: its core."""

    _core: Core


class Core:
    """Connection portal, store, statements and registry of one App."""

    def __init__(
        self,
        owner: HasCore,
        url: str | None,
        schema: str,
        clock: Clock,
        auto_migrate: bool,
        max_payload_bytes: int,
        pool_size: int,
        direct_url: str | None = None,
        payloads: Payloads = PLAIN,
    ) -> None:
        """A core for ``owner`` (the App); nothing connects until first used.

        ``payloads`` is the codec pipeline every payload passes through.
        """
        self.owner = owner
        self.url_given = url
        self.direct_url_given = direct_url
        self.schema = validate_schema(schema)
        self.clock = clock
        self.auto_migrate = auto_migrate
        self.max_payload_bytes = max_payload_bytes
        self.pool_size = pool_size
        self.registry = Registry()
        #: Queues and schedules declared in code, recorded when a worker starts.
        self.queues: dict[str, QueueDef] = {}
        self.schedules: list[ScheduleDef] = []
        self.payloads = payloads
        self.statements = Statements(self.schema, self.clock, payloads)
        self.portal = Portal()
        self.store: AsyncStore | None = None
        #: Wakes get_event / read_stream waiters (api/notices.py); made on first wait.
        self.notices_listener: Notices | None = None
        self.store_lock: asyncio.Lock | None = None
        self.schema_ready = False
        self.lock = threading.Lock()

    def configure(self, url: str | None, schema: str | None, direct_url: str | None = None) -> None:
        """Point at another database or schema; only before first use."""
        if self.store is not None or self.schema_ready:
            raise ConfigurationError("configure() must be called before the App is used")
        if url is not None:
            if not isinstance(url, str):
                raise ConfigurationError(f"url must be a PostgreSQL URL string, not {url!r}")
            self.url_given = url
        if direct_url is not None:
            if not isinstance(direct_url, str):
                raise ConfigurationError(
                    f"direct_url must be a PostgreSQL URL string, not {direct_url!r}"
                )
            self.direct_url_given = direct_url
        if schema is not None:
            self.schema = validate_schema(schema)
            self.statements = Statements(self.schema, self.clock, self.payloads)

    @property
    def url(self) -> str:
        """The database URL, resolved (and the embedded server started) if needed."""
        with self.lock:
            if self.url_given is None:
                self.url_given = os.environ.get("PERDURE_DATABASE_URL") or _embedded_url()
            return self.url_given

    @property
    def direct_url(self) -> str | None:
        """The direct (unpooled) URL, when the main URL goes through a pooler."""
        return direct_url_from_env(self.direct_url_given)

    @property
    def session_url(self) -> str:
        """The URL for migrations and session work: the direct URL, else the main one."""
        return connect.session_url(self.url, self.direct_url)

    def ensure_schema(self, migrate: bool = True) -> None:
        """Make sure the schema is current, once: migrate it, or only check it.

        It is migrated when ``migrate`` (a write, a worker, an explicit
        ``App.ensure_schema``) and ``auto_migrate`` are both true; else it is
        only checked, and SchemaError says what is missing. A read never
        migrates, so a misspelt schema is reported, not created.
        """
        if self.schema_ready:
            return
        url = self.session_url
        with self.lock:
            if self.schema_ready:
                return
            if migrate and self.auto_migrate:
                migrations.migrate(url, self.schema)
            else:
                caller.check_current(url, self.schema)
            self.schema_ready = True

    async def ready(self, migrate: bool = True) -> None:
        """``ensure_schema`` without blocking the loop."""
        if not self.schema_ready:
            await asyncio.to_thread(self.ensure_schema, migrate)

    async def get_store(self, migrate: bool = True) -> AsyncStore:
        """The App's pool, opened on first use (on the portal loop only).

        Opening it readies the schema (see ``ensure_schema``): pass
        ``migrate=False`` for a read.
        """
        if self.store is not None:
            return self.store
        # One asyncio lock (made on first use, on the portal loop) keeps
        # concurrent first calls from opening two pools.
        if self.store_lock is None:
            self.store_lock = asyncio.Lock()
        async with self.store_lock:
            if self.store is None:
                await self.ready(migrate)
                store = AsyncStore(
                    self.url,
                    self.statements,
                    min_size=1,
                    max_size=self.pool_size,
                    name="perdure-app",
                    direct_url=self.direct_url,
                )
                await store.open()
                self.store = store
                # Close the pool at exit if the program did not: its tasks
                # would otherwise be destroyed pending, with a warning each.
                atexit.register(self.close)
        return self.store

    async def run(self, stmt: Statement[T]) -> T:
        """Run one statement on the pool; the App's first write may migrate the schema."""
        return await (await self.get_store()).execute(stmt)

    async def read(self, stmt: Statement[T]) -> T:
        """Run one read-only statement on the pool; a read never migrates the schema."""
        return await (await self.get_store(migrate=False)).execute(stmt)

    async def find(self, ref: str) -> Run:
        """The run with id or key ``ref``, live first, then archived; RunNotFound if none."""
        # Text PostgreSQL cannot store (or longer than any key) names no run.
        if not isinstance(ref, str) or not ref or not arguments.storable(ref):
            raise RunNotFound(repr(ref))
        if len(ref) > arguments.MAX_KEY_LENGTH:
            raise RunNotFound(f"{ref[:60]}... ({len(ref)} characters)")
        try:
            run_id: str | None = str(uuid.UUID(ref))
        except ValueError:
            run_id = None
        for by_id, by_key in (
            (self.statements.runs.get, self.statements.runs.get_by_key),
            (self.statements.runs.get_archived, self.statements.runs.get_by_key_archived),
        ):
            run = None if run_id is None else await self.read(by_id(run_id))
            if run is None:
                run = await self.read(by_key(ref))
            if run is not None:
                return run
        raise RunNotFound(ref)

    def notices(self) -> Notices:
        """The App's listener for runs' publications (on the portal loop only)."""
        if self.notices_listener is None:
            self.notices_listener = Notices(self.session_url, self.statements.messages_channel)
        return self.notices_listener

    def close(self) -> None:
        """Close the pool, the message listener and the portal's loop."""
        atexit.unregister(self.close)
        if self.portal.started:
            with contextlib.suppress(RuntimeError):  # called from the portal's own loop
                self.portal.call(close(self))
        self.portal.close()


def _embedded_url() -> str:
    from perdure.store import embedded

    server = embedded.ensure_server()
    log.info("using embedded PostgreSQL: %s", embedded.removal_hint(server.data_dir))
    return server.url


async def close(core: Core) -> None:
    """Close the App's connections and its private loop.

    ``async with perdure.App(...) as app:`` closes it through ``close_async``,
    which does not block the caller's loop.
    """
    # On the portal's loop: the listener and the pool; the forms then end the loop.
    atexit.unregister(core.close)
    store, core.store = core.store, None
    notices, core.notices_listener = core.notices_listener, None
    if notices is not None:
        await notices.close()
    if store is not None:
        await store.close()


async def ensure_schema(core: Core) -> None:
    """Migrate the schema (or check it is current when auto_migrate is off), once."""
    await core.ready()
