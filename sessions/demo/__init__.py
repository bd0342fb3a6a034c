"""The demo's files as package data (`portside demo` reads them here, installed or not):
`project/` the GPU-written original, `agent.jsonl` the recorded agent, `criteria.toml`."""
