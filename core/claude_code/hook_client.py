"""Claude Code's command hook for `portside attach` (stdlib only; run by Claude Code, never
imported by portside): posts the hook's JSON (stdin) to portside's loopback URL (argv[1], which
holds the session's token) and prints portside's answer for Claude Code to read.

Fails closed: Claude Code lets a tool run when a command hook crashes, times out or exits with
anything but 2, and an HTTP hook fails open on a refused connection. So every failure to get an
answer on PreToolUse ends here in exit 2, which blocks the tool and hands stderr to the model.
Other events (PostToolUse, Stop, SessionStart/End) pass quietly when portside is gone.
"""

import json
import sys
import urllib.request

#: Below the hook's own timeout in the settings: this client says no before Claude Code would
#: kill it (a killed hook lets the tool run).
WAIT_S = 23 * 3600


def main() -> int:
    url = sys.argv[1] if len(sys.argv) > 1 else ""
    raw = sys.stdin.buffer.read()
    try:
        event = json.loads(raw or b"{}").get("hook_event_name", "")
    except (ValueError, AttributeError):
        event = ""
    try:
        req = urllib.request.Request(url, data=raw, method="POST",
                                     headers={"content-type": "application/json"})
        with urllib.request.urlopen(req, timeout=WAIT_S) as resp:  # noqa: S310 (loopback)
            body = resp.read()
        json.loads(body or b"{}")  # an answer that is not JSON is no answer
    except Exception as exc:  # any failure: no answer
        if event in ("PreToolUse", "PermissionRequest", ""):
            sys.stderr.write(f"portside is not answering ({type(exc).__name__}: {exc}); "
                             "the tool call is blocked until its review is back\n")
            return 2
        return 0
    sys.stdout.buffer.write(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
