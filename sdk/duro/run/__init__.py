"""One run's execution: its context and replay, cancelling delivered into its code, children,
signals, patch markers, and the durable helpers that reach it."""
