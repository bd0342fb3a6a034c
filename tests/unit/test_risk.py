"""Risk marks on a corpus of real-looking port edits: each kind of mark, the argument change it
names, and none on a harmless edit (the ground truth is the edit text written here by hand)."""

from __future__ import annotations

import pytest

from portside.core.log import events as ev
from portside.core.workspace.risk import linked_edits, risk_marks, scan

LOOP = """\
def train(args, model, device, loader, optimizer, epoch):
    model.train()
    for batch_idx, (data, target) in enumerate(loader):
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        optimizer.step()
        if batch_idx % args.log_interval == 0:
            print(f"Train Epoch: {epoch} [{batch_idx * len(data)}/{len(loader.dataset)}]\\tLoss: {loss.item():.6f}")
"""

MAIN = """\
def main():
    args = parse_args()
    torch.manual_seed(1)
    torch.backends.cudnn.deterministic = True
    device = torch.device("cuda")
    transform = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.1307,), (0.3081,))])
    train_loader = torch.utils.data.DataLoader(dataset, batch_size=64, shuffle=True)
    model = Net().to(device)
    optimizer = optim.Adadelta(model.parameters(), lr=1.0)
    scheduler = StepLR(optimizer, step_size=1, gamma=0.7)
    criterion = nn.CrossEntropyLoss(reduction="mean")
    scaler = torch.cuda.amp.GradScaler()
    for epoch in range(1, args.epochs + 1):
        train(args, model, device, train_loader, optimizer, epoch)
        model.eval()
        scheduler.step()
"""


def _marks(before: str, old: str, new: str) -> dict[str, str]:
    assert old in before, old
    return {m.kind: m.text for m in scan(before, before.replace(old, new, 1))}


CORPUS = [
    # (what the edit does, file, old, new, kind, words the mark must contain)
    ("tighter clip", LOOP, "max_norm=1.0", "max_norm=0.05", "clipping", "max_norm 1.0 → 0.05"),
    ("clip by value instead", LOOP, "clip_grad_norm_(model.parameters(), max_norm=1.0)",
     "clip_grad_value_(model.parameters(), clip_value=1.0)", "clipping",
     "`clip_grad_norm_(max_norm=1.0)` → `clip_grad_value_(clip_value=1.0)`"),
    ("clipping dropped", LOOP, "        torch.nn.utils.clip_grad_norm_(model.parameters(), "
     "max_norm=1.0)\n", "", "clipping", "removes `torch.nn.utils.clip_grad_norm_"),
    ("optimizer lr", MAIN, "lr=1.0", "lr=0.1", "optimizer", "lr 1.0 → 0.1"),
    ("optimizer swapped", MAIN, "optim.Adadelta(model.parameters(), lr=1.0)",
     "optim.SGD(model.parameters(), lr=1.0)", "optimizer", "Adadelta"),
    ("scheduler gamma", MAIN, "gamma=0.7", "gamma=0.9", "lr-scheduler", "gamma 0.7 → 0.9"),
    ("scheduler step dropped", MAIN, "        scheduler.step()\n", "", "lr-scheduler",
     "removes `scheduler.step()`"),
    ("loss reduction", MAIN, 'reduction="mean"', 'reduction="sum"', "loss",
     "reduction 'mean' → 'sum'"),
    ("loss function", LOOP, "F.nll_loss(output, target)", "F.cross_entropy(output, target)",
     "loss", "nll_loss"),
    ("bf16 cast", MAIN, "model = Net().to(device)", "model = Net().to(device, dtype=torch.bfloat16)",
     "precision", "bfloat16"),
    ("scaler dropped", MAIN, "    scaler = torch.cuda.amp.GradScaler()\n", "", "precision",
     "GradScaler"),
    ("seed changed", MAIN, "torch.manual_seed(1)", "torch.manual_seed(42)", "seed", "seed 1 → 42"),
    ("determinism off", MAIN, "    torch.backends.cudnn.deterministic = True\n", "", "seed",
     "cudnn.deterministic"),
    ("no shuffle", MAIN, "shuffle=True", "shuffle=False", "data-order", "shuffle True → False"),
    ("drop_last added", MAIN, "shuffle=True)", "shuffle=True, drop_last=True)", "data-order",
     "drop_last (unset) → True"),
    ("batch size", MAIN, "batch_size=64", "batch_size=128", "batch-size", "batch_size 64 → 128"),
    ("eval dropped", MAIN, "        model.eval()\n", "", "train-eval", "model.eval()"),
    ("train mode dropped", LOOP, "    model.train()\n", "", "train-eval", "model.train()"),
    ("normalisation", MAIN, "(0.1307,), (0.3081,)", "(0.5,), (0.5,)", "normalisation",
     "(0.1307,) → (0.5,)"),
]


