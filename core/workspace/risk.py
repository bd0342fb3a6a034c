"""Risk marks: what a proposed edit changes that silently alters training, said before approval.

A port can run, exit 0 and still train a different model: a clipping threshold, an optimizer
argument, a loss reduction or a dtype changed on the way. The reviewer approves edits one at a
time, so each edit is scanned when it is proposed, and the card says what it touches
("touches gradient clipping: max_norm 1.0 → 0.05"). The scan reads the changed lines only (a
line-level diff), pairs a removed line with the added line of the same kind to say which
arguments changed, and checks one ordering that no single line shows: gradient clipping placed
before ``xm.optimizer_step``, which all-reduces the gradients only after the clip ran.

Pure functions, no Textual; the marks travel in the ``edit.proposed`` event.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Sequence
from difflib import SequenceMatcher

from portside.core.log import events as ev
from portside.core.scan.python_ast import parse

# kind → (what the mark says it touches, the pattern of a line of that kind). Order matters:
# a line is of the first kind whose pattern it matches.
KINDS: dict[str, tuple[str, str]] = {
    "clipping": ("gradient clipping",
                 r"clip_grad|max[-_]norm|clip_value|grad_clip|clip_norm|gradient_clip|"
                 r"\bclip\b"),
    "lr-scheduler": ("the LR scheduler",
                     r"lr_scheduler|\bscheduler\b|\w*LR\s*\(|\bwarmup\w*|"
                     r"get_(linear|cosine)_schedule"),
    "optimizer": ("the optimizer",
                  r"\boptim\.\w+\s*\(|\b(SGD|Adam|AdamW|RMSprop|Adagrad|Adadelta|Adamax|NAdam|"
                  r"RAdam|LBFGS|Adafactor|Lion|LARS|LAMB)\s*\(|\b(lr|learning_rate|momentum|"
                  r"weight_decay|betas|nesterov|dampening|amsgrad)\b|param_groups|"
                  r"set_to_none"),
    "loss": ("the loss",
             r"\w+Loss\s*\(|\bF\.(cross_entropy|nll_loss|mse_loss|l1_loss|smooth_l1_loss|"
             r"huber_loss|kl_div|binary_cross_entropy\w*)\b|\breduction\b|\blabel_smoothing\b|"
             r"\bloss\s*=\s*loss\s*[*/]|\bloss\s*[*/]=|ignore_index"),
    "precision": ("precision",
                  r"\bautocast\b|GradScaler|\bscaler\b|\bbfloat16\b|\bfloat16\b|\bfloat64\b|"
                  r"\bfloat32\b|\.half\(|\.double\(|\.float\(|\bdtype\b|XLA_USE_BF16|"
                  r"XLA_DOWNCAST|set_default_dtype|allow_tf32|matmul_precision|\bamp\b"),
    "seed": ("seeds and determinism",
             r"manual_seed|\bseed\b|set_rng_state|use_deterministic_algorithms|"
             r"cudnn\.(deterministic|benchmark)|\bgenerator\s*="),
    "data-order": ("data order",
                   r"\bdrop_last\b|\bshuffle\b|\w*[Ss]ampler\b|set_epoch"),
    "batch-size": ("the batch size",
                   r"\bbatch_size\b|\bBATCH_SIZE\b|\bbatch\s*=|\bper_device_\w*batch|"
                   r"\bgrad(ient)?_accum\w*|\baccum(ulation)?_steps\b"),
    "train-eval": ("train/eval mode",
                   r"\.eval\(\)|\.train\(|\bno_grad\b|inference_mode|requires_grad"),
    "normalisation": ("data normalisation",
                      r"\bNormalize\s*\(|\bnormali[sz]\w*|\bmean\s*=|\bstd\s*=|/\s*255\b|"
                      r"0\.1307|0\.3081|0\.485|0\.229"),
}
_PATTERNS = {kind: re.compile(p) for kind, (_, p) in KINDS.items()}

# Positional parameters of the calls whose arguments a mark names.
POSITIONAL: dict[str, tuple[str, ...]] = {
    "clip_grad_norm_": ("parameters", "max_norm", "norm_type"),
    "clip_grad_norm": ("parameters", "max_norm", "norm_type"),
    "clip_grad_value_": ("parameters", "clip_value"),
    "SGD": ("params", "lr", "momentum", "dampening", "weight_decay", "nesterov"),
    "Adam": ("params", "lr", "betas", "eps", "weight_decay", "amsgrad"),
    "AdamW": ("params", "lr", "betas", "eps", "weight_decay", "amsgrad"),
    "RMSprop": ("params", "lr", "alpha", "eps", "weight_decay", "momentum"),
    "StepLR": ("optimizer", "step_size", "gamma"),
    "MultiStepLR": ("optimizer", "milestones", "gamma"),
    "ExponentialLR": ("optimizer", "gamma"),
    "CosineAnnealingLR": ("optimizer", "T_max", "eta_min"),
    "OneCycleLR": ("optimizer", "max_lr", "total_steps"),
    "Normalize": ("mean", "std"),
    "DataLoader": ("dataset", "batch_size", "shuffle", "sampler"),
    "autocast": ("device_type", "dtype", "enabled"),
    "manual_seed": ("seed",),
}

_COMMENT = re.compile(r"\s+#.*$|^\s*#.*$")
_KWARG = re.compile(r"([A-Za-z_][\w.]*)\s*(?<![=!<>])=(?!=)\s*([^,()\[\]\n]+|\([^()]*\)|\[[^\[\]]*\])")
_SETTING = re.compile(r"^\s*-?\s*([A-Za-z_][\w.]*)\s*:\s*(\S.*)$")  # a YAML key: value
_CLIP_CALL = re.compile(r"clip_grad_(norm|value)_?\s*\(")
_REDUCE = re.compile(r"\bxm\.optimizer_step\s*\(")
_EXPLICIT_REDUCE = re.compile(r"reduce_gradients\s*\(|all_reduce\s*\(")
CALL = "(call)"  # the key of a line's outermost call in ``arguments``
MAX_SCAN_CHARS = 2_000_000
MAX_PAIRINGS = 20_000  # line pairs compared in one replaced block; beyond, adds and removes
MAX_DETAILS = 3  # per mark: a long edit lists its first changes, then "…"


def scan(before: str, after: str) -> list[ev.RiskMark]:
    """The marks of one file's edit, at most one per kind, in the order of ``KINDS``."""
    a, b = before.splitlines(), after.splitlines()
    details: dict[str, list[str]] = {}
    lines: dict[str, int] = {}

    def note(kind: str, text: str, line: int) -> None:
        found = details.setdefault(kind, [])
        lines.setdefault(kind, line)
        if text not in found:
            found.append(text)

    for tag, i1, i2, j1, j2 in SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        removed = [(i + 1, _code(a[i])) for i in range(i1, i2)]
        added = [(j + 1, _code(b[j])) for j in range(j1, j2)]
        pairs, gone, new = _pair_lines(removed, added)
        for (_, old_text), (n, new_text) in pairs:
            for kind, detail in _changed(old_text, new_text):
                note(kind, detail, n)
        for n, text in gone:
            for kind in kinds_of(text):
                note(kind, f"removes `{_short(text)}`", n)
        for n, text in new:
            for kind in kinds_of(text):
                note(kind, f"adds `{_short(text)}`", n)
    marks = []
    for kind, (what, _) in KINDS.items():
        if kind in details:
            shown = details[kind][:MAX_DETAILS]
            more = " …" if len(details[kind]) > MAX_DETAILS else ""
            marks.append(ev.RiskMark(kind=kind, text=f"touches {what}: {'; '.join(shown)}{more}",
                                     line=lines[kind]))
    order = _clip_before_reduce(a, b)
    if order:
        marks.append(ev.RiskMark(kind="clipping-order", line=order, text=(
            "gradient clipping now runs before xm.optimizer_step, which all-reduces the "
            "gradients after it: each replica clips its own local gradients")))
    return marks


