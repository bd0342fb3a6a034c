"""The portability scan (`portside scan`): what in a project will not move to a TPU as it is,
found by reading its files (never importing them); and the one-at-a-time ``ast`` parse that
the scan and the workspace's risk marks share."""
