-- Who reads what, enforced by the database for every role but the daemons' own (the tables' owner) and superusers:
-- a user connects as their own role (peer or certificate authentication: the role is their login name), and sees
-- the rows of the uids the daemons recorded under that name. Daemons fill `readers` as sessions open.
CREATE TABLE readers (
    role TEXT NOT NULL,
    uid INTEGER NOT NULL,
    PRIMARY KEY (role, uid)
);
ALTER TABLE sessions ENABLE ROW LEVEL SECURITY;
ALTER TABLE findings ENABLE ROW LEVEL SECURITY;
CREATE POLICY own_sessions ON sessions FOR SELECT
    USING (uid IN (SELECT r.uid FROM readers r WHERE r.role = current_user));
CREATE POLICY own_findings ON findings FOR SELECT
    USING (uid IN (SELECT r.uid FROM readers r WHERE r.role = current_user));
