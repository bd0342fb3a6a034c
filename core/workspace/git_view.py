"""git, run by portside only to look: the user's repository (:func:`git_repo`) and a workspace's
private one (:func:`private_repo`, :func:`own_git_dir`), with every setting that would make git
run a program turned off."""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import subprocess
from pathlib import Path

from .confine import file_kind, read_at, unlink_at, write_at
from .names import WorkspaceError

__all__ = ["git_repo", "own_git_dir", "private_repo", "run_git"]


def _git_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    # Never take locks or rewrite the index of the user's repo just to look at it.
    env.update(GIT_OPTIONAL_LOCKS="0", GIT_TERMINAL_PROMPT="0", LC_ALL="C")
    return env


#: Settings that make git run a program, off on every call portside makes (command-line config
#: outranks every file's): none of a repository's hooks, monitors, pagers, helpers or transports
#: ever runs on portside's behalf. Filters and textconv need a driver defined in a config: the
#: workspace's config is put back to :data:`_WORKSPACE_GIT_CONFIG` before each call instead.
_GIT_SAFE = (
    "-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null", "-c", "core.pager=cat",
    "-c", "credential.helper=", "-c", "protocol.allow=never", "-c", "core.askPass=",
    "-c", "commit.gpgsign=false", "-c", "core.untrackedCache=false", "--no-pager",
)
#: The whole config of a workspace's private repository (what ``git init`` writes). A run in
#: the tree can rewrite .git/config (an fsmonitor, a filter, an include); portside's calls
#: there read this instead.
_WORKSPACE_GIT_CONFIG = (
    b"[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n"
    b"\tlogallrefupdates = true\n"
)


def run_git(cwd: Path | str, *args: str, check: bool = True, stdin: bytes | None = None
            ) -> subprocess.CompletedProcess[bytes]:
    cmd = ["git", *_GIT_SAFE, "-C", str(cwd), *args]
    try:
        proc = subprocess.run(cmd, env=_git_env(), capture_output=True, timeout=300, input=stdin)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise WorkspaceError(f"git {' '.join(args)} failed: {exc}") from None
    if check and proc.returncode != 0:
        msg = proc.stderr.decode("utf-8", "replace").strip()
        raise WorkspaceError(f"git {' '.join(args)} failed: {msg}")
    return proc


def own_git_dir(tree: Path) -> list[str]:
    """The arguments that make git use the workspace's own repository and nothing a run made
    of it: ``.git`` must still be a directory (not a gitfile or a link to the run's own repo),
    its config is put back to portside's and a ``commondir`` (another repo's config) removed.
    Explicit ``--git-dir``, so a ``.git`` the run made in a subfolder is never discovered."""
    git_dir = tree / ".git"
    try:
        st = os.lstat(git_dir)
    except OSError as exc:
        raise WorkspaceError(f"the workspace's {git_dir} is gone ({exc.strerror}): its "
                             "changes cannot be listed through git") from None
    if not stat.S_ISDIR(st.st_mode):
        raise WorkspaceError(f"the workspace's {git_dir} was replaced by a {file_kind(st.st_mode)}"
                             " (a run made it): portside does not follow it")
    root = str(tree)
    try:
        config = read_at(root, [".git", "config"], ".git/config", None)
    except WorkspaceError:
        config = None  # a link or a special file: replaced below
    if config != _WORKSPACE_GIT_CONFIG:
        write_at(root, [".git", "config"], ".git/config", _WORKSPACE_GIT_CONFIG, 0o644)
    for extra in ("commondir", "config.worktree"):
        with contextlib.suppress(WorkspaceError):
            unlink_at(root, [".git", extra], f".git/{extra}")
    return [f"--git-dir={git_dir}", f"--work-tree={tree}"]


def git_repo(project: Path) -> tuple[Path, str, str] | None:
    """(toplevel, prefix, HEAD commit) when ``project`` belongs to a git repo with a commit
    and has tracked files; None otherwise (then a plain copy is made)."""
    try:
        top = run_git(project, "rev-parse", "--show-toplevel", check=False)
        head = run_git(project, "rev-parse", "--verify", "-q", "HEAD^{commit}", check=False)
    except WorkspaceError:
        return None
    if top.returncode or head.returncode:
        return None
    toplevel = Path(os.path.realpath(top.stdout.decode().strip()))
    prefix = os.path.relpath(project, toplevel)
    if prefix.startswith(".."):
        return None
    tracked = run_git(project, "ls-files", "-z", "--cached", check=False)
    if tracked.returncode or not tracked.stdout:
        return None  # e.g. an untracked folder inside a home-directory dotfiles repo
    return toplevel, "" if prefix == "." else prefix, head.stdout.decode().strip()


def private_repo(tree: Path, toplevel: Path, prefix: str, files: list[str]) -> None:
    """A fresh git repository in ``tree`` whose index holds the copied files: git's view of
    the workspace (ignored run outputs, ``git diff``) matches the user's, and nothing in it
    points at the user's .git (no shared config, objects, hooks or worktree registration)."""
    run_git(tree, "init", "-q")
    (tree / ".git" / "config").write_bytes(_WORKSPACE_GIT_CONFIG)  # no template's settings
    # The ignore rules above the project and the repo's own exclude file still apply.
    parts = prefix.split("/") if prefix else []
    for i in range(len(parts)):
        src = toplevel.joinpath(*parts[:i], ".gitignore")
        if src.is_file() and not src.is_symlink():
            dst = tree.joinpath(*parts[:i], ".gitignore")
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)
    proc = run_git(toplevel, "rev-parse", "--git-path", "info/exclude", check=False)
    exclude = Path(toplevel, proc.stdout.decode("utf-8", "surrogateescape").strip())
    if proc.returncode == 0 and exclude.is_file():
        (tree / ".git" / "info").mkdir(parents=True, exist_ok=True)
        shutil.copyfile(exclude, tree / ".git" / "info" / "exclude")
    names = [f"{prefix}/{f}" if prefix else f for f in files]
    if names:
        run_git(tree, "add", "-f", "--pathspec-from-file=-", "--pathspec-file-nul",
             stdin="\0".join(names).encode("utf-8", "surrogateescape"))
    # A commit, so HEAD exists (scripts that log `git rev-parse HEAD`; `git diff HEAD`).
    run_git(tree, "-c", "user.name=portside", "-c", "user.email=portside@localhost",
         "-c", "commit.gpgsign=false", "commit", "-q", "--no-verify", "--allow-empty",
         "-m", "portside: the project as the user sees it", check=False)
