"""Where two runs diverge: trace mode runs and their comparison."""
