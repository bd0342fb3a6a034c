"""The agent's sandbox: hostile paths never reach outside, the user's tree stays byte-identical,
edits apply/revert only against the text they were made for, patches apply with git."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest
from treehash import tree_hash

from portside.core.workspace import confine
from portside.core.workspace.edits import Edit
from portside.core.workspace.names import WorkspaceError
from portside.core.workspace.workspace import Workspace

GIT_ENV = {
    **{k: v for k, v in os.environ.items() if not k.startswith("GIT_")},
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.com",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
}

TRAIN = "import torch\n\ndef step(p):\n    torch.nn.utils.clip_grad_norm_(p, 1.0)\n    return p\n"


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(cwd), *args], env=GIT_ENV, check=True, capture_output=True, text=True
    ).stdout


def make_project(base: Path) -> Path:
    proj = base / "proj"
    (proj / "model").mkdir(parents=True)
    (proj / "train.py").write_text(TRAIN)
    (proj / "model" / "net.py").write_text("class Net:\n    pass\n")
    (proj / "run.sh").write_text("#!/bin/sh\npython train.py\n")
    (proj / "run.sh").chmod(0o755)
    (proj / "noeol.txt").write_text("no newline at the end")
    (proj / "weights.bin").write_bytes(b"\x00\x01\x02binary")
    (proj / "alias.py").symlink_to("train.py")
    (proj / ".venv" / "bin").mkdir(parents=True)
    (proj / ".venv" / "bin" / "python").write_text("venv")
    (proj / "model" / "__pycache__").mkdir()
    (proj / "model" / "__pycache__" / "net.pyc").write_bytes(b"pyc")
    return proj


def make_git_project(base: Path) -> Path:
    proj = make_project(base)
    (proj / ".gitignore").write_text("data/\n.venv/\n__pycache__/\n")
    (proj / "staged.py").write_text("s = 1\n")
    (proj / "gone.py").write_text("bye\n")
    git(proj, "init", "-q")
    git(proj, "add", "-A")
    git(proj, "commit", "-qm", "init")
    # What the user sees differs from HEAD: unstaged, staged, untracked, deleted, ignored.
    (proj / "train.py").write_text(TRAIN + "# local tweak\n")
    (proj / "staged.py").write_text("s = 2\n")
    git(proj, "add", "staged.py")
    (proj / "untracked.py").write_text("u = 1\n")
    (proj / "gone.py").unlink()
    (proj / "data").mkdir()
    (proj / "data" / "big.bin").write_bytes(b"x" * 100)
    return proj


@pytest.fixture(params=["copy", "git"])
def setup(request: pytest.FixtureRequest, tmp_path: Path):
    proj = make_git_project(tmp_path) if request.param == "git" else make_project(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("SECRET\n")
    ws = Workspace.create(proj, tmp_path / "workspaces")
    assert ws.mode == request.param
    yield ws, proj, outside
    if ws.home.exists():
        ws.dispose()


# --------------------------------------------------------------------------- creation


def test_copy_mirrors_project_without_caches(setup) -> None:
    ws, proj, _ = setup
    assert ws.read_file("train.py") == (proj / "train.py").read_text()
    assert os.readlink(ws.root / "alias.py") == "train.py"
    assert os.stat(ws.root / "run.sh").st_mode & 0o111
    assert not (ws.root / ".venv").exists()
    assert not (ws.root / "model" / "__pycache__").exists()
    assert ws.list_files("**/*.pyc") == []


def test_git_workspace_is_what_the_user_sees(tmp_path: Path) -> None:
    proj = make_git_project(tmp_path)
    ws = Workspace.create(proj, tmp_path / "ws")
    try:
        assert ws.mode == "git" and ws.base_commit == git(proj, "rev-parse", "HEAD").strip()
        assert ws.read_file("train.py").endswith("# local tweak\n")  # unstaged
        assert ws.read_file("staged.py") == "s = 2\n"  # staged
        assert ws.read_file("untracked.py") == "u = 1\n"  # untracked, not ignored
        assert not ws.exists("gone.py")  # deleted by the user
        assert not (ws.root / "data").exists()  # ignored
        assert ws.changes() == []  # the baseline is the user's view, not HEAD
    finally:
        ws.dispose()
    assert not ws.home.exists()


def test_git_workspace_shares_nothing_with_the_users_git(tmp_path: Path) -> None:
    """Issue 13: a worktree shared the user's .git/config (an agent's `git config alias.x`
    landed there) and stayed registered in .git/worktrees."""
    proj = make_git_project(tmp_path)
    before = tree_hash(proj / ".git")
    ws = Workspace.create(proj, tmp_path / "ws")
    try:
        assert ws.mode == "git"
        assert (ws.tree / ".git").is_dir()  # its own repository, not a gitlink into the user's
        assert not (proj / ".git" / "worktrees").exists()
        assert git(proj, "worktree", "list", "--porcelain").count("worktree ") == 1
        git(ws.root, "config", "alias.x", "!echo pwned")
        git(ws.root, "config", "core.fsmonitor", "/bin/false")
        assert git(ws.root, "remote").strip() == ""  # nothing points back at the user's repo
        objects = git(ws.root, "count-objects", "-v")
        assert "alternate" not in objects
        # git still sees what the user sees: ignored run outputs stay out of the listing.
        (ws.root / "data").mkdir()
        (ws.root / "data" / "out.bin").write_bytes(b"1")
        assert [c.path for c in ws.changes()] == []
        ws.apply(ws.propose_replace("train.py", "1.0)", "0.5)"))
        assert git(ws.root, "diff", "HEAD", "--name-only").split() == ["train.py"]
    finally:
        ws.dispose()
    assert tree_hash(proj / ".git") == before
    assert "alias.x" not in (proj / ".git" / "config").read_text()


def test_git_project_in_subdirectory(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    proj = make_project(repo)
    (repo / "other.txt").write_text("not part of the project\n")
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "init")
    ws = Workspace.create(proj, tmp_path / "ws")
    try:
        assert ws.mode == "git" and ws.root.name == "proj"
        assert ws.list_files("other.txt") == []
        assert ws.read_file("model/net.py").startswith("class Net")
    finally:
        ws.dispose()


def test_repo_without_commits_is_copied(tmp_path: Path) -> None:
    proj = make_project(tmp_path)
    git(proj, "init", "-q")
    ws = Workspace.create(proj, tmp_path / "ws")
    assert ws.mode == "copy" and not (ws.root / ".git").exists()
    ws.dispose()


SECRETS = {".env": "HF_TOKEN=hf_live\n", "credentials.json": '{"key": "k"}',
           "deploy/server.pem": "-----BEGIN PRIVATE KEY-----\n", ".ssh/config": "Host x\n",
           "conf/id_ed25519": "key\n", ".netrc": "machine m password p\n",
           "gcp/service-account-prod.json": "{}"}


@pytest.mark.parametrize("kind", ["copy", "git"])
def test_secret_files_are_not_copied_unless_asked(kind: str, tmp_path: Path) -> None:
    """Issue 13: the project's .env / credentials.json reached the agent (and so the model)."""
    proj = make_project(tmp_path)
    for rel, text in SECRETS.items():
        (proj / rel).parent.mkdir(parents=True, exist_ok=True)
        (proj / rel).write_text(text)
    (proj / ".env.example").write_text("HF_TOKEN=\n")
    (proj / "model" / "keys.py").write_text("KEYS = []\n")  # a name, not a secret
    if kind == "git":
        git(proj, "init", "-q")
        git(proj, "add", "-A")  # committed secrets too: the workspace's git must not hold them
        git(proj, "commit", "-qm", "init")
    ws = Workspace.create(proj, tmp_path / "ws")
    assert ws.mode == kind
    files = set(ws.list_files())
    assert files.isdisjoint(SECRETS) and not any(p.startswith(".ssh") for p in files)
    assert {".env.example", "model/keys.py", "train.py"} <= files
    assert sorted(ws.withheld) == sorted(SECRETS)
    on_disk = {str(p.relative_to(ws.tree)) for p in ws.tree.rglob("*") if p.is_file()}
    assert not any(rel in on_disk for rel in SECRETS)
    if kind == "git":  # nor in the workspace's git objects
        blobs = subprocess.run(["git", "-C", str(ws.tree), "cat-file", "--batch-all-objects",
                                "--batch"], capture_output=True, check=True).stdout
        assert b"hf_live" not in blobs and b"PRIVATE KEY" not in blobs
        assert b"class Net" in blobs
    with pytest.raises(WorkspaceError, match="does not exist"):
        ws.read_file(".env")
    ref = Workspace.pristine_copy(proj, tmp_path / "ref")
    assert not (ref / ".env").exists() and not (ref / "credentials.json").exists()
    assert (ref / ".env.example").exists()
    opted = Workspace.create(proj, tmp_path / "ws2", secrets=True)
    assert set(SECRETS) <= set(opted.list_files()) and opted.withheld == []
    ws.dispose()
    opted.dispose()


