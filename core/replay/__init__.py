"""Playing a recorded session back with its original timing."""
