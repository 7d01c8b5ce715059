"""Pure decisions, no I/O and no clock: slot grants, quota admission, the lease's judgement,
which waiting runs leave memory, where a retry resumes, rate grants."""