def test_create_refuses_root_inside_project(tmp_path: Path) -> None:
    proj = make_project(tmp_path)
    with pytest.raises(WorkspaceError, match="inside the project"):
        Workspace.create(proj, proj / "sub")
    assert not (proj / "sub").exists()


def test_open_reattaches(setup) -> None:
    ws, _, _ = setup
    edit = ws.apply(ws.propose_replace("train.py", "1.0)", "0.5)"))
    for where in (ws.home, ws.root):
        again = Workspace.open(where)
        assert again.root == ws.root and again.mode == ws.mode
        assert [c.path for c in again.changes()] == ["train.py"]
    Workspace.open(ws.home).revert(edit)
    assert ws.changes() == []
    with pytest.raises(WorkspaceError, match="not a portside workspace"):
        Workspace.open(ws.home.parent)


def test_pristine_copy(tmp_path: Path) -> None:
    proj = make_git_project(tmp_path)
    dest = Workspace.pristine_copy(proj, tmp_path / "ref")
    assert (dest / "data" / "big.bin").exists()  # runs need their (ignored) data
    assert not (dest / ".git").exists() and not (dest / ".venv").exists()
    with pytest.raises(WorkspaceError, match="not an empty directory"):
        Workspace.pristine_copy(proj, dest)
    with pytest.raises(WorkspaceError, match="inside the project"):
        Workspace.pristine_copy(proj, proj / "ref")


