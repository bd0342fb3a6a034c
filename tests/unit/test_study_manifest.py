"""The study manifest: tasks as written, and every mistake named by file:line and key."""

from __future__ import annotations

from pathlib import Path

import pytest

from portside.core.study.manifest import ManifestError, load_manifest, parse_manifest

REPO = Path(__file__).resolve().parents[2]


def write(tmp: Path, text: str) -> Path:
    (tmp / "proj").mkdir(exist_ok=True)
    path = tmp / "study.toml"
    path.write_text(text)
    return path


GOOD = """\
[study]
name = "s"
[defaults]
reference = "python train.py"
target = "tpu"
[[project]]
name = "a"
path = "proj"
candidate = "python train.py --xla"
repetitions = 2
[[project]]
name = "b"
git = "https://example.invalid/b.git"
commit = "0123456789abcdef0123456789abcdef01234567"
candidate = "python t.py"
target = "cpu"
candidate_resources = { TPU = 4 }
"""


def test_tasks_resources_and_defaults(tmp_path: Path) -> None:
    m = load_manifest(write(tmp_path, GOOD))
    assert m.name == "s"
    assert [t.task_id for t in m.tasks] == ["a#1", "a#2", "b"]
    a1, _, b = m.tasks
    assert a1.folder == str((tmp_path / "proj").resolve()) and a1.reference == "python train.py"
    assert a1.resources("reference") == {"CPU": 1.0}  # a reference where a CPU is
    assert a1.resources("candidate") == {"TPU": 1.0}  # the target's resource
    assert b.git.endswith("b.git") and b.folder == "" and b.target == "cpu"
    assert b.resources("candidate") == {"TPU": 4.0}  # the manifest's own request wins
    assert a1.phases == ("reference", "candidate")


@pytest.mark.parametrize("edit, line, where", [
    (("target = \"tpu\"", "target = \"tpx\""), 5, "defaults.target: 'tpx': expected one of"),
    (("repetitions = 2", "repetitions = 0"), 10, "project[1].repetitions: expected an integer"),
    (("path = \"proj\"", "path = \"nope\""), 8, "project[1].path: "),
    (("name = \"b\"", "name = \"a\""), 12, "project[2].name: 'a' is also project 1's name"),
    (("commit = \"0123456789abcdef0123456789abcdef01234567\"", "commit = \"HEAD\""), 14,
     "project[2].commit: 'HEAD': expected a commit sha"),
    (("candidate_resources = { TPU = 4 }", "candidate_resources = { TPU = -1 }"), 17,
     "project[2].candidate_resources: resource TPU: expected a positive amount"),
    (("candidate = \"python t.py\"", "candidat = \"python t.py\""), 15,
     "project[2].candidat: unknown key"),
    (("candidate = \"python t.py\"\n", ""), 11, "project[2]: give candidate (a command) or "
     "agent"),
])
def test_each_mistake_names_its_line_and_key(tmp_path: Path, edit: tuple[str, str], line: int,
                                             where: str) -> None:
    path = write(tmp_path, GOOD.replace(*edit))
    with pytest.raises(ManifestError) as exc:
        load_manifest(path)
    assert str(exc.value).startswith(f"{path}:{line}: {where}"), str(exc.value)


def test_bad_toml_and_bad_criteria_say_where(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match=r"^x\.toml: not valid TOML"):
        parse_manifest("[study\n", "x.toml")
    crit = tmp_path / "c.toml"
    crit.write_text("[goal]\ndirection = \"up\"\n")
    path = write(tmp_path, GOOD.replace('target = "tpu"\n', f'target = "tpu"\ncriteria = "{crit}"\n'))
    with pytest.raises(ManifestError) as exc:
        load_manifest(path)
    # The manifest's line, then the criteria file's own file:line.
    assert str(exc.value).startswith(f"{path}:6: defaults.criteria: {crit}:2: goal.direction")


def test_the_shipped_example_study_parses() -> None:
    m = load_manifest(REPO / "sessions" / "study" / "manifest.toml")
    assert len(m.tasks) == 6 and all(Path(t.folder).is_dir() for t in m.tasks)


def test_study_run_refuses_a_bad_manifest_before_anything_runs(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from portside.cli.main import main

    path = write(tmp_path, GOOD.replace('path = "proj"', 'path = "gone"'))
    db = tmp_path / "s.db"
    res = CliRunner().invoke(main, ["study", "run", str(path), "--db", str(db)])
    assert res.exit_code == 2
    assert f"{path}:8: project[1].path: " in res.output and "is not a folder" in res.output
    assert not db.exists()  # refused before the database was even opened
