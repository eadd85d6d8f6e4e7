-- The one-time setup of a fleet's database, as a PostgreSQL superuser
-- (docs/fleet.md):
--
--   sudo -u postgres psql -v ON_ERROR_STOP=1 -v db=patchbot -v coordinator=patchbot \
--        -f deploy/postgresql/setup.sql
--   sudo -u postgres psql -c '\password patchbot'
--
-- It makes the coordinator's login role, which owns the database and so
-- the schema (patchbot watch migrates it at start), and patchbot_worker,
-- the group of the workers' login roles (deploy/postgresql/worker.sql adds
-- one). Nobody else may connect. A worker's role gets no right on any
-- table but reading schema_version: the migration grants it the
-- functions that change the one job it holds (store/holder.go), which run
-- as the coordinator's role. So the coordinator's role must own every
-- table and function of the schema: never create them as postgres.

CREATE ROLE :"coordinator" LOGIN;
CREATE ROLE patchbot_worker NOLOGIN;
CREATE DATABASE :"db" OWNER :"coordinator";
REVOKE ALL ON DATABASE :"db" FROM PUBLIC;
GRANT CONNECT, TEMPORARY ON DATABASE :"db" TO :"coordinator";
GRANT CONNECT ON DATABASE :"db" TO patchbot_worker;
