"""The event log's vocabulary and what is folded from it: events, bus, ledger, costs, criteria, outcomes."""
