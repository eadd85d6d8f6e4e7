-- The one-time setup of a fleet's database, as a PostgreSQL superuser
-- (docs/fleet.md):
--
--   sudo -u postgres psql -v ON_ERROR_STOP=1 -v db=patchbot -v coordinator=patchbot \
--        -f deploy/postgresql/setup.sql
--   sudo -u postgres psql -c '\password patchbot'
--
-- It makes the coordinator's login role, which owns the database and so
-- the schema (patchbot watch migrates it at start and grants the workers
-- what they need), and patchbot_worker, the group of the workers' login
-- roles (deploy/postgresql/worker.sql adds one). Nobody else may connect.

CREATE ROLE :"coordinator" LOGIN;
CREATE ROLE patchbot_worker NOLOGIN;
CREATE DATABASE :"db" OWNER :"coordinator";
REVOKE ALL ON DATABASE :"db" FROM PUBLIC;
GRANT CONNECT, TEMPORARY ON DATABASE :"db" TO :"coordinator";
GRANT CONNECT ON DATABASE :"db" TO patchbot_worker;
