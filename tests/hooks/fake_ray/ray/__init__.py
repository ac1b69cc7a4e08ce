"""A stand-in for the `ray` package in the Ray job driver's tests (tests/test_hooks.py): only
`ray.job_submission`, whose client runs each job's entrypoint on this machine at once."""
