"""Durable background work: a job table, runners that claim jobs under leases, and periodic
schedules run under a leader lease (docs/jobs.md)."""
