"""Durable stores: checksummed artifacts on disk and ledgers in Postgres.

Each store is keyed by identity (a content hash or a partition key), so
writing the same unit twice is harmless and reading it back is verified.
"""
