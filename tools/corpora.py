"""Public corpora with human-written questions, converted into what ragexp reads.

Two corpora, each read from a local copy (a folder, or a bare git directory read with
``git --git-dir DIR show HEAD:PATH``); nothing here downloads:

- ``conditionalqa``: ConditionalQA (Sun, Dhingra & Cohen, "ConditionalQA: A Complex Reading
  Comprehension Dataset with Conditional Answers", ACL 2022; BSD-2-Clause; the pages are
  gov.uk's, Open Government Licence v3.0). Upstream: ``git clone
  https://github.com/haitian-sun/ConditionalQA`` (``v1_0/documents.json``, ``v1_0/dev.json``).
  Its ``documents.json`` is large; the same dev pages, one file each (title line, then the
  page's HTML lines), are in ``git clone https://github.com/AI-Researchers/KGCaRe``
  (``HybridContextQA/data/docs_dev/``, ``HybridContextQA/data/dev.json``). Either layout is read.
  Written: a markdown folder ``corpus/`` of the dev questions' pages (one ``.md`` per page,
  ``<h1>``-``<h3>`` as ``##``-``####`` under the title's ``#``, list items as ``-`` lists, table
  rows as a markdown table) and ``questions.jsonl`` in ragexp's golden format: the crowd-written
  question after its scenario (the question alone often names no topic: "How long will it be
  before I hear back from the court?"), kind ``yes_no``, ``span`` or ``unanswerable``, evidence
  the annotated sentences as verbatim quotes (a heading's evidence as a ``section`` label; an
  evidence line found twice in its page is left out, as ``questions check`` would refuse it).
- ``cranfield``: the Cranfield collection (Cleverdon, 1967; 1,400 aeronautics abstracts, 225
  questions written by the papers' authors, graded judgements), as the SMART distribution's
  ``cran.all.1400``, ``cran.qry`` and ``cranqrel``; no licence is attached to it, it has been
  distributed freely for research since the 1960s. Upstream:
  ``git clone https://github.com/Chetan-Prasad/IR-Lucene_Cran``. Written: a BEIR folder
  ``beir/`` (``corpus.jsonl``, ``queries.jsonl``, ``qrels/test.tsv``; grades turned into
  gains, 1 "complete answer" -> 4 ... 4 "minimum interest" -> 1, -1 "no interest" left out)
  for ``dataset=beir``, and the same as a markdown folder ``corpus/`` (``<id>.md``: the title
  as ``#`` heading, the abstract) with ``questions.jsonl`` labelling whole documents, since only
  a markdown dataset scores hand-written and generated questions side by side.

``python -m tools.corpora convert conditionalqa --from DIR --out data/corpora/conditionalqa``
``python -m tools.corpora convert cranfield --from DIR --out data/corpora/cranfield``
"""

from __future__ import annotations

import argparse
import html
import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

_TAG = re.compile(r"^\s*<(h1|h2|h3|p|li|tr)>(.*)</\1>\s*$", re.S)
_CELL = re.compile(r"<t[dh]>(.*?)</t[dh]>", re.S)
_INLINE = re.compile(r"<[^>]+>")
_SPACE = re.compile(r"\s+")
_SLUG = re.compile(r"[^a-z0-9]+")
HEADING_LEVEL = {"h1": 2, "h2": 3, "h3": 4}  # the page title is the one "#" heading


class CorpusError(Exception):
    """A source copy that lacks a file the conversion needs, or holds one it cannot read."""


@dataclass(frozen=True)
class Source:
    """A local copy of a public repository: a folder, or a bare git directory (its HEAD)."""

    path: Path

    def _git(self) -> bool:
        return (self.path / "HEAD").is_file() and (self.path / "objects").is_dir()

    def has(self, name: str) -> bool:
        """Whether the copy holds the file ``name`` (a path inside the repository)."""
        if not self._git():
            return (self.path / name).is_file()
        done = subprocess.run(["git", "--git-dir", str(self.path), "cat-file", "-e",
                               f"HEAD:{name}"], capture_output=True)
        return done.returncode == 0

    def read(self, name: str) -> str:
        """The UTF-8 text of ``name``; ``CorpusError`` naming it when it is missing."""
        if not self._git():
            try:
                return (self.path / name).read_text(encoding="utf-8")
            except OSError as exc:
                raise CorpusError(f"{self.path / name}: {exc.strerror}") from None
        done = subprocess.run(["git", "--git-dir", str(self.path), "show", f"HEAD:{name}"],
                              capture_output=True)
        if done.returncode:
            raise CorpusError(f"{self.path}: no {name} at HEAD "
                              f"({done.stderr.decode(errors='replace').strip()})")
        return done.stdout.decode("utf-8")

    def listing(self, folder: str) -> list[str]:
        """The paths of the files directly in ``folder``, sorted."""
        if not self._git():
            return sorted(str(p.relative_to(self.path)) for p in (self.path / folder).glob("*")
                          if p.is_file())
        done = subprocess.run(["git", "--git-dir", str(self.path), "ls-tree", "--name-only",
                               f"HEAD:{folder}"], capture_output=True, text=True)
        if done.returncode:
            raise CorpusError(f"{self.path}: no folder {folder} at HEAD")
        return sorted(f"{folder}/{name}" for name in done.stdout.splitlines())


