"""The worker: its loop, the runs it holds in memory, their store calls (off the event loop,
grouped in commits), the lease, recovery, and what it runs on its own (schedules, triggers,
retention)."""
