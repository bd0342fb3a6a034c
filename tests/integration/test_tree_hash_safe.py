"""The project's tree hash (reference reuse's key) must not disturb the files it reads.

A `verify --cwd DIR` whose database lies in DIR (a test's tmp_path, a user's `--db ./p.db`):
hashing the tree read portside's own database and its -wal/-shm and closed them, which drops
every POSIX lock the process held on them; the next reader in another process then found no
lock on closing and deleted the WAL under the writer ("recording failed: s.db-wal was deleted
while recording", exit 3: test_resume's kill-and-resume test). And a FIFO in the project must
not hang it."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

from portside.core.workspace.tree_hash import tree_digest


def test_hashing_a_tree_holding_our_database_keeps_its_wal(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("print('step=0 loss=1.0')\n")
    db = tmp_path / "s.db"
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("CREATE TABLE t (x)")
    conn.execute("INSERT INTO t VALUES (1)")
    conn.commit()
    wal = tmp_path / "s.db-wal"
    assert wal.exists()
    first = tree_digest(tmp_path)
    # another process reads and closes, as a second portside (or a test's poll) does
    subprocess.run([sys.executable, "-c", "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]);"
                    " c.execute('SELECT count(*) FROM t').fetchone(); c.close()", str(db)],
                   check=True, timeout=60)
    assert wal.exists(), "the WAL was deleted under the open connection"
    conn.execute("INSERT INTO t VALUES (2)")
    conn.commit()
    # the database held here is portside's own, not the project's: writing it keeps the key
    assert tree_digest(tmp_path) == first
    conn.close()


def test_a_fifo_in_the_project_is_not_waited_on(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("print('hi')\n")
    os.mkfifo(tmp_path / "pipe.py")
    out: list[str] = []
    t = threading.Thread(target=lambda: out.append(tree_digest(tmp_path)), daemon=True)
    t.start()
    t.join(20)
    assert out, "tree_digest blocked on a FIFO"
