"""Child for the crash test: appends events and records interventions until killed.

Prints `recorded <intervention_id>` only after record_intervention returned, so every id it
printed must be in the database whatever moment SIGKILL lands.
"""

from __future__ import annotations

import sys

from portside.core.log import events as ev
from portside.store import Store

db, sid, tag = sys.argv[1], sys.argv[2], sys.argv[3]
store = Store(db)
rec = store.recorder
if rec.last_seq(sid) == 0:
    rec.append(ev.SessionStarted(session_id=sid, project="/crash", target="cpu"))
i = 0
while True:
    i += 1
    for j in range(50):
        rec.append(ev.RunOutput(session_id=sid, run_id="r", lines=[f"{tag} {i} {j}"] * 4))
    rec.append(ev.RunRecord(session_id=sid, run_id="r", records=[{"type": "step", "step": i,
                                                                   "loss": 1.0 / i}]))
    iid = f"{tag}-{i}"
    rec.record_intervention(ev.Intervention(
        session_id=sid, intervention_id=iid, action="note", steering=False,
        attention_started_at=ev.now() - 1, decided_at=ev.now(), note=iid))
    sys.stdout.write(f"recorded {iid}\n")  # one write: a line is whole or absent
    sys.stdout.flush()
