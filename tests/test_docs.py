"""The README and the documentation site (``docs/``, ``mkdocs.yml``) stay short, whole and linked.

- README.md is at most 8 KiB; every relative link of it (and of ``deploy/README.md``) names a file of
  the project, and a ``#fragment`` into a Markdown file names one of that file's headings;
- no link of the README or of a page leaves the project (a clone has no ``../shared``);
- the exit-code table of ``docs/cli.md`` lists every class of the error tree with its exit code;
- ``bench/RESULTS.md`` starts with the table of current figures against their targets;
- ``mkdocs build --strict`` passes, and the configuration would fail it on a broken link, a broken
  anchor and a page left out of the navigation (each tried on a copy of ``docs/``). MkDocs comes with
  the ``dev`` extra: missing, these tests skip with a reason locally and fail under CI.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest

import lakefs_core.errors as errors_module
from lakefs_core.errors import LakeFSError
from tests.support.env import skip_or_fail
from tests.support.timing import scaled

REPO_ROOT = Path(__file__).resolve().parents[1]
DOCS = REPO_ROOT / "docs"
README_LIMIT = 8192

# [text](target) and [text](target "title"); images too. Code spans are removed before matching.
_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
_CODE_SPAN = re.compile(r"(`+).*?\1", re.DOTALL)


def published_pages() -> list[Path]:
    """Every Markdown page of the site (``docs/_pending/`` holds notes not yet folded in)."""
    return sorted(p for p in DOCS.rglob("*.md") if "_pending" not in p.relative_to(DOCS).parts)


def links(path: Path) -> list[str]:
    text = _CODE_SPAN.sub("", _FENCE.sub("", path.read_text(encoding="utf-8")))
    return _LINK.findall(text)


def slug(heading: str) -> str:
    """The anchor Python-Markdown's ``toc`` extension (MkDocs' default) gives a heading."""
    text = re.sub(r"[`*_]", "", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors(path: Path) -> set[str]:
    text = _FENCE.sub("", path.read_text(encoding="utf-8"))
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.+?)\s*#*\s*$", text, re.MULTILINE)}


def local_targets(path: Path) -> list[tuple[str, Path, str]]:
    """``(link, resolved file, fragment)`` of every link of ``path`` that is not a URL."""
    out = []
    for target in links(path):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        file_part, _, fragment = target.partition("#")
        resolved = (path.parent / file_part).resolve() if file_part else path.resolve()
        out.append((target, resolved, fragment))
    return out


def test_the_readme_is_at_most_8_kib() -> None:
    size = len((REPO_ROOT / "README.md").read_bytes())
    assert size <= README_LIMIT, f"README.md is {size} bytes; move detail into docs/"


@pytest.mark.parametrize("name", ["README.md", "deploy/README.md"])
def test_every_relative_link_of_a_readme_resolves(name: str) -> None:
    path = REPO_ROOT / name
    broken = []
    for target, resolved, fragment in local_targets(path):
        if not resolved.exists():
            broken.append(f"{target}: no such file")
        elif fragment and resolved.suffix == ".md" and fragment not in anchors(resolved):
            broken.append(f"{target}: no heading with that anchor")
    assert not broken, f"{name}: {broken}"


def test_no_link_leaves_the_project() -> None:
    outside = [
        f"{path.relative_to(REPO_ROOT)}: {target}"
        for path in [REPO_ROOT / "README.md", *published_pages()]
        for target, resolved, _ in local_targets(path)
        if not resolved.is_relative_to(REPO_ROOT)
    ]
    assert not outside, outside
    # Nor in words: a clone has no ../shared beside it (the tests' fixtures are described as such).
    mentions = [
        str(path.relative_to(REPO_ROOT))
        for path in [REPO_ROOT / "README.md", *published_pages()]
        if "../shared" in path.read_text(encoding="utf-8")
    ]
    assert not mentions, f"these send the reader to ../shared: {mentions}"


def test_the_exit_code_table_lists_every_error_class() -> None:
    text = (DOCS / "cli.md").read_text(encoding="utf-8")
    rows = {(int(code), name) for code, name in re.findall(r"^\| (\d+) \| `(\w+)` \|", text, re.MULTILINE)}
    classes = {
        (cls.exit_code, cls.__name__)
        for cls in vars(errors_module).values()
        if isinstance(cls, type) and issubclass(cls, LakeFSError) and "exit_code" in vars(cls)
    }
    assert (17, "PurgedError") in classes  # the table is checked against the real tree
    assert classes <= rows, f"missing from docs/cli.md's exit-code table: {sorted(classes - rows)}"
    assert rows <= classes, f"not in lakefs_core.errors: {sorted(rows - classes)}"


def test_the_benchmark_results_start_with_the_targets() -> None:
    text = (REPO_ROOT / "bench" / "RESULTS.md").read_text(encoding="utf-8")
    first = text.split("\n## ", 2)[1]
    assert first.startswith("Current figures against their targets"), first[:80]
    assert re.search(r"^\| *figure *\| *target *\|", first, re.MULTILINE), "no table of targets"


def mkdocs_build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    if importlib.util.find_spec("mkdocs") is None:
        skip_or_fail("MkDocs is not installed (the `dev` extra: make venv)")
    command = ["build", "--strict", "--config-file", str(config), "--site-dir", str(site)]
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", *command],
        capture_output=True,
        text=True,
        check=False,
        timeout=scaled(120),
    )


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    out = mkdocs_build(REPO_ROOT / "mkdocs.yml", tmp_path / "site")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "WARNING" not in out.stderr, out.stderr
    built = {p.relative_to(tmp_path / "site").as_posix() for p in (tmp_path / "site").rglob("index.html")}
    expected = {"index.html"} | {f"{p.stem}/index.html" for p in published_pages() if p.stem != "index"}
    assert expected <= built, expected - built


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("gc.md", "\n[a page that does not exist](nowhere.md)\n"), "nowhere.md"),
        (("gc.md", "\n[a heading that does not exist](cli.md#nowhere)\n"), "nowhere"),
        (("not-in-nav.md", "# A page\n"), "not-in-nav.md"),
    ],
    ids=["broken-link", "broken-anchor", "page-not-in-nav"],
)
def test_the_strict_build_fails_on(tmp_path: Path, change: tuple[str, str], message: str) -> None:
    """The site's own configuration, on a copy of the pages with one mistake added."""
    shutil.copy(REPO_ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    shutil.copytree(DOCS, tmp_path / "docs")
    name, text = change
    with (tmp_path / "docs" / name).open("a", encoding="utf-8") as f:
        f.write(text)
    out = mkdocs_build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert out.returncode != 0, out.stdout + out.stderr
    assert message in out.stderr, out.stderr
