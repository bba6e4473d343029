"""Reporting: summary tables and the HTML pages, written by the evaluation stage (each model's
report) and the cross_model stage (the leaderboard)."""
