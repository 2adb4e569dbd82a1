"""Workflow applications that the tests run in worker subprocesses."""
