-- `readers` maps login names to uids: a role granted SELECT on it (as the tables' policies need, since they read
-- it as the querying role) would learn every other user's login name and uid. Each role sees its own rows only,
-- which is all the policies of 0002 ask of it; the daemons' role owns the table and reads every row.
ALTER TABLE readers ENABLE ROW LEVEL SECURITY;
CREATE POLICY own_readers ON readers FOR SELECT USING (role = current_user);
