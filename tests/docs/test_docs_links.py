"""Every link in the README and docs/ resolves inside the repository (files and anchors).

A clone of the repository is all a reader has: a link to a file outside it (such as a
contract kept beside the checkout) or to a heading that no longer exists is a broken promise.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("**/*.md"))]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")


def _anchors(markdown: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    anchors = set()
    for heading in re.findall(r"^#{1,6}\s+(.*)$", markdown, flags=re.M):
        text = heading.strip().lower()
        anchors.add("".join(c for c in text.replace(" ", "-") if c.isalnum() or c in "-_"))
    return anchors


def _links(path: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)  # code is not a link
    return [a or b for a, b in LINK.findall(text)]


@pytest.mark.parametrize("doc", [d for d in DOCS if d.exists()], ids=lambda p: p.name)
def test_links_resolve_inside_the_repository(doc: Path) -> None:
    for link in _links(doc):
        if re.match(r"^[a-z]+://", link) or link.startswith("mailto:"):
            assert "localhost" in link or "127.0.0.1" in link, (
                f"{doc.name}: external link {link}: keep the reference inside the repository"
            )
            continue
        target, _, anchor = link.partition("#")
        file = (doc.parent / target).resolve() if target else doc
        assert file.exists(), f"{doc.name}: {link} points at a missing file"
        assert ROOT in file.parents or file == ROOT, f"{doc.name}: {link} leaves the repository"
        if anchor and file.suffix == ".md":
            assert anchor in _anchors(file.read_text()), f"{doc.name}: no heading #{anchor}"


def test_nothing_points_at_a_contract_outside_the_repository() -> None:
    """The API is documented in docs/api.md; no file sends a reader to a file beside the clone."""
    skip = {".git", ".venv", "node_modules", "__pycache__"}
    offenders = []
    for path in ROOT.rglob("*"):
        if skip & set(path.relative_to(ROOT).parts) or path.suffix not in {".py", ".md", ".toml"}:
            continue
        if path == Path(__file__).resolve():
            continue
        if "shared/API.md" in path.read_text(errors="replace"):
            offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []
