"""SIGKILL during a chain of continuations: the run and its successor change places in
one statement, so no snapshot ever shows neither or both of them live."""

from __future__ import annotations

from typing import Any

import psycopg

import perdure
from helpers import wait_until

TARGET = "apps.continue_app:app"
SHORT_LEASE = ["--lease-seconds", "2", "--poll-seconds", "0.2"]
#: One statement, so one snapshot: the runs not yet continued, the holders of the key.
SAMPLE = """
SELECT count(*) FILTER (WHERE status <> 'continued'),
       count(*) FILTER (WHERE key = 'entity-1'),
       count(*) FILTER (WHERE status = 'continued'),
       bool_or(status = 'completed')
FROM runs WHERE workflow = 'entity'
"""


def test_a_killed_worker_leaves_exactly_one_live_run_holding_the_key(
    app: perdure.App, db: psycopg.Connection[Any], spawn_worker: Any
) -> None:
    victim = spawn_worker(TARGET, *SHORT_LEASE)
    wait_until(lambda: any(w.name == "entity" for w in app.workflows()), 30, what="registered")
    first = app.start("entity", {"n": 0, "every": 3, "until": 60}, key="entity-1")
    samples = 0
    killed = False
    rescuer = None
    while True:
        row = db.execute(SAMPLE).fetchone()
        assert row is not None
        not_continued, keyed, continued, done = row
        samples += 1
        assert not_continued == 1, f"{not_continued} runs of the chain not continued"
        assert keyed == 1, f"{keyed} runs hold the key"
        if not killed and continued >= 4:
            victim.kill()  # SIGKILL, mid-chain
            killed = True
            rescuer = spawn_worker(TARGET, *SHORT_LEASE)
        if done:
            break
        assert samples < 200_000, "the chain did not finish"
    assert killed and rescuer is not None
    assert first.result(timeout=30) == 60
    # The chain is whole: each run points at the next, which points back.
    links = dict(db.execute("SELECT id, continued_to FROM runs WHERE workflow = 'entity'"))
    backs = dict(db.execute("SELECT id, continued_from FROM runs WHERE workflow = 'entity'"))
    assert sum(1 for v in links.values() if v is None) == 1
    assert all(backs[after] == before for before, after in links.items() if after is not None)
    assert len(links) == 21  # 60 steps, 3 a run, and the last run finds n at 60