def risk_marks(path: str, before: str, after: str) -> list[ev.RiskMark]:
    """The marks of a proposed edit, as the host stores them: binary or huge files are not
    read, and a scan that fails costs the marks, never the proposal."""
    if "\x00" in before or "\x00" in after or len(before) + len(after) > MAX_SCAN_CHARS:
        return []
    try:
        return scan(before, after)
    except (RecursionError, ValueError, MemoryError):  # ast on pathological input
        return []


def kinds_of(line: str) -> list[str]:
    """The kinds whose pattern the (comment-free) line matches."""
    return [kind for kind, pattern in _PATTERNS.items() if pattern.search(line)]


def _code(line: str) -> str:
    return _COMMENT.sub("", line).strip()


Numbered = tuple[int, str]


def _pair_lines(removed: Sequence[Numbered], added: Sequence[Numbered]
                ) -> tuple[list[tuple[Numbered, Numbered]], list[Numbered], list[Numbered]]:
    """A replaced block as (old, new) pairs of similar lines, then lines only removed and lines
    only added. A line changed only in whitespace or comments, or only moved, is no change."""
    gone = [x for x in removed if x[1] and x[1] not in {t for _, t in added}]
    new = [x for x in added if x[1] and x[1] not in {t for _, t in removed}]
    pairs: list[tuple[Numbered, Numbered]] = []
    start = 0
    for old in list(gone) if len(gone) * len(new) <= MAX_PAIRINGS else []:
        for k in range(start, len(new)):
            if SequenceMatcher(None, old[1], new[k][1], autojunk=False).ratio() >= 0.6:
                pairs.append((old, new[k]))
                gone.remove(old)
                start = k + 1
                break
    paired = {id(p[1]) for p in pairs}
    return pairs, gone, [x for x in new if id(x) not in paired]


