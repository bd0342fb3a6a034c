"""Running one session: the engine, the agent's view of it, the review gate, verification, resume."""
