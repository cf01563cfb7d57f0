"""Revisions of the ledger tables, oldest first (a package so that it ships with rl_assets)."""