# --------------------------------------------------------------------------- escapes


def plant_hostile_entries(ws: Workspace, outside: Path) -> None:
    """What a training run (arbitrary code) might leave in the workspace."""
    r = ws.root
    (r / "etc_link").symlink_to("/etc")
    (r / "passwd_link").symlink_to("/etc/passwd")
    (r / "out_dir").symlink_to(outside)
    (r / "secret_link").symlink_to(outside / "secret.txt")
    (r / "rel_out").symlink_to("../../../outside/secret.txt")
    (r / "zero").symlink_to("/dev/zero")
    (r / "dangling_out").symlink_to(outside / "new.txt")
    (r / "loop").symlink_to("loop")
    os.mkfifo(r / "fifo")
    cwd = os.getcwd()
    os.chdir(r)  # AF_UNIX paths are short; bind relative to the root
    try:
        sock = socket.socket(socket.AF_UNIX)
        sock.bind("sock")
        sock.close()
    finally:
        os.chdir(cwd)
    (r / ".portside").mkdir()
    (r / ".portside" / "state.json").write_text("{}")


HOSTILE = [
    "../x",
    "a/../../x",
    "..",
    "./../secret.txt",
    "/etc/passwd",
    "//etc/passwd",
    "~/.bashrc",
    "~root",
    "~",
    "a\x00b",
    "train.py\x00.txt",
    "a/" * 2500,
    "x" * 300,
    "model/" + "y" * 300,
    "C:/Windows/win.ini",
    "..\\..\\x",
    "etc_link",
    "etc_link/passwd",
    "passwd_link",
    "out_dir/secret.txt",
    "out_dir/new.txt",
    "secret_link",
    "rel_out",
    "dangling_out",
    "zero",
    "fifo",
    "sock",
    ".portside/state.json",
    ".portside",
    ".git/config",
    ".git",
    "model/.git/config",
    "",
]


