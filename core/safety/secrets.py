"""What counts as a secret, and keeping secrets out of runs and out of the record.

Three rules, one module:

- ``scrub_env``: variables that look like credentials never reach a run (API keys, tokens,
  passwords, private keys, personal access tokens, URLs with a password in them, values with
  a known token prefix).
- ``redact_command``: a command stored in the log (``HF_TOKEN=… python train.py``) keeps its
  shape but not the secret: ``HF_TOKEN=*** python train.py``; a URL's password likewise.
- ``Redactor``: the values scrubbed from the environment (and those assigned inline in the
  command) are replaced by ``***`` wherever they appear in a run's output before it is stored.
- ``mask_text`` / ``mask_event``: whatever the source, token-shaped strings (API keys of the
  big providers, GitHub/GitLab/Slack/AWS/Hugging Face tokens, Slack webhooks, a URL's password
  or key-like user, private key blocks) are masked in every text of every event before it is
  stored or shown: the bus calls ``mask_event`` on each event it publishes.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import msgspec
import msgspec.inspect

MASK = "***"

# Name words (split on "_") that mark a credential. KEY alone is a word (KAGGLE_KEY,
# SSH_PRIVATE_KEY, AWS_ACCESS_KEY_ID) so that KEYBOARD or MONKEY_PATCH are not caught.
_WORDS = frozenset({
    "KEY", "APIKEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASS", "PASSPHRASE", "PAT",
    "CREDENTIAL", "CREDENTIALS", "AUTH", "COOKIE", "SESSIONID", "PWD", "DSN",
})
# Anywhere in a name: a webhook URL is the credential itself (SLACK_WEBHOOK_URL).
_INFIXES = ("WEBHOOK",)
# Words a credential name may end with when not split (PGPASSWORD, OPENAIKEY, GHTOKEN).
_SUFFIXES = ("PASSWORD", "PASSWD", "TOKEN", "SECRET", "APIKEY", "SECRETKEY", "ACCESSKEY")
# Whole names that are capabilities rather than values: the user's ssh agent and git askpass.
_NAMES = frozenset({"SSH_AUTH_SOCK", "GIT_ASKPASS", "SSH_ASKPASS", "NETRC"})
# Not secrets although a word matches: the shell's working directory variables (MYSQL_PWD is).
_ALLOWED = frozenset({"PWD", "OLDPWD", "TOKENIZERS_PARALLELISM"})

# scheme://user:password@host: the password part.
_URL_PASSWORD = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*:)(?P<pw>[^@\s/]+)(?=@)")
# Token formats that are secrets whatever the variable is called.
_TOKEN_VALUE = re.compile(
    r"^(?:sk-[A-Za-z0-9_-]{16,}|sk-ant-[A-Za-z0-9_-]{16,}|gh[pousr]_[A-Za-z0-9]{20,}"
    r"|github_pat_[A-Za-z0-9_]{20,}|hf_[A-Za-z0-9]{20,}|AKIA[0-9A-Z]{16}|xox[abpr]-[A-Za-z0-9-]{10,}"
    r"|glpat-[A-Za-z0-9_-]{20,}|-----BEGIN [A-Z ]*PRIVATE KEY-----.*)$",
    re.DOTALL,
)
# NAME=value in a shell command: bare, 'single' or "double" quoted values.
_ASSIGN = re.compile(
    r"""(?P<pre>(?:^|(?<=[\s;&|(`]))(?:export\s+)?)(?P<name>[A-Za-z_][A-Za-z0-9_]*)="""
    r"""(?P<value>'[^']*'|"(?:[^"\\]|\\.)*"|[^\s;&|)`]*)"""
)
# Shorter values are not redacted from output: "1" or "true" would blank half a log.
MIN_REDACT_LEN = 6


def is_secret_name(name: str) -> bool:
    upper = name.upper()
    if upper in _ALLOWED:
        return False
    if upper in _NAMES:
        return True
    words = [w for w in upper.split("_") if w]
    return (any(w in _WORDS for w in words) or any(w.endswith(_SUFFIXES) for w in words)
            or any(i in upper for i in _INFIXES))


def is_secret_value(value: str) -> bool:
    """A value that is a secret by its form: a URL with a password or a key for a user, a known
    token format, a token anywhere in it (``https://ghp_…@github.com/…``)."""
    return bool(_URL_PASSWORD.search(value) or _TOKEN_VALUE.match(value.strip())
                or mask_text(value) != value)


def is_secret(name: str, value: str) -> bool:
    return is_secret_name(name) or is_secret_value(value)


def scrub_env(env: Mapping[str, str]) -> dict[str, str]:
    """The environment without its secrets: what a training run may see."""
    return {k: v for k, v in env.items() if not is_secret(k, v)}


def scrubbed_values(env: Mapping[str, str]) -> list[str]:
    """The secret values ``scrub_env`` drops (for redaction from output)."""
    out = []
    for k, v in env.items():
        if is_secret(k, v):
            out.append(v)
            m = _URL_PASSWORD.search(v)
            if m:
                out.append(m.group("pw"))
    return out


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


def inline_values(command: str) -> list[str]:
    """The values of secret-looking ``NAME=value`` assignments in a shell command."""
    out = []
    for m in _ASSIGN.finditer(command):
        value = _unquote(m.group("value"))
        if value and is_secret(m.group("name"), value):
            out.append(value)
    return out


def redact_command(command: str) -> str:
    """The command as the log keeps it: secret assignments and URL passwords masked."""

    def mask(m: re.Match[str]) -> str:
        value = _unquote(m.group("value"))
        if value and is_secret(m.group("name"), value):
            return f"{m.group('pre')}{m.group('name')}={MASK}"
        return m.group(0)

    return _URL_PASSWORD.sub(lambda m: m.group("head") + MASK, _ASSIGN.sub(mask, command))


class Redactor:
    """Replaces known secret values in text. One compiled alternation, longest first, so the
    cost per line does not grow with the number of secrets."""

    def __init__(self, values: Iterable[str]) -> None:
        uniq = sorted({v for v in values if len(v) >= MIN_REDACT_LEN}, key=len, reverse=True)
        self._rx = re.compile("|".join(map(re.escape, uniq))) if uniq else None

    def __bool__(self) -> bool:
        return self._rx is not None

    def __call__(self, text: str) -> str:
        if self._rx is None:
            return text
        return self._rx.sub(MASK, text)


def redactor_for(env: Mapping[str, str], command: str) -> Redactor:
    """What a run's output must not show: the environment's secrets and the command's."""
    return Redactor([*scrubbed_values(env), *inline_values(command)])


# --- token-shaped text, wherever it appears ---------------------------------------------------

# One flat alternation whose every branch starts with a literal character, so the regex
# engine skips ahead to the few characters that can begin one (s g x h A - :) instead of
# trying every branch at every position (25 us for 200 characters; see tests/bench/bench_mask.py).
# Branches without a group are secret whole; for "pw", "user" and "hook" only that group is.
_TOKENS = re.compile(
    r"sk-ant-[A-Za-z0-9_-]{16,}"
    r"|sk-(?:proj-)?(?=[A-Za-z_-]*[0-9])[A-Za-z0-9_-]{20,}"
    r"|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|glpat-[A-Za-z0-9_-]{20,}"
    r"|xox[abposr]-[A-Za-z0-9-]{10,}|hf_[A-Za-z0-9]{20,}|A(?:KIA|SIA)[0-9A-Z]{16}"
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY-----|\Z)"
    r"|hooks\.slack\.com/(?:services|workflows|triggers)/(?P<hook>[A-Za-z0-9/_-]+)"
    # scheme://user:password@ and scheme://key@ (a DSN: Sentry's is 32 hex); git@ stays.
    r"|://(?:[^/\s:@]*:(?P<pw>[^@\s/]+)|(?P<user>[A-Za-z0-9_-]{16,}))@"
)


def _mask_match(m: re.Match[str]) -> str:
    for group in ("pw", "user", "hook"):
        if m.group(group) is not None:
            start, end = m.span(group)
            whole = m.group(0)
            base = m.start()
            return whole[: start - base] + MASK + whole[end - base:]
    return MASK


def mask_text(text: str) -> str:
    """``text`` with every token-shaped string replaced by ``***``; ordinary text (training
    output, paths, hashes, ``git@host`` URLs) is returned as is, the same object."""
    return _TOKENS.sub(_mask_match, text) if _TOKENS.search(text) else text


def _walk(value: Any) -> Any:
    """``value`` masked all the way down; the same object when nothing in it changed."""
    if isinstance(value, str):
        return mask_text(value)
    if isinstance(value, list):
        new = [_walk(v) for v in value]
        return value if all(a is b for a, b in zip(new, value, strict=True)) else new
    if isinstance(value, dict):
        out = {k: _walk(v) for k, v in value.items()}
        return value if all(out[k] is v for k, v in value.items()) else out
    return value


def _mask_value(value: Any) -> Any:
    """One search over the whole value first (run output's lines joined, a record's JSON):
    almost every value holds no token, and walking it costs more than the search."""
    if isinstance(value, str):
        return mask_text(value)
    try:
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            hit = _TOKENS.search("\n".join(value)) is not None
        else:
            hit = _TOKENS_BYTES.search(msgspec.json.encode(value)) is not None
    except (TypeError, msgspec.EncodeError):
        hit = True  # not JSON (a test's object): walked
    return _walk(value) if hit else value


_TOKENS_BYTES = re.compile(_TOKENS.pattern.encode())
# Fields that are identities, never free text: masking one would break what refers to it.
_KEEP = frozenset({"session_id"})
_TEXT_TYPES = (msgspec.inspect.StrType, msgspec.inspect.ListType, msgspec.inspect.DictType,
               msgspec.inspect.AnyType, msgspec.inspect.UnionType)
_FIELDS: dict[type, tuple[str, ...]] = {}


def _text_fields(cls: type) -> tuple[str, ...]:
    """The fields of an event class that can hold free text: not ids (``*_id``), not numbers,
    flags or Literal choices, not the risk marks computed from the text itself."""
    names = _FIELDS.get(cls)
    if names is None:
        info = msgspec.inspect.type_info(cls)
        names = tuple(f.name for f in info.fields  # type: ignore[attr-defined]
                      if isinstance(f.type, _TEXT_TYPES) and f.name not in _KEEP
                      and f.name != "risks" and not f.name.endswith("_id"))
        _FIELDS[cls] = names
    return names


def mask_event(event: Any) -> bool:
    """Mask token-shaped strings in every text field of an event, in place (it is what the log
    keeps and every subscriber shows). Returns whether anything was masked."""
    changed = False
    for name in _text_fields(type(event)):
        old = getattr(event, name)
        if old is None:
            continue
        new = _mask_value(old)
        if new is not old:
            setattr(event, name, new)
            changed = True
    return changed


def map_text(value: Any, fn: Callable[[str], str]) -> Any:
    """``value`` (text, or dicts and lists of it) with ``fn`` applied to every string in it."""
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, dict):
        return {k: map_text(v, fn) for k, v in value.items()}
    if isinstance(value, list):
        return [map_text(v, fn) for v in value]
    return value


def replace_secrets(value: Any, secrets: Iterable[str]) -> Any:
    """``value`` (text, or dicts and lists of it) with each of ``secrets`` as ``[redacted]``:
    what an agent adapter does to its CLI's words before they become events."""
    def replace(text: str) -> str:
        for secret in secrets:
            text = text.replace(secret, "[redacted]")
        return text

    return map_text(value, replace)


#: An agent event's free-text fields (and a tool call's ``input``), where its CLI's words go.
AGENT_TEXT_FIELDS = ("text", "content", "detail", "title", "input")


def redact_agent_event(event: Any, secrets: Iterable[str]) -> Any:
    """``event`` (an agent adapter's, before it is published) with each of ``secrets`` as
    ``[redacted]`` in its free text, in place; returned."""
    secrets = list(secrets)
    for name in AGENT_TEXT_FIELDS:
        value = getattr(event, name, None)
        if isinstance(value, str | dict):
            setattr(event, name, replace_secrets(value, secrets))
    return event
