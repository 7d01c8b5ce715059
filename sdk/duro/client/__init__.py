"""The engine and what an application calls on it: starts, runs and their handles, retries and
forks, the replay check."""
