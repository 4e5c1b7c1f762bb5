"""The docs hold together: every relative link and image in ``README.md`` and ``docs/*.md`` points
at a file that exists (an ``#anchor`` at a heading there, slugged as GitHub slugs it), the README
stays short with its sections in order and links every docs page, each regenerated block lives on
the page its ``make`` target writes, ``make help`` documents every target, and
``docs/architecture.md`` is what ``make architecture`` writes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tools import architecture

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [README, *DOCS]
MAX_README_BYTES = 15 * 1024
# The README answers, in this order: set up, the main job, your own documents, picking a
# winner, serving it, where to read more (the question itself and the hero chart come first).
SECTIONS = ("Set-up", "The main job", "Your own documents", "Picking a winner",
            "Serving the winner", "Read more")
# Each regenerated block and the tool that writes it (``make`` passes the page).
BLOCKS = {"tools.write_tables": ("golden", "results"), "tools.walkthrough": ("walkthrough",),
          "tools.owndocs": ("own-docs",), "tools.bench": ("bench",),
          "tools.bench_phases": ("phases",),
          "tools.bench_scale": ("bench-scale",),
          "tools.generated_questions": ("generated", "noise"),
          "tools.structure_examples": ("structure",),
          "tools.question_validity": ("question-validity-conditionalqa",
                                      "question-validity-cranfield",
                                      "question-validity-conditionalqa-calibrated")}
# Blocks the README holds (written by ``make tables --readme README.md``): the one result a
# newcomer reads before any docs page, the hand-written and generated questions side by side.
README_BLOCKS = ("sources",)

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})[^\n]*\n.*?^ {0,3}\1[ \t]*$", re.S | re.M)
INLINE_CODE = re.compile(r"(`+)(?!`).*?(?<!`)\1", re.S)
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.+?)[ \t#]*$", re.M)
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def prose(text: str) -> str:
    """The text with fenced code blocks removed (their ``#`` lines are not headings, their
    brackets not links); inline code is kept out of links by :func:`links`."""
    return FENCE.sub("", text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped (``\\w``, ``-`` and spaces
    kept), spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading: its text
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a markdown file, duplicates numbered as GitHub numbers them."""
    seen: dict[str, int] = {}
    out = set()
    for _, title in HEADING.findall(prose(path.read_text(encoding="utf-8"))):
        base = slug(title)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def headings(path: Path, level: int) -> list[str]:
    return [t for hashes, t in HEADING.findall(prose(path.read_text(encoding="utf-8")))
            if len(hashes) == level]


def links(path: Path) -> list[str]:
    """The targets of a file's markdown links and images, outside code."""
    text = INLINE_CODE.sub(lambda m: "code", prose(path.read_text(encoding="utf-8")))
    return LINK.findall(text)


def broken_links(path: Path) -> list[str]:
    """Each relative link or image of ``path`` whose file is missing, or whose ``#anchor`` names
    no heading of its markdown target: ``"target: why"``."""
    bad = []
    for target in links(path):
        if not target or SCHEME.match(target):
            continue  # http(s), mailto: not checked here (no network)
        file, _, anchor = target.partition("#")
        if file.startswith("/"):
            bad.append(f"{target}: absolute path (use one relative to {path.name})")
            continue
        dest = (path.parent / file).resolve() if file else path
        if not dest.exists():
            bad.append(f"{target}: {dest.relative_to(ROOT) if ROOT in dest.parents else dest} "
                       f"does not exist")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{target}: no heading #{anchor} in {dest.name}")
    return bad


def makefile() -> str:
    return (ROOT / "Makefile").read_text(encoding="utf-8")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_and_images_resolve(page):
    assert not broken_links(page), f"{page.relative_to(ROOT)}: " + "; ".join(broken_links(page))


