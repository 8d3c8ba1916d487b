"""What is kept and shown: statistics, units, environment, storage, verdicts, gate, tables,
reports."""
