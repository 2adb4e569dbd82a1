"""A fuzz pass over the OpenAPI document against a real ``perdure api``: every 5xx is a bug.

Schemathesis draws requests from the document, valid and invalid ones, for
every operation; each answer must be below 500. The number of examples is
bounded so that the pass stays well under a minute.
"""

from __future__ import annotations

import json
import os
from typing import Any

import hypothesis
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given
from hypothesis import strategies as st
from schemathesis.generation import GenerationMode

import perdure
from http_api.conftest import Served
from perdure.dashboard.api.openapi import DOCUMENT

#: Examples drawn; PERDURE_FUZZ_EXAMPLES raises it for a deeper pass by hand.
EXAMPLES = int(os.environ.get("PERDURE_FUZZ_EXAMPLES", "200"))
#: The key of the run that pinned cases name.
RUN_KEY = "fuzz-run"


def _schema() -> Any:
    document = json.loads(json.dumps(DOCUMENT))
    return schemathesis.openapi.from_dict(document)


def _pinned(case: Any) -> Any:
    """A valid case that names a run, a workflow and a signal that exist, to go deeper.

    Not for a cancel (cancelled, the run would refuse the rest) nor a stream
    (the unfinished run's stream stays open until the client's timeout).
    """
    skipped = case.path.endswith("/cancel") or "/streams/" in case.path
    if "ref" in (case.path_parameters or {}) and not skipped:
        case.path_parameters["ref"] = RUN_KEY
    if isinstance(case.body, dict):
        if "workflow" in case.body:
            case.body["workflow"] = "echo"
        if isinstance(case.body.get("name"), str):
            case.body["name"] = "reply"
    return case


def _answer_at_once(case: Any) -> None:
    """A long poll drawn without a timeout would wait 30 s on a run that exists: 0 instead
    (in the query of a result or an event, in the body of an update)."""
    if case.path.endswith("/result") or "/events/" in case.path:
        query = case.query if isinstance(case.query, dict) else {}
        query.setdefault("timeout", 0)
        case.query = query
    if case.path.endswith("/updates") and isinstance(case.body, dict):
        # A valid timeout (a number, 0 to 300 s) would be waited for: 0 instead.
        # An invalid one is still sent, and refused at once.
        timeout = case.body.get("timeout")
        number = isinstance(timeout, int | float) and not isinstance(timeout, bool)
        if timeout is None or (number and 0 <= timeout <= 300):
            case.body["timeout"] = 0


def test_no_request_drawn_from_the_document_gets_a_5xx(
    served: Served, defined: perdure.App
) -> None:
    defined.start("chat", {}, key=RUN_KEY)
    schema = _schema()
    # Long polls answer at once: a valid timeout is 0 (invalid ones are still drawn).
    valid = schema.as_strategy(GenerationMode.POSITIVE, query={"timeout": 0})
    cases = st.one_of(
        valid.map(_pinned),
        valid,
        schema.as_strategy(GenerationMode.NEGATIVE),
    )
    base = f"{served.url}/api/v1"
    session = requests.Session()
    crashes: list[str] = []
    seen: set[tuple[str, int]] = set()

    @hypothesis.settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        derandomize=True,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=cases)
    def one(case: Any) -> None:
        _answer_at_once(case)
        try:
            # An event stream of an unfinished run never ends: it is read for 5 s at most.
            answer = case.call(base_url=base, session=session, timeout=5)
        except requests.exceptions.ReadTimeout:
            crashes.append(f"no answer in 5 s: {case.as_curl_command()}")
            return
        except requests.exceptions.InvalidHeader:
            return  # a header the client itself cannot send
        seen.add((case.operation.label, answer.status_code))
        if answer.status_code >= 500:
            crashes.append(f"{answer.status_code}: {case.as_curl_command()}")

    one()
    assert crashes == []
    # The pass went past the refusals: runs started, steered and signalled.
    assert ("POST /runs", 201) in seen, sorted(seen)
    assert any("{ref}" in op and status < 300 for op, status in seen), sorted(seen)
