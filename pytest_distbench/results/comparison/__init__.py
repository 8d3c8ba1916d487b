"""Two results documents judged against each other (verdict) and the gate that does it inside a
pytest session (gate)."""
