-- perdure schema, version 16: wake idle workers for runs due soon, not only now.
--
-- An idle worker sleeps until a notification, its timer for the next task it
-- knows of, or its fallback poll (WorkerOptions.idle_poll_seconds, at most
-- 60 s). A run's task written to become due later by someone else (a
-- delayed start, a retry's backoff or a sleep parked by a busy worker) used
-- to be found only at that poll. Now a run's task due within the next 60 s
-- notifies at once: each idle worker looks again and sets its timer. Tasks
-- due later than that are found by a fallback poll before they are due.
-- Steps that wait out a head start do not notify: the worker that scheduled
-- them runs them, and wakes the others itself when it cannot run them all
-- at once (queue_wake).

DROP TRIGGER tasks_notify_insert ON tasks;
DROP TRIGGER tasks_notify_update ON tasks;

CREATE TRIGGER tasks_notify_insert AFTER INSERT ON tasks
    FOR EACH ROW WHEN (NEW.status = 'ready' AND (NEW.available_at <= now()
        OR (NEW.kind = 'run' AND NEW.available_at <= now() + interval '60 seconds')))
    EXECUTE FUNCTION notify_task_ready();

CREATE TRIGGER tasks_notify_update AFTER UPDATE OF status, available_at ON tasks
    FOR EACH ROW WHEN (NEW.status = 'ready' AND (NEW.available_at <= now()
        OR (NEW.kind = 'run' AND NEW.available_at <= now() + interval '60 seconds')))
    EXECUTE FUNCTION notify_task_ready();