class TestEachMark:
    @pytest.mark.parametrize("what, before, old, new, kind, words", CORPUS,
                             ids=[c[0] for c in CORPUS])
    def test_mark_names_the_change(self, what: str, before: str, old: str, new: str, kind: str,
                                   words: str) -> None:
        marks = _marks(before, old, new)
        assert kind in marks, f"{what}: {marks}"
        assert words in marks[kind], marks[kind]

    def test_batch_size_change_is_not_a_data_order_change(self) -> None:
        assert set(_marks(MAIN, "batch_size=64", "batch_size=128")) == {"batch-size"}

    def test_clip_moved_before_xla_optimizer_step(self) -> None:
        marks = _marks(LOOP, "optimizer.step()", "xm.optimizer_step(optimizer)")
        assert set(marks) == {"clipping-order"}
        assert "before xm.optimizer_step" in marks["clipping-order"]

    def test_clip_after_explicit_reduction_is_fine(self) -> None:
        marks = _marks(LOOP, "        torch.nn.utils.clip_grad_norm_",
                       "        xm.reduce_gradients(optimizer)\n        torch.nn.utils.clip_grad_norm_")
        # reduce + clip + optimizer.step(): nothing about the order to report
        assert "clipping-order" not in marks

    def test_yaml_config(self) -> None:
        marks = {m.kind: m.text for m in scan("optim:\n  lr: 0.1\n", "optim:\n  lr: 0.01\n")}
        assert marks == {"optimizer": "touches the optimizer: lr 0.1 → 0.01"}

    def test_mark_line_points_into_the_proposed_text(self) -> None:
        after = LOOP.replace("max_norm=1.0", "max_norm=0.05")
        (mark,) = scan(LOOP, after)
        assert "max_norm=0.05" in after.splitlines()[mark.line - 1]


class TestHarmless:
    HARMLESS = [
        ("device", MAIN, 'device = torch.device("cuda")', "device = xm.xla_device()"),
        ("mark_step", LOOP, "        optimizer.step()\n",
         "        optimizer.step()\n        xm.mark_step()\n"),
        ("log line", LOOP, "\\tLoss: {loss.item():.6f}", "\\tloss={loss.item():.4f}"),
        ("comment", MAIN, "    scaler = torch.cuda.amp.GradScaler()\n",
         "    scaler = torch.cuda.amp.GradScaler()  # lr and max_norm are set above\n"),
        ("import", LOOP, "def train(", "import torch_xla.core.xla_model as xm\n\n\ndef train("),
        ("reindent", LOOP, "        loss.backward()\n", "        loss.backward( )\n"),
    ]

    @pytest.mark.parametrize("what, before, old, new", HARMLESS, ids=[h[0] for h in HARMLESS])
    def test_no_mark(self, what: str, before: str, old: str, new: str) -> None:
        assert _marks(before, old, new) == {}, what

    def test_binary_and_unchanged(self) -> None:
        assert risk_marks("w.bin", "a\x00b", "a\x00c") == []
        assert risk_marks("train.py", LOOP, LOOP) == []


class TestAlarmLinks:
    def test_clipping_alarm_names_the_applied_edit_with_the_clipping_mark(self) -> None:
        def proposed(edit_id: str, old: str, new: str) -> ev.EditProposed:
            after = LOOP.replace(old, new)
            return ev.EditProposed(session_id="s", edit_id=edit_id, path="train.py", before=LOOP,
                                   after=after, risks=scan(LOOP, after))

        edits = [proposed("e1", "max_norm=1.0", "max_norm=0.05"),
                 proposed("e2", "F.nll_loss", "F.cross_entropy"),
                 proposed("e3", "max_norm=1.0", "max_norm=0.5")]
        links = linked_edits("clipping-changed", edits, applied={"e1", "e2"})
        assert [(e.edit_id, m.kind) for e, m in links] == [("e1", "clipping")]
        assert linked_edits("slow", edits) == []
        assert [e.edit_id for e, _ in linked_edits("numeric-drift", edits)] == ["e3", "e2", "e1"]


def test_old_logs_decode_without_risks() -> None:
    raw = ('{"kind":"edit.proposed","session_id":"s","seq":1,"ts":0.0,"edit_id":"e","path":"p",'
           '"before":"a","after":"b","rationale":""}')
    e = ev.decode(raw)
    assert isinstance(e, ev.EditProposed) and e.risks == []
    e.risks = [ev.RiskMark(kind="clipping", text="touches gradient clipping: x", line=3)]
    again = ev.decode(ev.encode(e) if hasattr(ev, "encode") else __import__("msgspec").json.encode(e))
    assert isinstance(again, ev.EditProposed) and again.risks == e.risks


def test_marks_in_the_event_log_and_the_report(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A real store: the marks survive the SQLite log, and the Markdown report lists them and
    links the later clipping alarm to the applied edit that carried the clipping mark."""
    from portside.store import Store
    from portside.store.exports import report_md

    sid = "s-risk"
    after = LOOP.replace("max_norm=1.0", "max_norm=0.05")
    store = Store(tmp_path / "p.db")
    rec = store.recorder
    rec.append(ev.SessionStarted(session_id=sid, ts=1.0, project="/p", target="tpu"))
    rec.append(ev.EditProposed(session_id=sid, ts=2.0, edit_id="e1", path="train.py",
                               before=LOOP, after=after, risks=risk_marks("train.py", LOOP, after)))
    rec.append(ev.EditDecided(session_id=sid, ts=3.0, edit_id="e1", decision="approved"))
    rec.append(ev.EditApplied(session_id=sid, ts=3.5, edit_id="e1", path="train.py"))
    rec.append(ev.AlarmRaised(session_id=sid, ts=9.0, alarm_id="a1", check="clipping-changed",
                              severity="error", title="max_norm changed: 0.05 vs reference 1.0"))
    rec.flush()
    (logged,) = list(store.events(sid, kinds=["edit.proposed"]))
    assert isinstance(logged, ev.EditProposed)
    assert [m.kind for m in logged.risks] == ["clipping"]
    text = report_md(store, sid)
    store.close()
    assert ("- `train.py:9` (e1, applied): touches gradient clipping: max_norm 1.0 → 0.05"
            in text)
    assert ('  - linked edit: `train.py` (e1) carried "touches gradient clipping: max_norm 1.0 '
            '→ 0.05"' in text)