def _changed(old: str, new: str) -> list[tuple[str, str]]:
    """(kind, what changed) for one changed line: "max_norm 1.0 → 0.05" when the arguments
    can be read, else the changed part of both lines. A kind counts only when the changed
    part or a changed argument is of that kind: renaming a DataLoader's batch size is not a
    change of its data order."""
    a, b = arguments(old), arguments(new)
    keys = list(a) + [k for k in b if k not in a]
    if a.get(CALL) != b.get(CALL):
        # Another function: its positional parameters have other names; compare the shared.
        keys = [CALL] + [k for k in keys if k in a and k in b and k != CALL]
    changed = [k for k in keys if a.get(k) != b.get(k)]
    (core_old, shown_old), (core_new, shown_new) = _region(old, new)
    claimed: dict[str, list[str]] = {}
    for kind, pattern in _PATTERNS.items():
        mine = [k for k in changed if pattern.search(f"{k}=") or pattern.search(
            f"{a.get(k, '')} {b.get(k, '')}")]
        if mine:
            claimed[kind] = mine
    # An argument no kind names (a scheduler's gamma) belongs to the line's own kind.
    rest = [k for k in changed if not any(k in v for v in claimed.values())]
    line_kinds = kinds_of(f"{old} {new}")
    if rest and line_kinds:
        claimed.setdefault(line_kinds[0], []).extend(rest)
    out = []
    for kind, pattern in _PATTERNS.items():
        if kind in claimed:
            out.append((kind, ", ".join(
                f"`{_call(a, b)}` → `{_call(b, a)}`" if k == CALL
                else f"{k} {a.get(k, '(unset)')} → {b.get(k, '(unset)')}" for k in claimed[kind])))
        elif not changed and pattern.search(f"{core_old} {core_new}"):
            out.append((kind, f"`{_short(shown_old)}` → `{_short(shown_new)}`"))
    return out


def _call(mine: dict[str, str], other: dict[str, str]) -> str:
    """One side of a changed call, with the arguments the other side does not have."""
    name = mine.get(CALL, "").rpartition(".")[2]
    own = [f"{k}={v}" for k, v in mine.items() if k != CALL and other.get(k) != v]
    return _short(f"{name}({', '.join(own)})", 50)


def _region(old: str, new: str, context: int = 12) -> tuple[tuple[str, str], tuple[str, str]]:
    """For each line: the part that differs widened to whole words, and that part with a
    little context to show."""
    ops = [o for o in SequenceMatcher(None, old, new, autojunk=False).get_opcodes()
           if o[0] != "equal"]
    if not ops:
        return (old, old), (new, new)

    def cut(text: str, lo: int, hi: int) -> tuple[str, str]:
        while lo > 0 and (text[lo - 1].isalnum() or text[lo - 1] in "_."):
            lo -= 1
        while hi < len(text) and (text[hi].isalnum() or text[hi] in "_."):
            hi += 1
        if hi < len(text) and text[hi] == "(":  # a call's name: patterns read `SGD(`
            hi += 1
        lo2, hi2 = max(0, lo - context), min(len(text), hi + context)
        shown = ("…" if lo2 else "") + text[lo2:hi2] + ("…" if hi2 < len(text) else "")
        return text[lo:hi], shown

    return cut(old, ops[0][1], ops[-1][2]), cut(new, ops[0][3], ops[-1][4])


