-- 0007: outcomes.user_banned, the outcome event's field of that name: the
-- user (the account) was banned, a locked account, when the report came.
-- banned now means the client IP alone. Rows archived before this column
-- read false, and their banned is true when the IP or the user was banned.
--
-- A constant default on a partitioned table is a catalog change: no row is
-- rewritten.
ALTER TABLE outcomes ADD COLUMN user_banned boolean NOT NULL DEFAULT false;
