"""Reading the runs page's filter form from a query string, and writing it back."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from urllib.parse import urlencode

from starlette.datastructures import QueryParams

from perdure.api.filters import RunFilter
from perdure.types import RunStatus

#: The time ranges the form offers ("" is all time).
RANGES: dict[str, timedelta] = {
    "15m": timedelta(minutes=15),
    "1h": timedelta(hours=1),
    "6h": timedelta(hours=6),
    "24h": timedelta(hours=24),
    "7d": timedelta(days=7),
    "30d": timedelta(days=30),
}
PAGE_SIZES = (25, 50, 100, 200)
#: Every field of the form, in the order of the query string it writes.
FIELDS = (
    "range",
    "from",
    "to",
    "status",
    "workflow",
    "version",
    "queue",
    "worker",
    "key",
    "tag",
    "limit",
)


@dataclass
class RunsQuery:
    """The runs page's filters as typed (``form``) and as the library takes them.

    ``cursor`` is the opaque ``next_cursor`` of the page before (``?after=``).
    """

    form: dict[str, str]
    filter: RunFilter
    cursor: str | None
    limit: int
    errors: list[str] = field(default_factory=list)

    def link(self, **changes: str | None) -> str:
        """The query string of this form with ``changes`` (None drops a field), no cursor."""
        values = {**self.form, **changes}
        return "?" + urlencode({k: v for k, v in values.items() if v and k in FIELDS})

    def next_link(self, cursor: str) -> str:
        """The query string of the page that starts after ``cursor`` (a RunPage's next_cursor)."""
        return self.link() + "&" + urlencode({"after": cursor})

    def newest(self, problem: str) -> None:
        """Drop the cursor (back to the newest runs), saying why in ``errors``."""
        self.cursor = None
        self.errors.append(problem)

    @property
    def narrowed(self) -> bool:
        """Whether a narrowing filter is set (see App.count_runs): RunFilter.narrowing."""
        return self.filter.narrowing

    @property
    def filtered(self) -> bool:
        """Whether any filter other than the page size is set."""
        return any(self.form.get(k) for k in FIELDS if k != "limit")


def parse(params: QueryParams, now: datetime) -> RunsQuery:
    """The filters in ``params``; a value that cannot be read is named in ``errors``."""
    form = {name: (params.get(name) or "").strip() for name in FIELDS}
    errors: list[str] = []
    since = before = None
    if form["range"] in RANGES:
        since = now - RANGES[form["range"]]
    elif form["range"]:
        errors.append(f"unknown time range {form['range']!r}: ignored")
        form["range"] = ""
    for name in ("from", "to"):
        if form[name]:
            try:
                moment = datetime.fromisoformat(form[name])
            except ValueError:
                errors.append(f"{name}: {form[name]!r} is not a date and time: ignored")
                form[name] = ""
                continue
            moment = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
            since, before = (moment, before) if name == "from" else (since, moment)
    status = form["status"] or None
    if status is not None and status not in {s.value for s in RunStatus}:
        errors.append(f"unknown status {status!r}: ignored")
        form["status"] = ""
        status = None
    version = None
    if form["version"]:
        if _count(form["version"]) and 0 < int(form["version"]) < 2**31:
            version = int(form["version"])
        else:
            errors.append(f"version must be a positive number, not {form['version']!r}: ignored")
            form["version"] = ""
    tags = _tag(form, errors)
    limit = int(form["limit"]) if _count(form["limit"]) else 50
    if limit not in PAGE_SIZES:
        limit = 50
    filter = RunFilter(
        status=status,
        workflow=form["workflow"] or None,
        version=version,
        queue=form["queue"] or None,
        worker=form["worker"] or None,
        key_prefix=form["key"] or None,
        since=since,
        before=before,
        tags=tags,
    )
    return RunsQuery(form, filter, params.get("after") or None, limit, errors)


def _tag(form: dict[str, str], errors: list[str]) -> dict[str, str] | None:
    """The form's ``tag`` (NAME=VALUE) as the tags a RunFilter takes."""
    if not form["tag"]:
        return None
    name, equals, value = form["tag"].partition("=")
    if equals and name.strip():
        return {name.strip(): value.strip()}
    errors.append(f"tag must be NAME=VALUE, not {form['tag']!r}: ignored")
    form["tag"] = ""
    return None


def _count(text: str) -> bool:
    """Whether ``text`` is a count in ASCII digits (``str.isdigit`` also takes ``'²'``)."""
    return text.isascii() and text.isdigit() and len(text) <= 10