def snapshot_outside(outside: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in sorted(outside.rglob("*")) if p.is_file()}


def test_hostile_paths_never_leave_the_root(setup) -> None:
    ws, proj, outside = setup
    plant_hostile_entries(ws, outside)
    before_outside = snapshot_outside(outside)
    before_user = tree_hash(proj, skip_git_worktrees=True)
    etc_passwd = Path("/etc/passwd").read_bytes()
    for rel in HOSTILE:
        for op in (
            lambda r: ws.resolve(r),
            lambda r: ws.read_file(r),
            lambda r: ws.propose_write(r, "pwned\n"),
            lambda r: ws.propose_replace(r, "root", "pwned"),
            lambda r: ws.apply(Edit("x", r, "", "pwned\n", new_file=True)),
            lambda r: ws.apply(Edit("x", r, "SECRET\n", "pwned\n")),
            lambda r: ws.revert(Edit("x", r, "pwned\n", "SECRET\n")),
        ):
            with pytest.raises(WorkspaceError) as info:
                op(rel)
            assert "refused" in str(info.value) or "off limits" in str(info.value), (
                rel,
                str(info.value),
            )
    # A path that loops is refused when opened, never followed.
    with pytest.raises(WorkspaceError):
        ws.read_file("loop")
    assert snapshot_outside(outside) == before_outside
    assert not (outside / "new.txt").exists()
    assert Path("/etc/passwd").read_bytes() == etc_passwd
    assert tree_hash(proj, skip_git_worktrees=True) == before_user


def test_refusals_say_which_path_and_why(setup) -> None:
    ws, _, outside = setup
    plant_hostile_entries(ws, outside)
    cases = {
        "../x": "'..' components",
        "/etc/passwd": "absolute paths",
        "~/.bashrc": "'~'",
        "a\x00b": "NUL byte",
        "x" * 300: "longer than 255 bytes",
        "a/" * 2500: "characters is longer than",
        "out_dir/secret.txt": "outside the workspace",
        "fifo": "it is a fifo",
        "sock": "it is a socket",
        ".git/config": ".git is off limits",
        ".portside/state.json": ".portside is off limits",
    }
    for rel, why in cases.items():
        with pytest.raises(WorkspaceError, match="refused path") as info:
            ws.resolve(rel)
        assert why in str(info.value)
        assert repr(rel[:20])[:-1] in str(info.value)  # the path is named


def test_symlink_inside_pointing_inside_is_allowed(setup) -> None:
    ws, _, _ = setup
    assert ws.resolve("alias.py") == ws.root / "train.py"
    assert ws.read_file("alias.py") == ws.read_file("train.py")
    edit = ws.propose_replace("alias.py", "1.0)", "2.0)")
    assert edit.path == "train.py"  # edits are recorded against the real file
    ws.apply(edit)
    assert os.readlink(ws.root / "alias.py") == "train.py"  # the link itself is untouched
    assert "2.0)" in (ws.root / "train.py").read_text()


