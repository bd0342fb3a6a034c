"""Claude Code: live under review, its transcripts imported, their trees verified."""