def _plain(fragment: str) -> str:
    """Text of an HTML fragment: tags dropped, entities decoded, whitespace folded."""
    return _SPACE.sub(" ", html.unescape(_INLINE.sub(" ", fragment))).strip()


def _line(raw: str) -> tuple[str, str] | None:
    """``(tag, text)`` of one ConditionalQA content line (``<p>...</p>``; a table row's text is
    its cells joined by `` | ``), None for a line of another shape."""
    m = _TAG.match(raw)
    if not m:
        return None
    tag, inner = m.groups()
    if tag == "tr":
        return tag, " | ".join(_plain(c) for c in _CELL.findall(inner))
    return tag, _plain(inner)


def page_markdown(title: str, contents: list[str]) -> str:
    """One ConditionalQA page as markdown: ``# title``, headings one level below, paragraphs,
    ``-`` list items, runs of table rows as a table whose first row is the header."""
    out, previous = [f"# {title}", ""], None
    for raw in contents:
        parsed = _line(raw)
        if parsed is None or not parsed[1]:
            continue
        tag, text = parsed
        if tag != previous and previous in ("li", "tr"):
            out.append("")
        if tag in HEADING_LEVEL:
            out += ["#" * HEADING_LEVEL[tag] + " " + text, ""]
        elif tag == "p":
            out += [text, ""]
        elif tag == "li":
            out.append(f"- {text}")
        else:
            cells = text.split(" | ")
            out.append("| " + " | ".join(cells) + " |")
            if previous != "tr":
                out.append("|" + "---|" * len(cells))
        previous = tag
    return "\n".join(out).rstrip() + "\n"


def _slug(url: str) -> str:
    return _SLUG.sub("-", url.rstrip("/").rsplit("/", 1)[-1].lower()).strip("-")


def _conditionalqa_pages(src: Source, questions: list[dict]) -> dict[str, tuple[str, list[str]]]:
    """``{url: (title, content lines)}`` of the questions' pages, from either layout."""
    if src.has("v1_0/documents.json"):
        docs = json.loads(src.read("v1_0/documents.json"))
        return {d["url"]: (d["title"], list(d["contents"])) for d in docs}
    pages = []
    for name in src.listing("HybridContextQA/data/docs_dev"):
        title, *lines = src.read(name).splitlines()
        pages.append((title.strip(), lines))
    # this layout names pages by title only: a page is the question's when it holds every
    # evidence line of a question on that url
    by_url: dict[str, tuple[str, list[str]]] = {}
    for q in questions:
        if q["url"] in by_url or not q["evidences"]:
            continue
        wanted = {e.strip() for e in q["evidences"]}
        hits = [p for p in pages if wanted <= {line.strip() for line in p[1]}]
        if len(hits) == 1:
            by_url[q["url"]] = hits[0]
    return by_url


def _evidence(doc: str, raw: str, lines: list[str], page: str) -> dict | None:
    """A golden evidence entry for one ConditionalQA evidence line, or None when its text is
    not found exactly once in the page as written (``questions check`` would refuse it)."""
    parsed = _line(raw)
    if parsed is None or not parsed[1]:
        return None
    tag, text = parsed
    if tag in HEADING_LEVEL:
        same = [x for x in lines if (p := _line(x)) and p[0] in HEADING_LEVEL and p[1] == text]
        return {"doc": doc, "section": text} if len(same) == 1 else None
    return {"doc": doc, "quote": text} if page.count(text) == 1 else None


def convert_conditionalqa(src: Source, out: Path) -> dict[str, int]:
    """Write ``out/corpus/*.md`` and ``out/questions.jsonl`` from ConditionalQA's dev split;
    returns counts (pages, questions, dropped evidence lines, dropped questions)."""
    name = "v1_0/dev.json" if src.has("v1_0/dev.json") else "HybridContextQA/data/dev.json"
    questions = json.loads(src.read(name))
    pages = _conditionalqa_pages(src, questions)
    corpus = out / "corpus"
    corpus.mkdir(parents=True, exist_ok=True)
    written: dict[str, tuple[str, list[str], str]] = {}
    for url in sorted({q["url"] for q in questions} & set(pages)):
        title, lines = pages[url]
        doc = f"{_slug(url)}.md"
        text = page_markdown(title, lines)
        (corpus / doc).write_text(text, encoding="utf-8")
        written[url] = (doc, lines, text)
    counts = {"pages": len(written), "questions": 0, "evidence_dropped": 0,
              "questions_dropped": 0}
    with (out / "questions.jsonl").open("w", encoding="utf-8") as fh:
        for q in questions:
            if q["url"] not in written:
                counts["questions_dropped"] += 1
                continue
            doc, lines, text = written[q["url"]]
            answers = [a[0] for a in q["answers"]]
            kind = ("unanswerable" if q["not_answerable"] or not answers else
                    "yes_no" if all(a.lower() in ("yes", "no") for a in answers) else "span")
            row = {"id": f"cqa-{q['id']}", "kind": kind,
                   "question": f"{q['scenario'].strip()} {q['question'].strip()}"}
            if kind != "unanswerable":
                evidence = [e for raw in q["evidences"]
                            if (e := _evidence(doc, raw, lines, text)) is not None]
                counts["evidence_dropped"] += len(q["evidences"]) - len(evidence)
                if not evidence:
                    counts["questions_dropped"] += 1
                    continue
                row |= {"answer": "; ".join(answers), "evidence": evidence}
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
            counts["questions"] += 1
    return counts