def test_listing_and_grep_skip_escapes(setup) -> None:
    ws, _, outside = setup
    plant_hostile_entries(ws, outside)
    files = ws.list_files()
    assert "alias.py" in files and "train.py" in files
    for bad in (
        "etc_link",
        "passwd_link",
        "secret_link",
        "rel_out",
        "zero",
        "fifo",
        "sock",
        "loop",
    ):
        assert bad not in files
    assert not any(f == ".git" or f.startswith((".git/", ".portside/", "out_dir/")) for f in files)
    assert ws.grep("SECRET") == []
    assert ws.grep("root:") == []
    with pytest.raises(WorkspaceError, match="refused"):
        ws.list_files("../outside")


def test_swapped_components_are_not_followed(setup) -> None:
    """TOCTOU: a directory or file becomes a symlink after the path was resolved."""
    ws, _, outside = setup
    (ws.root / "sub").mkdir()
    (ws.root / "sub" / "f.txt").write_text("SECRET\n")
    root = str(ws.root)
    real, parts = confine.confine(root, "sub/f.txt")
    shutil.rmtree(ws.root / "sub")
    (ws.root / "sub").symlink_to(outside)  # outside/f.txt does not exist; secret.txt does
    (outside / "f.txt").write_text("SECRET\n")
    with pytest.raises(WorkspaceError, match="symlink or not a directory"):
        confine.read_at(root, parts, "sub/f.txt", None)
    with pytest.raises(WorkspaceError, match="symlink or not a directory"):
        confine.write_at(root, parts, "sub/f.txt", b"pwned")
    assert (outside / "f.txt").read_text() == "SECRET\n"
    # The final component swapped for a symlink: O_NOFOLLOW refuses it.
    (ws.root / "g.txt").symlink_to(outside / "secret.txt")
    with pytest.raises(WorkspaceError, match="became a symlink"):
        confine.read_at(root, ["g.txt"], "g.txt", None)
    # Writing where a symlink was swapped in is refused; the target is never written.
    with pytest.raises(WorkspaceError, match="it is a symlink"):
        confine.write_at(root, ["g.txt"], "g.txt", b"pwned\n")
    assert (outside / "secret.txt").read_text() == "SECRET\n"


# --------------------------------------------------------------------------- reading


def test_read_file_ranges_binary_and_size(setup) -> None:
    ws, _, _ = setup
    assert (
        ws.read_file("train.py", 3, 4)
        == "def step(p):\n    torch.nn.utils.clip_grad_norm_(p, 1.0)\n"
    )
    assert ws.read_file("train.py", 5, 5) == "    return p\n"
    assert ws.read_file("train.py", end_line=1) == "import torch\n"
    assert ws.read_file("noeol.txt") == "no newline at the end"
    with pytest.raises(WorkspaceError, match="past the end"):
        ws.read_file("train.py", 99)
    with pytest.raises(WorkspaceError, match="bad line range"):
        ws.read_file("train.py", 4, 2)
    with pytest.raises(WorkspaceError, match="binary file"):
        ws.read_file("weights.bin")
    with pytest.raises(WorkspaceError, match="does not exist"):
        ws.read_file("nope.py")
    with pytest.raises(WorkspaceError, match="is a directory"):
        ws.read_file("model")
    ws.max_read_bytes = 10
    with pytest.raises(WorkspaceError, match="more than the 10 bytes"):
        ws.read_file("train.py")


def test_list_files_globs(setup) -> None:
    ws, _, _ = setup
    assert "model/net.py" in ws.list_files("*.py")  # no '/': matches the name at any depth
    assert ws.list_files("model/*.py") == ["model/net.py"]
    assert ws.list_files("**/net.py") == ["model/net.py"]
    assert ws.list_files("model") == ["model/net.py"]  # a directory lists what is under it
    assert ws.list_files("mod?l/[mn]et.py") == ["model/net.py"]
    limited = ws.list_files(limit=2)
    assert len(limited) == 2 and limited.truncated
    assert not ws.list_files().truncated


