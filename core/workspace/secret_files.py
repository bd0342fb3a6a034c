"""Which project files look like secrets: left out of the agent's workspace and the reference
copy unless the user opts in, and never synced from an attached session's tree."""

from __future__ import annotations

import fnmatch

__all__ = ["SECRET_DIRS", "SECRET_FILES", "SECRET_PATHS", "SECRET_TEMPLATES", "is_secret"]

#: Files that look like secrets (matched on the file name, case-insensitively), left out of
#: the agent's workspace and the reference copy unless the user opts in (``--with-secrets``):
#: what is copied reaches the agent, the model and the log, and the runs.
SECRET_FILES = (
    ".env", ".env.*", "*.env", ".envrc", ".netrc", "_netrc", ".pgpass", ".pypirc", ".npmrc",
    ".git-credentials", ".htpasswd", ".dockercfg", "credentials", "credentials.json",
    "*credentials*.json", "client_secret*.json", "service-account*.json", "*service_account*.json",
    "kaggle.json", "secrets.*", ".secrets", "*.secret", "*.pem", "*.key", "*.p12", "*.pfx",
    "*.jks", "*.keystore", "*.ppk", "*.tfvars", "id_rsa", "id_dsa", "id_ecdsa", "id_ed25519",
    ".s3cfg", ".vault-token", ".boto", ".databrickscfg", "hf_token.txt", "*wandb*key*",
)
#: Paths (their last components) that are credentials although the name alone is not.
SECRET_PATHS = ("huggingface/token",)
#: Templates that hold no secret by convention, copied even though they match above.
SECRET_TEMPLATES = (".env.example", ".env.sample", ".env.template", ".env.dist")
#: Directories of credentials, left out whole.
SECRET_DIRS = frozenset({".ssh", ".aws", ".gnupg", ".azure", ".kube", ".docker"})


def is_secret(rel: str) -> bool:
    """Does this project path look like a secret (see :data:`SECRET_FILES`)?"""
    parts = rel.split("/")
    if any(p in SECRET_DIRS for p in parts[:-1]):
        return True
    name = parts[-1].lower()
    if name in SECRET_TEMPLATES:
        return False
    low = "/" + rel.lower()
    if any(low.endswith("/" + p) or low.endswith("/." + p) for p in SECRET_PATHS):
        return True  # .huggingface/token, .cache/huggingface/token
    return any(fnmatch.fnmatchcase(name, pat) for pat in SECRET_FILES)
