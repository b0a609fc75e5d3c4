-- Maintenance: leader election and recovery of dead workers' jobs (same names on PostgreSQL).

-- name: try_lead
-- Take or renew the lease on a maintenance role; a row comes back only if we now hold it.
INSERT INTO maintenance_leases (name, holder, expires_at) VALUES (:name, :holder, :now + :ttl)
ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
WHERE maintenance_leases.holder = excluded.holder OR maintenance_leases.expires_at < :now
RETURNING holder;

-- name: resign
-- Give up a maintenance role (clean shutdown), so another worker takes it at once.
DELETE FROM maintenance_leases WHERE name = :name AND holder = :holder;

-- name: host_workers
-- Workers registered from one host that have not said they stopped.
SELECT id, pid FROM workers WHERE hostname = :hostname AND stopped_at IS NULL;

-- name: running_of_workers
-- Running jobs held by any of these workers (:worker_ids is a JSON array).
SELECT id, attempts, max_attempts, worker_id FROM jobs INDEXED BY jobs_running
WHERE status = 'running' AND worker_id IN (SELECT value FROM json_each(:worker_ids));

-- name: mark_worker_dead
-- Close the registry row of a worker found dead at startup cleanup.
UPDATE workers SET stopped_at = :now WHERE id = :id AND stopped_at IS NULL;

-- name: release_leases_of
-- Drop every maintenance role held by a worker found dead (startup cleanup).
DELETE FROM maintenance_leases WHERE holder = :holder;