def test_grep(setup) -> None:
    ws, _, _ = setup
    hits = ws.grep(r"clip_grad_norm_\(")
    assert [(h.path, h.line) for h in hits] == [("train.py", 4)]
    assert ws.grep("class", glob="*.txt") == []
    assert len(ws.grep(".", limit=3)) == 3 and ws.grep(".", limit=3).truncated
    with pytest.raises(WorkspaceError, match="bad regular expression 'clip\\(': missing"):
        ws.grep("clip(")


# --------------------------------------------------------------------------- edits


def test_edit_diff_and_stats(setup) -> None:
    ws, _, _ = setup
    edit = ws.propose_replace("train.py", "p, 1.0)", "p, 0.05)")
    assert ws.read_file("train.py") == edit.before  # proposing writes nothing
    diff = edit.unified_diff()
    assert diff.startswith("--- a/train.py\n+++ b/train.py\n@@ ")
    assert (
        "-    torch.nn.utils.clip_grad_norm_(p, 1.0)\n+    torch.nn.utils.clip_grad_norm_(p, 0.05)\n"
        in diff
    )
    assert edit.stats() == (1, 1)
    new = ws.propose_write("pkg/sub/util.py", "a\nb")
    assert new.new_file and new.before == "" and new.stats() == (2, 0)
    assert new.unified_diff().startswith("--- /dev/null\n+++ b/pkg/sub/util.py\n@@ -0,0 +1,2 @@")
    assert new.unified_diff().endswith("+b\n\\ No newline at end of file\n")
    assert not ws.exists("pkg")
    assert Edit.from_dict(edit.to_dict()) == edit


def test_replace_needs_exactly_one_match(setup) -> None:
    ws, _, _ = setup
    with pytest.raises(WorkspaceError, match=r"not found in train.py \(0 matches\)"):
        ws.propose_replace("train.py", "clip_grad_value_", "x")
    with pytest.raises(WorkspaceError, match=r"occurs 2 times in train.py \(at lines 1, 4\)"):
        ws.propose_replace("train.py", "torch", "jax")
    with pytest.raises(WorkspaceError, match="empty"):
        ws.propose_replace("train.py", "", "x")
    with pytest.raises(WorkspaceError, match="write the whole file"):
        ws.propose_replace("missing.py", "a", "b")
    with pytest.raises(WorkspaceError, match="binary"):
        ws.propose_replace("weights.bin", "a", "b")
    with pytest.raises(WorkspaceError, match="would not change"):
        ws.propose_write("train.py", ws.read_file("train.py"))


def test_replace_tolerates_crlf(setup) -> None:
    ws, _, _ = setup
    ws.apply(ws.propose_write("win.py", "a = 1\r\nb = 2\r\n"))
    edit = ws.propose_replace("win.py", "a = 1\nb = 2", "a = 1\nb = 3")
    assert ws.apply(edit).after == "a = 1\r\nb = 3\r\n"


def test_stale_edit_is_refused(setup) -> None:
    ws, _, _ = setup
    edit = ws.propose_replace("train.py", "1.0)", "0.5)")
    (ws.root / "train.py").write_text(TRAIN.replace("import torch", "import torch_xla"))
    with pytest.raises(WorkspaceError) as info:
        ws.apply(edit)
    msg = str(info.value)
    assert f"train.py changed since edit {edit.edit_id} was proposed" in msg
    assert "no longer applies" in msg
    assert "torch_xla" in ws.read_file("train.py") and "1.0)" in ws.read_file("train.py")
    new = ws.propose_write("fresh.py", "x\n")
    (ws.root / "fresh.py").write_text("someone else\n")
    with pytest.raises(WorkspaceError, match="was created since"):
        ws.apply(new)
    gone = ws.propose_replace("model/net.py", "pass", "x = 1")
    (ws.root / "model" / "net.py").unlink()
    with pytest.raises(WorkspaceError, match="was deleted since"):
        ws.apply(gone)


