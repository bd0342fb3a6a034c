"""The copy `attach` keeps of the user's tree (where the candidate runs): what changed is copied,
what is gone is removed, and secrets, .git and .claude (portside's hooks) stay out."""

from __future__ import annotations

from pathlib import Path

from portside.core.claude_code.attached import sync_tree


def test_sync_copies_changes_and_removals_only(tmp_path: Path) -> None:
    src, dst = tmp_path / "tree", tmp_path / "copy"
    (src / "pkg").mkdir(parents=True)
    (src / "train.py").write_text("a\n")
    (src / "pkg" / "m.py").write_text("m\n")
    (src / ".env").write_text("HF_TOKEN=hf_abc\n")
    (src / ".claude").mkdir()
    (src / ".claude" / "settings.local.json").write_text("{}")
    (src / ".git").mkdir()
    (src / ".git" / "HEAD").write_text("ref\n")
    dst.mkdir()
    assert sync_tree(src, dst) == ["pkg/m.py", "train.py"]
    assert sorted(str(p.relative_to(dst)) for p in dst.rglob("*") if p.is_file()) == \
        ["pkg/m.py", "train.py"]
    assert sync_tree(src, dst) == []  # nothing changed: nothing written
    (src / "train.py").write_text("b\n")
    (src / "pkg" / "m.py").unlink()
    assert sync_tree(src, dst) == ["pkg/m.py", "train.py"]
    assert (dst / "train.py").read_text() == "b\n" and not (dst / "pkg" / "m.py").exists()
