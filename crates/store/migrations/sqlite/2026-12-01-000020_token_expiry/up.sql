-- Optional token expiry: from expires_at (unix seconds) on, a token is refused like an
-- unknown one. NULL: the token does not expire.
ALTER TABLE api_tokens ADD COLUMN expires_at BIGINT;