def test_apply_and_revert(setup) -> None:
    ws, _, _ = setup
    original = ws.read_file("train.py")
    edit = ws.propose_replace("train.py", "1.0)", "0.5)")
    applied = ws.apply(edit)
    assert ws.read_file("train.py") == edit.after == applied.after
    with pytest.raises(WorkspaceError, match="no longer applies"):
        ws.apply(edit)  # twice
    ws.revert(applied)
    assert ws.read_file("train.py") == original
    with pytest.raises(WorkspaceError, match="cannot revert edit"):
        ws.revert(applied)  # twice
    # A reviewer-edited proposal: the reviewer's text is applied, and that is what reverts.
    reviewed = ws.apply(edit, after=original.replace("1.0)", "0.9)"))
    assert "0.9)" in ws.read_file("train.py") and reviewed.edit_id == edit.edit_id
    (ws.root / "train.py").write_text("changed by a run\n")
    with pytest.raises(WorkspaceError, match="no longer holds the edit's text"):
        ws.revert(reviewed)
    # New files in new directories; reverting removes the file.
    new = ws.apply(ws.propose_write("pkg/sub/util.py", "X = 1\n"))
    assert (ws.root / "pkg" / "sub" / "util.py").read_text() == "X = 1\n"
    ws.revert(new)
    assert not ws.exists("pkg/sub/util.py")


def test_writes_keep_file_mode(setup) -> None:
    ws, _, _ = setup
    ws.apply(ws.propose_replace("run.sh", "python", "python3"))
    assert os.stat(ws.root / "run.sh").st_mode & 0o777 == 0o755
    assert not [p for p in ws.root.rglob(".portside-tmp-*")]


# --------------------------------------------------------------------------- the user's tree and patches


