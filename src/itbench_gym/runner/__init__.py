"""Batch evaluation: jobs, executors (processes, Ray), the SQLite results store and the leaderboard."""
