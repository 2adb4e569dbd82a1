-- perdure schema, version 16: wake idle workers for work due soon, not only now.
--
-- An idle worker sleeps until a notification, its timer for the next task it
-- knows of, or its fallback poll (WorkerOptions.idle_poll_seconds, at most
-- 60 s). A task written to become due later (a graph's or a gather's steps
-- after their head start, a retry's backoff, a short sleep) by another
-- worker used to be found only at that poll. Now a task due within the next
-- 60 s notifies at once: each idle worker looks again and sets its timer.
-- Tasks due later than that are found by a fallback poll before they are due.

DROP TRIGGER tasks_notify_insert ON tasks;
DROP TRIGGER tasks_notify_update ON tasks;

CREATE TRIGGER tasks_notify_insert AFTER INSERT ON tasks
    FOR EACH ROW WHEN (NEW.status = 'ready' AND NEW.available_at <= now() + interval '60 seconds')
    EXECUTE FUNCTION notify_task_ready();

CREATE TRIGGER tasks_notify_update AFTER UPDATE OF status, available_at ON tasks
    FOR EACH ROW WHEN (NEW.status = 'ready' AND NEW.available_at <= now() + interval '60 seconds')
    EXECUTE FUNCTION notify_task_ready();