@pytest.mark.parametrize("kind", ["copy", "git"])
def test_user_tree_is_byte_identical_after_a_session(kind: str, tmp_path: Path) -> None:
    proj = make_git_project(tmp_path) if kind == "git" else make_project(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    before = tree_hash(proj)  # every file and mode, .git included
    ws = Workspace.create(proj, tmp_path / "workspaces")
    assert ws.mode == kind
    plant_hostile_entries(ws, outside)
    e1 = ws.apply(ws.propose_replace("train.py", "1.0)", "0.05)"))
    e2 = ws.apply(ws.propose_write("model/xla.py", "import torch_xla\n"))
    e3 = ws.apply(ws.propose_write("noeol.txt", "rewritten"))
    ws.revert(e3)
    e4 = ws.propose_replace("model/net.py", "pass", "x = 1")
    ws.apply(e4, after="class Net:\n    y = 2\n")
    stale = ws.propose_replace("train.py", "return p", "return p * 2")
    (ws.root / "train.py").write_text("a run rewrote it\n")
    with pytest.raises(WorkspaceError):
        ws.apply(stale)
    (ws.root / "train.py").write_text(e1.after)
    (ws.root / "checkpoint.pt").write_bytes(os.urandom(64))  # run output
    for rel in HOSTILE:
        with pytest.raises(WorkspaceError):
            ws.apply(Edit("h", rel, "", "x", new_file=True))
    ws.diff_patch()
    ws.changes()
    ws.export_patch(tmp_path / "out.patch")
    ws.revert(e2)
    assert tree_hash(proj) == before  # .git included: no worktree registration either
    Workspace.open(ws.home).dispose()
    assert tree_hash(proj) == before
    assert not ws.home.exists()


def apply_patch_to_copy(proj: Path, patch: str, dest: Path) -> Path:
    shutil.copytree(proj, dest, symlinks=True)
    (dest / "p.patch").write_text(patch)
    subprocess.run(["git", "apply", "--check", "p.patch"], cwd=dest, env=GIT_ENV, check=True)
    subprocess.run(["git", "apply", "p.patch"], cwd=dest, env=GIT_ENV, check=True)
    (dest / "p.patch").unlink()
    return dest


def test_patch_applies_to_a_fresh_copy_of_the_original(setup, tmp_path: Path) -> None:
    ws, proj, _ = setup
    ws.apply(ws.propose_replace("train.py", "1.0)", "0.05)"))
    ws.apply(ws.propose_write("model/tpu/xla_util.py", "import torch_xla\n"))
    ws.apply(ws.propose_write("noeol.txt", "still no newline, changed"))
    ws.apply(ws.propose_write("empty.txt", ""))
    ws.apply(ws.propose_write("caf\u00e9 notes.md", "d\u00e9j\u00e0 vu\n"))
    (ws.root / "model" / "net.py").unlink()  # a deletion, by a run
    os.chmod(ws.root / "run.sh", 0o644)  # a mode change
    (ws.root / "weights.bin").write_bytes(b"\x00changed")  # binary: listed, not patched
    changes = {c.path: c for c in ws.changes()}
    assert changes["weights.bin"].patchable is False
    assert changes["model/net.py"].status == "deleted"
    assert changes["model/tpu/xla_util.py"].status == "added"
    patch = ws.diff_patch()
    assert "diff --git a/train.py b/train.py\n" in patch
    assert "new file mode 100644\n" in patch and "deleted file mode 100644\n" in patch
    assert "old mode 100755\nnew mode 100644\n" in patch
    assert '"a/caf\\303\\251 notes.md"' in patch
    assert "weights.bin" not in patch
    out = apply_patch_to_copy(proj, patch, tmp_path / "applied")
    for rel, change in changes.items():
        if not change.patchable:
            continue
        if change.status == "deleted":
            assert not (out / rel).exists()
        else:
            assert (out / rel).read_bytes() == (ws.root / rel).read_bytes(), rel
    assert not os.stat(out / "run.sh").st_mode & 0o111
    exported = ws.export_patch(tmp_path / "session.patch")
    assert exported.read_text() == patch
    with pytest.raises(WorkspaceError, match="inside the project"):
        ws.export_patch(proj / "session.patch")


def test_patch_is_empty_without_changes(setup) -> None:
    ws, _, _ = setup
    assert ws.diff_patch() == "" and ws.changes() == []


def test_patch_can_be_limited_to_edited_paths(setup) -> None:
    ws, _, _ = setup
    edit = ws.apply(ws.propose_replace("train.py", "1.0)", "0.5)"))
    (ws.root / "train.log").write_text("loss 0.1\n")  # written by a run
    (ws.root / "model" / "net.py").unlink()
    assert {c.path for c in ws.changes()} == {"train.py", "train.log", "model/net.py"}
    patch = ws.diff_patch(paths=[edit.path, "./model/net.py"])
    assert "a/train.py" in patch and "deleted file mode" in patch and "train.log" not in patch
    with pytest.raises(WorkspaceError, match="refused"):
        ws.diff_patch(paths=["../x"])


def test_write_back_only_when_asked_and_refuses_conflicts(setup) -> None:
    ws, proj, _ = setup
    ws.apply(ws.propose_replace("train.py", "1.0)", "0.5)"))
    ws.apply(ws.propose_write("new_mod.py", "n = 1\n"))
    user_train = (proj / "train.py").read_bytes()
    (proj / "train.py").write_text("the user kept working\n")
    with pytest.raises(WorkspaceError, match="train.py changed in"):
        ws.write_back()
    assert not (proj / "new_mod.py").exists()  # nothing written on refusal
    (proj / "train.py").write_bytes(user_train)
    assert sorted(ws.write_back()) == ["new_mod.py", "train.py"]
    assert (proj / "train.py").read_text() == ws.read_file("train.py")
    assert (proj / "new_mod.py").read_text() == "n = 1\n"
    (proj / "train.py").write_text("diverged again\n")
    ws.write_back(force=True)
    assert (proj / "train.py").read_text() == ws.read_file("train.py")
