"""Postgres persistence: schema migrations, the embedded default server, and the repository layer."""