def _smart(text: str) -> list[dict[str, str]]:
    """Records of a SMART file (``.I id`` then ``.X`` fields), ``{"I": id, "T": ..., ...}``."""
    records: list[dict[str, str]] = []
    field = None
    for line in text.splitlines():
        if line.startswith(".I"):
            records.append({"I": line[2:].strip()})
            field = None
        elif len(line) == 2 and line.startswith("."):
            field = line[1]
            records[-1][field] = ""
        elif field is not None:
            records[-1][field] += line + "\n"
    return [{k: _SPACE.sub(" ", v).strip() for k, v in r.items()} for r in records]


def convert_cranfield(src: Source, out: Path) -> dict[str, int]:
    """Write ``out/beir/`` and ``out/corpus/`` + ``out/questions.jsonl`` from Cranfield.

    ``cranqrel`` numbers queries 1..225 in their order in ``cran.qry`` (whose own ``.I``
    numbers run 001..365 with gaps), as ir_datasets reads it; grade g in 1..4 is gain 5 - g."""
    docs = _smart(src.read("cran.all.1400"))
    queries = _smart(src.read("cran.qry"))
    qrels: dict[str, dict[str, int]] = {}
    for line in src.read("cranqrel").splitlines():
        if not line.strip():
            continue
        qid, did, grade = line.split()[:3]
        if 1 <= int(grade) <= 4:
            qrels.setdefault(qid, {})[did] = 5 - int(grade)
    beir, corpus = out / "beir", out / "corpus"
    (beir / "qrels").mkdir(parents=True, exist_ok=True)
    corpus.mkdir(parents=True, exist_ok=True)
    titles = {}
    with (beir / "corpus.jsonl").open("w", encoding="utf-8") as fh:
        for d in docs:
            title, body = d.get("T", ""), d.get("W", "")
            titles[d["I"]] = title
            fh.write(json.dumps({"_id": d["I"], "title": title, "text": body}) + "\n")
            (corpus / f"{d['I']}.md").write_text(f"# {title or d['I']}\n\n{body}\n",
                                                  encoding="utf-8")
    with (beir / "queries.jsonl").open("w", encoding="utf-8") as fq, \
            (out / "questions.jsonl").open("w", encoding="utf-8") as fg:
        for n, q in enumerate(queries, start=1):
            qid = str(n)
            fq.write(json.dumps({"_id": qid, "text": q["W"]}) + "\n")
            judged = sorted(qrels.get(qid, {}).items(), key=lambda kv: (-kv[1], int(kv[0])))
            if not judged:
                continue
            fg.write(json.dumps({
                "id": f"cran-{n:03d}", "kind": "general", "question": q["W"],
                "answer": titles[judged[0][0]],
                "evidence": [{"doc": f"{did}.md"} for did, _ in judged]}) + "\n")
    with (beir / "qrels" / "test.tsv").open("w", encoding="utf-8") as fh:
        fh.write("query-id\tcorpus-id\tscore\n")
        for qid in sorted(qrels, key=int):
            for did, gain in sorted(qrels[qid].items(), key=lambda kv: int(kv[0])):
                fh.write(f"{qid}\t{did}\t{gain}\n")
    return {"documents": len(docs), "queries": len(queries), "judged_queries": len(qrels),
            "judgements": sum(map(len, qrels.values()))}


CONVERTERS = {"conditionalqa": convert_conditionalqa, "cranfield": convert_cranfield}


def main(argv: list[str] | None = None) -> int:
    """``convert NAME --from DIR --out DIR``: prints the counts; exit 2 on a missing file."""
    parser = argparse.ArgumentParser(prog="python -m tools.corpora", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    conv = sub.add_parser("convert", help="convert a local copy of a corpus")
    conv.add_argument("name", choices=sorted(CONVERTERS))
    conv.add_argument("--from", dest="source", type=Path, required=True,
                      help="the upstream repository: a clone, a folder or a bare git dir")
    conv.add_argument("--out", type=Path, required=True, help="folder to write")
    args = parser.parse_args(argv)
    try:
        counts = CONVERTERS[args.name](Source(args.source), args.out)
    except CorpusError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{args.name} -> {args.out}: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
