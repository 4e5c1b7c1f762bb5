"""Rankings from another system: a TREC run file evaluated as a ragexp run of its own.

``retriever=trec_run retriever.path=FILE`` replays the file's ranking for each question (its
query ids must be the dataset's question ids) through the same scoring, per-kind breakdown,
abstain curve and answerer as ragexp's own retrievers, so ``ragexp compare`` can pair it with them.
Item ids must be ids of the run's scoring unit (``dataset.unit``): chunk ids
(``guide.md#3``), section ids (``guide.md#Install/Docker``, ``guide.md#Setup@2`` for a second
section under one heading path, as ragexp's ``run.trec`` writes them) or document ids. A unit
stands in the ranking through its first chunk, which the unit ranking collapses back to the
unit, so the file's order is what gets scored.
"""

from __future__ import annotations

import logging

from ragexp.data import readers
from ragexp.data.trec import first_line_of, read_run
from ragexp.data.units import check_unit, unit_of
from ragexp.errors import InvalidValue, listed
from ragexp.index.resources import Resources
from ragexp.records import Ranking, ordered
from ragexp.stages.retrievers import check_k

log = logging.getLogger(__name__)


class TrecRunRetriever:
    """Replays a TREC run file. Raises ``TrecFormatError`` (file and line) for a malformed file,
    ``ValueError`` when its items are not ids of the scoring unit (naming some and the unit).
    A file cannot answer new questions, so a run of it is for evaluation, not serving."""

    def __init__(self, resources: Resources, path: str, unit: str = "chunk",
                 name: str = "trec_run"):
        check_unit(unit, "retriever.unit")
        self.name, self.path = name, path
        first: dict[str, str] = {}
        for chunk_id, u in unit_of(resources.chunks, unit).items():
            first.setdefault(u, chunk_id)
        run = read_run(path)
        unknown = sorted({item for scores in run.values() for item in scores if item not in first})
        if unknown:
            hint = {"chunk": "a run that ranks documents is scored with dataset.unit=document",
                    "document": "ids must be document ids (file paths for markdown corpora)",
                    "section": "section ids look like guide.md#Install/Docker, a second "
                               "section under one heading path guide.md#Setup@2"}[unit]
            at = first_line_of(path, set(unknown))
            where = f"{path}:{at[0]}" if at else str(path)
            shown = listed((readers.shown(u) for u in unknown), 5)
            raise InvalidValue(f"{where}: {len(unknown)} item id(s) are not {unit} ids of this "
                               f"corpus under this chunking ({shown}; the first on this line: "
                               f"{readers.shown(at[1]) if at else '?'}); {hint}"
                               f"{readers.look_alikes(unknown, first)}")
        self.run: Ranking = {q: {first[i]: s for i, s in scores.items()}
                             for q, scores in run.items()}
        asked = resources.questions
        stray = sorted(q for q in run if asked and q not in asked)
        if stray:  # said, not refused: another split's questions are in the file too
            log.warning("%s ranks %d query id(s) this run does not score, left out (another "
                        "split's or question set's, or ids written otherwise: %s; the scored "
                        "questions' ids look like %s)", path, len(stray),
                        listed(map(repr, stray), 3), ", ".join(map(repr, list(asked)[:3])))
        self._warned: set[str] = set()

    def search(self, queries: dict[str, str], k: int, cached: bool = True) -> Ranking:
        """The file's top ``k`` items per query; a query the file does not rank gets an empty
        ranking (it scores 0 and counts in the mean, as ``trec_eval -c`` scores a topic a run
        left out), said once. Raises ``InvalidValue`` for ``k < 1``, as every retriever
        does."""
        check_k(k)
        missing = [q for q in queries if q not in self.run and q not in self._warned]
        if missing:
            self._warned.update(missing)
            log.warning("%s ranks no item for %d question(s) (e.g. %s): an answerable one "
                        "scores 0 (as trec_eval -c scores a topic the run leaves out), an "
                        "unanswerable one retrieves nothing and so abstains", self.path,
                        len(missing), missing[0])
        return {q: {i: self.run.get(q, {})[i] for i in ordered(self.run.get(q, {}))[:k]}
                for q in queries}
