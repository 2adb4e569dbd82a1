-- Named queries on the streams a run writes.

-- name: stream_read
-- Stream values after position %(after)s, in order, with the run's status.
SELECT seq, value, closed,
       (SELECT status FROM {schema}.runs WHERE id = %(run_id)s) AS run_status
FROM {schema}.streams
WHERE run_id = %(run_id)s AND key = %(key)s AND seq > %(after)s
ORDER BY seq
LIMIT 1000;
