"""The docs site builds without a warning, and the pages stay true to the package."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from markdown.extensions.toc import slugify

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def test_mkdocs_build_strict_passes(tmp_path: Path) -> None:
    # --strict turns every warning into an error: a broken link or anchor, a page left
    # out of the nav, a docstring mkdocstrings cannot parse, a missing README section.
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, f"mkdocs build --strict exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"


def _anchors(page: Path) -> set[str]:
    """The heading ids mkdocs gives ``page`` (toc's slugify of the heading's text)."""
    headings = re.findall(r"^#{1,6} (.+)$", page.read_text(), flags=re.M)
    return {slugify(re.sub(r"[`*]", "", h).strip(), "-") for h in headings}


def test_readme_links_point_at_existing_docs_pages_and_headings() -> None:
    links = re.findall(r"\]\((docs/[^)#\s]+)(?:#([^)\s]+))?\)", (ROOT / "README.md").read_text())
    assert links
    for path, anchor in links:
        page = ROOT / path
        assert page.is_file(), f"README links to {path}, which does not exist"
        if anchor:
            assert anchor in _anchors(page), f"README links to {path}#{anchor}, which has no such heading"


def test_architecture_page_names_every_module() -> None:
    text = (DOCS / "architecture.md").read_text()
    package = ROOT / "rlx"
    missing = [
        p.relative_to(ROOT).as_posix()
        for p in sorted(package.rglob("*.py"))
        if "__pycache__" not in p.parts and p.name != "__init__.py" and p.name not in text
    ]
    missing += [d.relative_to(ROOT).as_posix() + "/" for d in sorted(package.iterdir())
                if (d / "__init__.py").is_file() and f"{d.name}/" not in text]
    assert not missing, f"docs/architecture.md does not name: {missing}"


def test_api_reference_renders_every_public_module() -> None:
    rendered = set()
    for page in (DOCS / "api").glob("*.md"):
        rendered |= set(re.findall(r"^::: ([\w.]+)\s*$", page.read_text(), flags=re.M))
    package = ROOT / "rlx"
    modules = []
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if "__pycache__" in path.parts or path.name == "__main__.py":
            continue
        if any(part.startswith("_") and part != "__init__" for part in parts):
            continue  # private: rlx/_moved.py, core/_sync.py, envs/_episodic.py
        if path.name == "__init__.py":
            continue  # packages re-export their modules' names
        modules.append(".".join(parts))
    def rendered_through_its_package(module: str) -> bool:
        # rlx.config renders rlx.config.algorithms, which it star-imports
        package = module.rsplit(".", 1)[0]
        init = ROOT / package.replace(".", "/") / "__init__.py"
        return package in rendered and f"from {module} import *" in init.read_text()

    missing = [m for m in modules if m not in rendered and not rendered_through_its_package(m)]
    assert not missing, f"docs/api/ renders no page for: {missing}"