def test_the_link_check_finds_a_missing_file_and_a_missing_heading(tmp_path):
    (tmp_path / "a.md").write_text("# Top\n\n## The sweep's page\n\n```\n# not a heading\n```\n")
    page = tmp_path / "b.md"
    page.write_text("[ok](a.md#the-sweeps-page) [self](#here) ![img](nope.png)\n"
                    "[gone](a.md#not-a-heading) `[code](ignored.md)` [web](https://example.org)\n"
                    "```\n[fenced](ignored-too.md)\n```\n\n## Here\n")
    assert [b.split(":")[0] for b in broken_links(page)] == ["nope.png", "a.md#not-a-heading"]
    assert slug("Config groups (`conf/`)") == "config-groups-conf"
    assert slug("Relevance rule: labels that survive re-chunking") == \
        "relevance-rule-labels-that-survive-re-chunking"


def test_readme_is_short_and_has_its_sections_in_order():
    size = len(README.read_bytes())
    assert size <= MAX_README_BYTES, \
        f"README.md is {size:,} bytes (at most {MAX_README_BYTES:,}): move detail to docs/"
    assert tuple(headings(README, 2)) == SECTIONS
    text = README.read_text(encoding="utf-8")
    assert text.index("](docs/wins-by-kind.svg)") < text.index("## Set-up")
    sections = dict(zip(SECTIONS, re.split(r"^## .*$", text, flags=re.M)[1:]))
    setup = re.findall(r"^(make \S+)", sections["Set-up"], re.M)
    assert setup == ["make install", "make test"]
    expected = {"The main job": ("make sweep", "make tables", "make ui"),
                "Your own documents": ("ragexp init", "cd my-docs",
                                       "python -m ragexp --config-dir conf"),
                "Picking a winner": ("ragexp compare", "ragexp confirm", "ragexp gate"),
                "Serving the winner": ("ragexp serve", "mlflow models serve")}
    for section, commands in expected.items():
        missing = [c for c in commands if c not in sections[section]]
        assert not missing, f"README section {section!r} lacks {missing}"


def test_read_more_links_every_docs_page():
    section = README.read_text(encoding="utf-8").split("## Read more", 1)[1]
    linked = {t.partition("#")[0] for t in LINK.findall(section)}
    assert {f"docs/{p.name}" for p in DOCS} <= linked
    assert DOCS, "no docs pages"


def test_each_block_lives_on_the_page_its_make_target_writes():
    """The Makefile passes each block's writer a page under docs/; that page has the block's
    markers, once, and no other page (README included) has them."""
    written = dict(re.findall(r"-m (tools\.\w+) (?:--readme )?(docs/[\w-]+\.md)", makefile()))
    assert set(written) == set(BLOCKS), written
    for tool, names in BLOCKS.items():
        for name in names:
            holders = [p for p in PAGES if f"<!-- {name}:start -->" in p.read_text("utf-8")]
            assert holders == [ROOT / written[tool]], (name, holders)
            text = holders[0].read_text(encoding="utf-8")
            assert text.count(f"<!-- {name}:start -->") == 1
            assert text.index(f"<!-- {name}:start -->") < text.index(f"<!-- {name}:end -->")
    for name in README_BLOCKS:
        holders = [p for p in PAGES if f"<!-- {name}:start -->" in p.read_text("utf-8")]
        assert holders == [README], (name, holders)
        assert "--readme README.md" in makefile()


def test_make_help_documents_every_target():
    text = makefile()
    phony = set(re.search(r"^\.PHONY:(.*)$", text, re.M).group(1).split())
    targets = set(re.findall(r"^([a-z][a-z-]*):", text, re.M))
    documented = set(re.findall(r"^([a-z][a-z-]*):.*## ", text, re.M))
    assert targets == phony == documented, (targets ^ phony) | (targets ^ documented)
    assert "architecture" in phony


def test_architecture_page_is_what_make_architecture_writes():
    committed = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert architecture.render() == committed, \
        "docs/architecture.md is stale: run make architecture"
