"""Step, event and stream names: printable text, a control character refused."""

from __future__ import annotations

import sys
import unicodedata

import pytest

from perdure.engine import arguments
from perdure.errors import ConfigurationError


def test_a_name_is_refused_exactly_when_it_holds_a_control_character() -> None:
    # Every code point a name may hold, but for the surrogates (PostgreSQL cannot store them).
    for point in range(sys.maxunicode + 1):
        if 0xD800 <= point <= 0xDFFF or point == 0:
            continue
        name = f"step{chr(point)}"
        if unicodedata.category(chr(point)) == "Cc":
            with pytest.raises(ConfigurationError, match="control character"):
                arguments.label("a step name", name)
        else:
            assert arguments.label("a step name", name) == name
