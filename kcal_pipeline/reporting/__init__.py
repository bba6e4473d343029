"""Stage 6, reporting: summary tables and the HTML report."""
