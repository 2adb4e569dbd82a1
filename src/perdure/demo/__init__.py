"""``perdure demo``: durable workflows surviving a worker killed mid-flight.

``perdure.demo.workflows`` defines the demo's workflows on a module-level
App; ``perdure.demo.runner`` starts worker processes, triggers runs, kills
one worker with SIGKILL and checks from the database that nothing was lost and
no completed step ran twice.
"""

from __future__ import annotations
