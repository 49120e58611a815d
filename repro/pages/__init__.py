"""The page writer: documents as plain data, written as Markdown and HTML (a leaf both the
reports and the sweeps' pages import)."""
