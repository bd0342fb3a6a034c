"""portside's hooks in a project's .claude/settings.local.json: merged in, the user's bytes
kept and put back, unmergeable files refused, a killed attach's leftovers restored."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from portside.core.claude_code.attach_hooks import AttachError, install, restore, uninstall

URL = "http://127.0.0.1:9/hook/tok"
THEIRS = b'{"permissions": {"allow": ["Read"]},\n "hooks": {"Stop": [{"hooks": [{"type": "command", "command": "echo mine"}]}]}}\n'


def test_merged_then_restored_byte_for_byte(tmp_path: Path) -> None:
    (tmp_path / ".claude").mkdir()
    settings = tmp_path / ".claude" / "settings.local.json"
    settings.write_bytes(THEIRS)
    inst = install(tmp_path, URL)
    merged = json.loads(settings.read_text())
    assert merged["permissions"] == {"allow": ["Read"]}
    stop = merged["hooks"]["Stop"]
    assert URL in stop[0]["hooks"][0]["command"]  # portside's first
    assert stop[1]["hooks"][0]["command"] == "echo mine"  # theirs kept
    assert merged["hooks"]["PreToolUse"][0]["matcher"] == "*"
    uninstall(inst)
    assert settings.read_bytes() == THEIRS
    assert sorted(p.name for p in (tmp_path / ".claude").iterdir()) == ["settings.local.json"]


def test_no_settings_before_means_none_after(tmp_path: Path) -> None:
    inst = install(tmp_path, URL)
    assert (tmp_path / ".claude" / "settings.local.json").exists()
    uninstall(inst)
    assert not (tmp_path / ".claude").exists()


def test_a_killed_attach_is_undone_by_the_next(tmp_path: Path) -> None:
    (tmp_path / ".claude").mkdir()
    settings = tmp_path / ".claude" / "settings.local.json"
    settings.write_bytes(THEIRS)
    install(tmp_path, URL)  # never uninstalled: the process was killed
    again = install(tmp_path, "http://127.0.0.1:9/hook/other")
    assert again.recovered.startswith("restored")
    assert "hook/tok" not in settings.read_text()  # the dead one's hooks are gone
    uninstall(again)
    assert settings.read_bytes() == THEIRS
    assert restore(tmp_path) == ""


@pytest.mark.parametrize(("text", "where"), [(b'{\n  "hooks": [1,\n', ":3:"),
                                              (b"[1, 2]\n", ":1:")])
def test_unmergeable_settings_refused_untouched(tmp_path: Path, text: bytes, where: str) -> None:
    (tmp_path / ".claude").mkdir()
    settings = tmp_path / ".claude" / "settings.local.json"
    settings.write_bytes(text)
    with pytest.raises(AttachError) as exc:
        install(tmp_path, URL)
    assert f"{settings}{where}" in str(exc.value)
    assert settings.read_bytes() == text
    assert not list((tmp_path / ".claude").glob("*.portside"))
