-- perdure schema, version 8: the trace context a run was started in.
--
-- When the program that starts a run traces with OpenTelemetry, app.start
-- stores the propagation headers of the span current at that moment (W3C
-- `traceparent`, and `tracestate` when there is one) as a small JSON object.
-- Workers that trace make the span of each execution of the run a child of
-- it, so one trace shows the request that started the run and every step the
-- run executed, on whichever workers. NULL when the starter traced nothing.
-- The column is in no index and is read only with the run's row at a claim.
ALTER TABLE runs ADD COLUMN trace_context jsonb;
