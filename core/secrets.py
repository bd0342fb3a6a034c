"""What counts as a secret, and keeping secrets out of runs and out of the record.

Three rules, one module:

- ``scrub_env``: variables that look like credentials never reach a run (API keys, tokens,
  passwords, private keys, personal access tokens, URLs with a password in them, values with
  a known token prefix).
- ``redact_command``: a command stored in the log (``HF_TOKEN=… python train.py``) keeps its
  shape but not the secret: ``HF_TOKEN=*** python train.py``; a URL's password likewise.
- ``Redactor``: the values scrubbed from the environment (and those assigned inline in the
  command) are replaced by ``***`` wherever they appear in a run's output before it is stored.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

MASK = "***"

# Name words (split on "_") that mark a credential. KEY alone is a word (KAGGLE_KEY,
# SSH_PRIVATE_KEY, AWS_ACCESS_KEY_ID) so that KEYBOARD or MONKEY_PATCH are not caught.
_WORDS = frozenset({
    "KEY", "APIKEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASS", "PASSPHRASE", "PAT",
    "CREDENTIAL", "CREDENTIALS", "AUTH", "COOKIE", "SESSIONID",
})
# Words a credential name may end with when not split (PGPASSWORD, OPENAIKEY, GHTOKEN).
_SUFFIXES = ("PASSWORD", "PASSWD", "TOKEN", "SECRET", "APIKEY", "SECRETKEY", "ACCESSKEY")
# Whole names that are capabilities rather than values: the user's ssh agent and git askpass.
_NAMES = frozenset({"SSH_AUTH_SOCK", "GIT_ASKPASS", "SSH_ASKPASS", "NETRC"})
# Not secrets although a word matches: the shell's working directory variables.
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
    return any(w in _WORDS for w in words) or any(w.endswith(_SUFFIXES) for w in words)


def is_secret_value(value: str) -> bool:
    """A value that is a secret by its form: a URL with a password, a known token format."""
    return bool(_URL_PASSWORD.search(value) or _TOKEN_VALUE.match(value.strip()))


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
