"""Text logs: `systemctl status` output, and the catch-all server log (any stamped text, read as
it comes)."""
