"""A/B mode: a live baseline measured in the same session, in interleaved rounds."""
