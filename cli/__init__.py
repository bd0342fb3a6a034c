"""The `portside` command line: click commands, no Textual until a command opens a screen."""
