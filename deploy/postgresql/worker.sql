-- A worker's login role, as a PostgreSQL superuser (docs/fleet.md):
--
--   sudo -u postgres psql -v ON_ERROR_STOP=1 -v worker=kvm-7 -f deploy/postgresql/worker.sql
--   sudo -u postgres psql -c '\password "kvm-7"'
--
-- The role's name is the worker's name (patchbot worker --name kvm-7, or
-- no --name at all): the functions a worker acts through (claim, renew,
-- stage, end, recover, its row of the workers table, its base rounds)
-- check that it acts in its own name, its login role's, on a job it holds.
-- Give the role nothing else: no table grant, no other group. Retiring the worker
-- is DROP ROLE "kvm-7" once it has stopped (docs/fleet.md).

CREATE ROLE :"worker" LOGIN IN ROLE patchbot_worker;