def arguments(line: str) -> dict[str, str]:
    """The named values a line sets: a call's keyword and known positional arguments, or an
    assignment's target. Parsed with ``ast`` when the line is a whole statement, else read with
    a regex (a line inside a multi-line call: ``lr=0.1,``)."""
    try:
        tree = parse(line)
    except SyntaxError:
        found = _KWARG.findall(line) or _SETTING.findall(line)
        return {k: v.strip() for k, v in found}
    out: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = _call_name(node.func)
            if name and CALL not in out:
                out[CALL] = ast.unparse(node.func)
            params = POSITIONAL.get(name, ())
            for i, arg in enumerate(node.args):
                if i < len(params):
                    out.setdefault(params[i], ast.unparse(arg))
            for kw in node.keywords:
                if kw.arg:
                    out.setdefault(kw.arg, ast.unparse(kw.value))
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and not isinstance(
                node.value, ast.Call):
            out.setdefault(ast.unparse(node.targets[0]), ast.unparse(node.value))
        elif isinstance(node, ast.AnnAssign):  # `lr: 0.1` (YAML) parses as an annotation
            value = node.value if node.value is not None else node.annotation
            out.setdefault(ast.unparse(node.target), ast.unparse(value))
    return out


def _call_name(func: ast.expr) -> str:
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def _short(text: str, width: int = 60) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _clip_before_reduce(a: list[str], b: list[str]) -> int:
    """The line of a clipping call that the edit puts before ``xm.optimizer_step`` (which
    reduces the gradients itself) with no explicit reduction before it; 0 when none or when
    the file already had that order."""

    def first_bad(lines: list[str]) -> int:
        clip = reduce = explicit = -1
        for i, raw in enumerate(lines):
            line = _code(raw)
            if clip < 0 and _CLIP_CALL.search(line):
                clip = i
            if explicit < 0 and _EXPLICIT_REDUCE.search(line):
                explicit = i
            if reduce < 0 and _REDUCE.search(line):
                reduce = i
        if clip < 0 or reduce < 0 or clip > reduce or 0 <= explicit < clip:
            return 0
        return clip + 1

    bad = first_bad(b)
    return bad if bad and not first_bad(a) else 0


# --- alarms back to edits --------------------------------------------------------------------

# An alarm of this check is explained by an edit that carried one of these marks.
ALARM_KINDS: dict[str, tuple[str, ...]] = {
    "clipping-changed": ("clipping", "clipping-order"),
    "lr-schedule-changed": ("lr-scheduler", "optimizer"),
    "optimizer-changed": ("optimizer",),
    "data-changed": ("data-order", "batch-size"),
    "precision-changed": ("precision",),
    "non-finite": ("precision", "loss", "optimizer", "clipping", "normalisation"),
    "numeric-drift": tuple(KINDS) + ("clipping-order",),
    "goal-regression": tuple(KINDS) + ("clipping-order",),
}


def linked_edits(check: str, edits: Iterable[ev.EditProposed],
                 applied: set[str] | None = None) -> list[tuple[ev.EditProposed, ev.RiskMark]]:
    """The edits (applied ones only when ``applied`` is given) whose marks match an alarm of
    ``check``, newest first, each with the mark that matched."""
    wanted = ALARM_KINDS.get(check, ())
    out = []
    for e in edits:
        if applied is not None and e.edit_id not in applied:
            continue
        # The most specific mark first: a clipping alarm names the clipping mark, not the order.
        for mark in sorted(e.risks, key=lambda m: wanted.index(m.kind) if m.kind in wanted
                           else len(wanted)):
            if mark.kind in wanted:
                out.append((e, mark))
                break
    return out[::-1]


def linked_edits_for(check: str, likely_causes: Sequence[str], edits: Iterable[ev.EditProposed],
                     applied: set[str] | None = None
                     ) -> list[tuple[ev.EditProposed, ev.RiskMark]]:
    """As :func:`linked_edits`, but an alarm whose evidence names its likely causes (drift and
    goal alarms name `clipping-changed`, say: checks/evidence.py likely_causes) links the edit
    behind its first cause that has one: any mark matches `numeric-drift`, so the newest edit
    (a signature fix) was linked while the evidence pointed at the clipping edit."""
    edits = list(edits)
    for cause in likely_causes:
        links = linked_edits(str(cause), edits, applied)
        if links:
            return links
    return linked_edits(check, edits, applied)

