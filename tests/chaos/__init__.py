"""The chaos suite: many workers on one real PostgreSQL, killed, stopped and cut off."""
