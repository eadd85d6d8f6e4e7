-- A worker's login role, as a PostgreSQL superuser (docs/fleet.md):
--
--   sudo -u postgres psql -v ON_ERROR_STOP=1 -v worker=kvm-7 -f deploy/postgresql/worker.sql
--   sudo -u postgres psql -c '\password "kvm-7"'
--
-- The role's name is the worker's name (patchbot worker --name kvm-7, or
-- no --name at all): row-level security lets a worker hold jobs, and keep
-- its row of the workers table, only in its own name. Retiring the worker
-- is DROP ROLE "kvm-7" once it has stopped (docs/fleet.md).

CREATE ROLE :"worker" LOGIN IN ROLE patchbot_worker;
