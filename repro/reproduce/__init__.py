"""reproduce."""
