"""The chaos suite of issue 7: many workers on one real PostgreSQL, killed, stopped and cut off."""
