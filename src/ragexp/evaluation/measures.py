"""Which measures a run computes: ir_measures names parsed into data plus one function each.

A run's measures are config (``measures: [nDCG@10, RR@10, R@100, Success@1, ...]``), named as
ir_measures names them. Each name is ``<Family>@<cutoff>``; the family comes from a small
registry (as ir_measures' ``measures/*.py`` + ``register``), one short definition each. For a
query with judged grades ``rel(d)`` (relevant: ``rel(d) > 0``) and ranked list ``d_1, d_2, ...``
(``records.ordered``: score descending, ties by id descending, as trec_eval)::

    Success@k = 1 if any d_i (i <= k) is relevant else 0
    R@k       = |{i <= k : rel(d_i) > 0}| / |{d : rel(d) > 0}|
    P@k       = |{i <= k : rel(d_i) > 0}| / k                      (k even when fewer retrieved)
    RR@k      = 1 / min{i <= k : rel(d_i) > 0}, or 0
    AP@k      = sum_{i <= k, rel(d_i) > 0} P@i / |{d : rel(d) > 0}|    (trec_eval map_cut)
    nDCG@k    = DCG@k / IDCG@k,  DCG@k = sum_{i<=k} rel(d_i) / log2(i + 1)    (linear gains)

IDCG uses every judged relevant item, ideally ordered. A query with judgements but no relevant
item scores 0 on every measure (trec_eval's convention). Each family is checked against
ir_measures (trec_eval through pytrec_eval) in ``tests/unit/test_measures.py``.

MLflow metric names cannot hold ``@``, so each measure has a key derived reversibly:
``nDCG@10`` <-> ``ndcg_at_10``, ``RR@10`` <-> ``rr_at_10``, ``Success@1`` <-> ``success_at_1``.
The same key names the measure's column in ``per_question.csv``.
"""

from __future__ import annotations

import ast
import math
import re
from dataclasses import dataclass
from typing import Callable, Iterable

from ragexp.errors import InvalidValue

Fn = Callable[[list[str], dict[str, int], int], float]

DEFAULT_NAMES = ("Success@1", "Success@3", "Success@5", "Success@10", "R@1", "R@3", "R@5",
                 "R@10", "R@100", "RR@10", "nDCG@10")


@dataclass(frozen=True)
class Family:
    """One measure family: ir_measures name, what it measures, and ``fn(ranked, rel, k)``
    (``ranked``: item ids best first; ``rel``: judged grades; ``k``: cutoff >= 1)."""

    name: str
    description: str
    fn: Fn


@dataclass(frozen=True)
class Measure:
    """One configured measure: ``name`` as ir_measures prints it (``nDCG@10``), ``key`` the
    MLflow-safe metric and column name (``ndcg_at_10``), ``fn`` from its family, ``cutoff``."""

    name: str
    key: str
    fn: Fn
    cutoff: int

    def __post_init__(self) -> None:
        if self.cutoff < 1:
            raise InvalidValue(f"measure {self.name}: cutoff must be >= 1, got {self.cutoff}")

    def __call__(self, ranked: list[str], rel: dict[str, int]) -> float:
        return self.fn(ranked, rel, self.cutoff)


FAMILIES: dict[str, Family] = {}


def register(family: Family) -> Family:
    """Add a family to the registry; its lower-cased name must be new (keys are lower case)."""
    if family.name.lower() in {f.lower() for f in FAMILIES}:
        raise InvalidValue(f"measure family {family.name} is already registered")
    FAMILIES[family.name] = family
    return family


def _n_rel(rel: dict[str, int]) -> int:
    return sum(1 for g in rel.values() if g > 0)


def _hits(ranked: list[str], rel: dict[str, int], k: int) -> int:
    return sum(1 for d in ranked[:k] if rel.get(d, 0) > 0)


def _success(ranked, rel, k):
    return float(_hits(ranked, rel, k) > 0)


def _recall(ranked, rel, k):
    n = _n_rel(rel)
    return _hits(ranked, rel, k) / n if n else 0.0


def _precision(ranked, rel, k):
    return _hits(ranked, rel, k) / k


def _rr(ranked, rel, k):
    return next((1.0 / i for i, d in enumerate(ranked[:k], 1) if rel.get(d, 0) > 0), 0.0)


def _ap(ranked, rel, k):
    n, hits, total = _n_rel(rel), 0, 0.0
    for i, d in enumerate(ranked[:k], 1):
        if rel.get(d, 0) > 0:
            hits += 1
            total += hits / i
    return total / n if n else 0.0


def _ndcg(ranked, rel, k):
    dcg = sum(rel.get(d, 0) / math.log2(i + 1) for i, d in enumerate(ranked[:k], 1)
              if rel.get(d, 0) > 0)
    ideal = sorted((g for g in rel.values() if g > 0), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 1) for i, g in enumerate(ideal, 1))
    return dcg / idcg if idcg else 0.0


register(Family("Success", "1 if a relevant item is in the top k, else 0", _success))
register(Family("R", "share of the relevant items found in the top k (recall)", _recall))
register(Family("P", "share of the top k that is relevant (precision; divides by k)", _precision))
register(Family("RR", "reciprocal rank of the first relevant item in the top k", _rr))
register(Family("AP", "average precision over the top k (trec_eval map_cut)", _ap))
register(Family("nDCG", "normalised DCG over the top k, linear gains (trec_eval ndcg_cut)", _ndcg))

