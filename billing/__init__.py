"""Billing: rate cards, the per-job ledger of hours held, and its exports."""
