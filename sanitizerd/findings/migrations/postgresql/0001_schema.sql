-- The SQLite store's tables and indexes (sanitizerd/findings/store.py), in PostgreSQL's types, plus the daemon that
-- opened each session: many hosts' daemons share one database, and each closes only the sessions it left open.
CREATE TABLE sessions (
    id BIGSERIAL PRIMARY KEY,
    job TEXT NOT NULL,
    started DOUBLE PRECISION NOT NULL,
    ended DOUBLE PRECISION,
    info BYTEA NOT NULL,
    uid INTEGER NOT NULL DEFAULT -1,
    daemon TEXT NOT NULL DEFAULT ''
);
CREATE INDEX sessions_job ON sessions (job);
CREATE INDEX sessions_uid ON sessions (uid, id);
CREATE INDEX sessions_open ON sessions (daemon) WHERE ended IS NULL;

CREATE TABLE findings (
    id BIGSERIAL PRIMARY KEY,
    job TEXT NOT NULL,
    session BIGINT NOT NULL,
    time DOUBLE PRECISION NOT NULL,
    kind TEXT NOT NULL,
    body BYTEA NOT NULL,
    uid INTEGER NOT NULL DEFAULT -1
);
CREATE INDEX findings_job ON findings (job);
CREATE INDEX findings_session ON findings (session);
CREATE INDEX findings_uid ON findings (uid, id);