_NAME = re.compile(r"^([A-Za-z]+)@(\d+)$")
_KEY = re.compile(r"^([a-z]+)_at_(\d+)$")


def _known() -> str:
    return ", ".join(f"{f}@k" for f in FAMILIES)


def parse(name: str) -> Measure:
    """An ir_measures name (``nDCG@10``) -> ``Measure``. Raises ``ValueError`` naming the
    known families for an unknown family, a missing or non-positive cutoff, or parameters
    (``nDCG(dcg=exp-log2)@10``: not supported)."""
    text = str(name).strip()
    m = _NAME.match(text)
    family = FAMILIES.get(m.group(1)) if m else None
    if family is None:
        hint = ""
        if m and m.group(1).lower() in {f.lower() for f in FAMILIES}:
            right = next(f for f in FAMILIES if f.lower() == m.group(1).lower())
            hint = f" (did you mean {right}@{m.group(2)}?)"
        elif "@" not in text and text in FAMILIES:
            hint = f" (give a cutoff, e.g. {text}@10: a ranking is k deep)"
        raise InvalidValue(f"measures: unknown measure {text!r}{hint}; known: {_known()} with an "
                           f"integer cutoff k >= 1, named as ir_measures names them")
    cutoff = int(m.group(2))
    if cutoff < 1:
        raise InvalidValue(f"measures: {text!r} has cutoff {cutoff}; a cutoff must be >= 1")
    return Measure(f"{family.name}@{cutoff}", f"{family.name.lower()}_at_{cutoff}", family.fn,
                   cutoff)


def parse_all(names: Iterable[str]) -> tuple[Measure, ...]:
    """Parse a configured list; refuses an empty list and duplicates (``ValueError``)."""
    if isinstance(names, str):
        names = [names]
    out = tuple(parse(n) for n in names)
    if not out:
        raise InvalidValue(f"measures: the list is empty; name at least one ({_known()})")
    seen: set[str] = set()
    dup = [m.name for m in out if m.key in seen or seen.add(m.key)]
    if dup:
        raise InvalidValue(f"measures: {', '.join(dup)} listed more than once")
    return out


def from_key(key: str) -> Measure | None:
    """``ndcg_at_10`` -> the ``nDCG@10`` measure; ``None`` when ``key`` names no measure."""
    m = _KEY.match(key)
    family = next((f for f in FAMILIES if m and f.lower() == m.group(1)), None)
    return parse(f"{family}@{m.group(2)}") if family else None


def measure_key(name: str) -> str:
    """MLflow key of a measure given by its ir_measures name (``nDCG@10`` -> ``ndcg_at_10``).
    Raises ``ValueError`` for an unknown measure."""

    return parse(name).key


def check_objective(name: str, names) -> None:
    """Raise ``ValueError`` unless the objective is one of the run's measures."""

    if parse(name).name not in {parse(n).name for n in names}:
        raise InvalidValue(f"objective {name!r} is not among the configured measures "
                           f"({', '.join(names)}): add it to the config key measures")


DEFAULT: tuple[Measure, ...] = parse_all(DEFAULT_NAMES)


def check_depth(k: int, measures: Iterable[Measure]) -> None:
    """The ranking depth ``k`` must be positive and reach the deepest cutoff, so that no
    measure is computed on a list shorter than it says. Raises ``ValueError`` naming both."""
    measures = tuple(measures)
    deepest = max(measures, key=lambda m: m.cutoff)
    if k < 1:
        raise InvalidValue(f"k={k}: the ranking depth must be >= 1 (and >= {deepest.cutoff}, "
                           f"the cutoff of {deepest.name})")
    if k < deepest.cutoff:
        raise InvalidValue(f"k={k} is below the deepest measure cutoff {deepest.cutoff} "
                           f"({deepest.name}): a {deepest.name} on a {k}-deep ranking would be "
                           f"wrong; set k>={deepest.cutoff} or drop {deepest.name} from measures")


def check_reads(k: int, reads: dict[str, int]) -> None:
    """Stages that read the top ``n`` of the ranking (``{"answer.n_chunks": 3, ...}``) need
    ``1 <= n <= k``: a deeper read would silently get fewer items. Raises ``ValueError``
    naming the key, its value and ``k``."""
    for key, n in reads.items():
        if not 1 <= n <= k:
            raise InvalidValue(f"{key}={n} must be between 1 and the ranking depth k={k}")


def resolve(names: Iterable[str], k: int) -> tuple[Measure, ...]:
    """Config -> measures, checked: parse every name, then the depth rule. Called when the
    config is composed, before any run is created."""
    measures = parse_all(names)
    check_depth(k, measures)
    return measures


def of_run(params: dict[str, str] | None = None,
           columns: Iterable[str] | None = None) -> tuple[Measure, ...]:
    """The measure list a logged run computed: from its ``measures`` param (MLflow stores the
    list as its Python repr) or else from the measure columns of its ``per_question.csv``.
    Raises ``ValueError`` when neither names a measure."""
    value = (params or {}).get("measures")
    if value:
        names = ast.literal_eval(value) if str(value).startswith("[") else str(value).split(",")
        return parse_all(names)
    found = tuple(m for m in (from_key(c) for c in columns or ()) if m is not None)
    if not found:
        raise InvalidValue("the run names no measures (no `measures` param, no measure columns "
                           "in per_question.csv): was it logged by an older ragexp?")
    return found
