"""The agent's working copy of the user's project, and the risk marks on its edits."""
