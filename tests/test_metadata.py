"""What a package index shows: licence, version, URLs, dependencies, the long description.

Read from the installed distribution (``dev.py test`` installs the wheel), so these
pin what users get, not what pyproject.toml intends.
"""

from __future__ import annotations

import ast
import os
import re
import tomllib
from importlib import metadata
from pathlib import Path

import chatledger

SOURCE = Path(os.environ.get("CHATLEDGER_SOURCE", Path(__file__).resolve().parents[1]))
META = metadata.metadata("chatledger")
# distribution -> the module it provides
RUNTIME = {
    "alembic": "alembic",
    "cryptography": "cryptography",
    "eventsourcing": "eventsourcing",
    "msgspec": "msgspec",
    "sqlalchemy": "sqlalchemy",
    "pydantic": "pydantic",
    "pydantic-settings": "pydantic_settings",
    "rich": "rich",
    "snowballstemmer": "snowballstemmer",
    "typer": "typer",
}


def test_the_licence_is_an_spdx_expression_with_its_text() -> None:
    """License-Expression is Apache-2.0 and the LICENSE file ships in the distribution."""
    assert META["License-Expression"] == "Apache-2.0"
    assert META.get_all("License-File") == ["LICENSE"]
    shipped = [f for f in metadata.files("chatledger") or [] if f.name == "LICENSE"]
    assert shipped, "LICENSE is not in the installed distribution"
    assert "Apache License\n                           Version 2.0" in shipped[0].read_text()
    assert not [c for c in META.get_all("Classifier") or [] if c.startswith("License ::")]


def test_the_version_is_written_once() -> None:
    """The distribution's version is chatledger.__version__; pyproject.toml declares none."""
    project = tomllib.loads((SOURCE / "pyproject.toml").read_text(encoding="utf-8"))["project"]

    assert META["Version"] == chatledger.__version__
    assert "version" not in project and "version" in project["dynamic"]


def test_the_index_page_links_home_docs_changelog_and_issues() -> None:
    """Project-URL names the home page, docs, changelog, issues; classifiers are present."""
    urls = dict(entry.split(", ", 1) for entry in META.get_all("Project-URL") or [])

    assert set(urls) >= {"Homepage", "Documentation", "Changelog", "Issues"}
    assert all(url.startswith("https://github.com/chatledger/chatledger") for url in urls.values())
    assert "Typing :: Typed" in (META.get_all("Classifier") or [])


def test_the_long_description_has_no_relative_links() -> None:
    """The README (the index page) links absolutely and installs with pip, not dev.py."""
    description = META.get_payload()  # type: ignore[attr-defined]
    links = re.findall(r"\]\(([^)]+)\)", description)

    assert links and [link for link in links if not link.startswith("https://")] == []
    first_block = description.split("```sh\n", 1)[1].split("```", 1)[0]
    assert "pip install chatledger" in first_block and "dev.py" not in first_block


def _imported_top_level_modules() -> set[str]:
    found: set[str] = set()
    for folder in ("chatledger", "domain", "projections", "adapters"):
        for path in (SOURCE / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    found.update(alias.name.split(".")[0] for alias in node.names)
                elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    found.add(node.module.split(".")[0])
    return found


def test_every_runtime_dependency_is_used_and_listed() -> None:
    """Requires-Dist (no extra) is exactly the packages the code imports (none unused)."""
    required = {
        re.split(r"[<>=~!;\[ ]", entry, maxsplit=1)[0].lower()
        for entry in META.get_all("Requires-Dist") or []
        if "extra ==" not in entry
    }

    assert required == set(RUNTIME)
    assert {RUNTIME[name] for name in required} <= _imported_top_level_modules()


def test_the_console_script_is_the_cli_main() -> None:
    """`chatledger` runs chatledger.cli:main."""
    (script,) = [
        e for e in metadata.entry_points(group="console_scripts") if e.name == "chatledger"
    ]

    assert script.value == "chatledger.cli:main"
