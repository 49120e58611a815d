"""track."""
