"""The queueing options of ``app.start``: partition key, dedup key, debounce, tags.

Checked here, before anything is written (invariant 10), and turned into the
``Queueing`` the store writes with the run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import timedelta

from perdure.engine import arguments
from perdure.errors import ConfigurationError
from perdure.store.rows import Queueing

#: At most this many tags on one run.
MAX_TAGS = 64
#: The longest tag name and tag value.
MAX_TAG_NAME = 128
MAX_TAG_VALUE = 1024


def tags_json(what: str, tags: object) -> str | None:
    """``tags`` (a dict of strings to strings, or None) as JSON text, or ConfigurationError."""
    if tags is None:
        return None
    if not isinstance(tags, dict) or len(tags) > MAX_TAGS:
        raise ConfigurationError(
            f"{what} must be a dict of at most {MAX_TAGS} str: str pairs, not {tags!r:.200}"
        )
    for name, value in tags.items():
        arguments.text(f"a tag name in {what}", name, max_length=MAX_TAG_NAME)
        arguments.text(f"the value of tag {name!r}", value, max_length=MAX_TAG_VALUE)
    return json.dumps(tags, sort_keys=True)


@dataclass(frozen=True)
class StartOptions:
    """What a start asks of its queue besides priority and delay.

    ``partition_key`` counts the run against its queue's partition limits;
    ``dedup_key`` makes it the only run of its queue with that key waiting to
    start; ``debounce`` (seconds) delays it and lets later starts with the
    same ``key`` or ``dedup_key`` replace its input until it starts; ``tags``
    are searchable attributes.
    """

    partition_key: str | None = None
    dedup_key: str | None = None
    debounce: float | timedelta | None = None
    tags: dict[str, str] | None = None

    def checked(self, key: str | None, delay: object) -> tuple[Queueing, float | None]:
        """The queueing to store and the debounce window in seconds (None: no debounce)."""
        limit = arguments.MAX_KEY_LENGTH
        partition = arguments.optional_text("partition_key", self.partition_key, max_length=limit)
        dedup = arguments.optional_text("dedup_key", self.dedup_key, max_length=limit)
        window = arguments.optional_seconds("debounce", self.debounce, positive=True)
        if window is not None:
            if key is None and dedup is None:
                raise ConfigurationError(
                    "debounce needs a key or a dedup_key: the starts to collapse are those "
                    "that share it"
                )
            if delay is not None:
                raise ConfigurationError(
                    "give delay or debounce, not both: a debounced run starts when its window ends"
                )
        return Queueing(partition, dedup, tags_json("tags", self.tags)), window
