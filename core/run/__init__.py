"""Starting and watching processes: the runner, sandbox, limits, SSH hosts, evidence seals."""
