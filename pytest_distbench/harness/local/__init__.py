"""Local mode: the controller starts worlds of rank processes and drives them."""
