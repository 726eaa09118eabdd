"""What the site would otherwise fetch from other hosts, shipped with it: mermaid 11 (Material's
bundle loads ``mermaid@11`` from a public CDN unless a global ``mermaid`` is already on the
page) and the Roboto fonts (Material links Google Fonts unless ``theme.font`` is false).

``make docs`` runs ``python -m docsgen.vendor`` before it builds: ``npm pack`` takes each pinned
package's tarball from the npm registry (the tarball only, none of its dependencies: only
``dist/mermaid.min.js`` and a few font files are wanted), its sha512 is checked against the pin
below, and the wanted files are unpacked into ``build/docs-vendor/``. The hook
(``docsgen.hooks``) puts that folder into the site at ``assets/vendor/``; mkdocs.yml loads
``mermaid.min.js`` through ``extra_javascript`` and ``fonts.css`` through ``extra_css``. A
second run with the same pins does nothing (its stamp names them).

Raising a pin: change ``version`` and ``integrity`` together (``npm view PACKAGE@VERSION
dist.integrity``). mermaid stays on 11 while Material's bundle asks for ``mermaid@11``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / "build" / "docs-vendor"  # what the hook puts into the site
SITE_PATH = "assets/vendor"  # where in the site
STAMP = ".pins"
NPM_TIMEOUT_S = 300  # three tarballs, about 24 MB, from the npm registry


@dataclass(frozen=True)
class Package:
    name: str
    version: str
    integrity: str  # the registry's dist.integrity: "sha512-" + base64 of the tarball's digest

    @property
    def spec(self) -> str:
        return f"{self.name}@{self.version}"


MERMAID = Package(
    "mermaid",
    "11.17.2",
    "sha512-V6K3C8EBdEsPFZXSKMJe6ppQOENxuHARr9GvHX4hh47lAbhMRD9qf4oEK7LoaRQxULMa80/qt5gHO73aCleBBg==",
)
ROBOTO = Package(
    "@fontsource/roboto",
    "5.3.0",
    "sha512-BapRJOWYP+LZ21zp+wBQjfpPYKRoxc4LspJ/RLuI+HSMBD5u/X4O+ESDrSvEqDSy0rAl7GwBJ+09mdc16cVQ1Q==",
)
ROBOTO_MONO = Package(
    "@fontsource/roboto-mono",
    "5.3.0",
    "sha512-yhwplHMHW9dCk+1pZuERfcJe+K3rosGVZEoK0XktkxRSqQ9qsipSwwiuW2/8Qmtp9lzu3Ixa/ie4BMH3i8CkZQ==",
)
PACKAGES = (MERMAID, ROBOTO, ROBOTO_MONO)


@dataclass(frozen=True)
class Font:
    package: Package
    family: str
    weights: tuple[int, ...]


# What Material asks Google Fonts for (its default theme.font): Roboto 300, 400, 700 and Roboto
# Mono 400, 700, each upright and italic; the Latin subsets only (the browser takes another
# font for a character outside their unicode-range).
FONTS = (Font(ROBOTO, "Roboto", (300, 400, 700)), Font(ROBOTO_MONO, "Roboto Mono", (400, 700)))
SUBSETS = ("latin", "latin-ext")
STYLES = ("normal", "italic")

# A face in fontsource's CSS: its comment names it, its block states the unicode-range.
_FACE = re.compile(r"/\* (?P<name>[a-z0-9-]+) \*/\s*@font-face \{(?P<body>[^}]*)\}")
_RANGE = re.compile(r"unicode-range:\s*([^;]+);")


def _integrity(tarball: Path) -> str:
    digest = hashlib.sha512(tarball.read_bytes()).digest()
    return "sha512-" + base64.b64encode(digest).decode()


def fetch(into: Path) -> dict[Package, Path]:
    """Each package's tarball from the npm registry (``npm pack``), its digest checked."""
    packed = subprocess.run(
        ["npm", "pack", "--json", "--pack-destination", str(into), *(p.spec for p in PACKAGES)],
        cwd=into,
        capture_output=True,
        text=True,
        timeout=NPM_TIMEOUT_S,
        check=False,
    )
    if packed.returncode != 0:
        raise SystemExit(f"npm pack failed ({packed.returncode}):\n{packed.stderr}")
    made = {f"{m['name']}@{m['version']}": into / m["filename"] for m in json.loads(packed.stdout)}
    tarballs = {}
    for package in PACKAGES:
        tarball = made[package.spec]
        if (found := _integrity(tarball)) != package.integrity:
            raise SystemExit(f"{package.spec}: sha512 {found}, pinned {package.integrity}")
        tarballs[package] = tarball
    return tarballs


def _member(tarball: Path, path: str) -> bytes:
    with tarfile.open(tarball) as archive:
        member = archive.extractfile(f"package/{path}")
        if member is None:
            raise SystemExit(f"{tarball.name}: no file package/{path}")
        return member.read()


def font_faces(font: Font, tarball: Path, into: Path) -> list[str]:
    """``font``'s @font-face rules, their woff2 files written into ``into/fonts``: fontsource's
    rules for the wanted subsets, weights and styles, the woff fallback left out."""
    rules = []
    for weight in font.weights:
        for style in STYLES:
            css = _member(tarball, f"{weight}{'-italic' if style == 'italic' else ''}.css")
            faces = {m["name"]: m["body"] for m in _FACE.finditer(css.decode())}
            for subset in SUBSETS:
                name = f"{font.package.name.rsplit('/', 1)[-1]}-{subset}-{weight}-{style}"
                if name not in faces:
                    raise SystemExit(f"{tarball.name}: no face {name}")
                woff2 = f"{name}.woff2"
                (into / "fonts" / woff2).write_bytes(_member(tarball, f"files/{woff2}"))
                found = _RANGE.search(faces[name])
                if found is None:
                    raise SystemExit(f"{tarball.name}: {name} states no unicode-range")
                rules.append(
                    f"@font-face {{\n  font-family: '{font.family}';\n  font-style: {style};\n"
                    f"  font-display: swap;\n  font-weight: {weight};\n"
                    f"  src: url(fonts/{woff2}) format('woff2');\n"
                    f"  unicode-range: {found[1].strip()};\n}}\n"
                )
    return rules


def unpack(tarballs: dict[Package, Path], into: Path) -> None:
    """The wanted files of the tarballs into ``into``: mermaid.min.js, fonts.css and its fonts,
    and each package's license."""
    (into / "fonts").mkdir(parents=True)
    (into / "mermaid.min.js").write_bytes(_member(tarballs[MERMAID], "dist/mermaid.min.js"))
    header = "/* Roboto and Roboto Mono (SIL Open Font License 1.1), from fontsource: "
    header += ", ".join(font.package.spec for font in FONTS) + " (docsgen/vendor.py) */\n"
    rules = [rule for font in FONTS for rule in font_faces(font, tarballs[font.package], into)]
    (into / "fonts.css").write_text(header + "\n".join(rules))
    for package, tarball in tarballs.items():
        license_name = f"LICENSE-{package.name.rsplit('/', 1)[-1]}.txt"
        (into / license_name).write_bytes(_member(tarball, "LICENSE"))


def pins() -> str:
    return "\n".join(f"{p.spec} {p.integrity}" for p in PACKAGES) + "\n"


def ready() -> bool:
    stamp = FOLDER / STAMP
    return stamp.is_file() and stamp.read_text() == pins()


def files() -> list[str]:
    """The vendored files, relative to ``FOLDER``; the folder must be made (``make docs``)."""
    if not ready():
        raise FileNotFoundError(
            f"{FOLDER.relative_to(ROOT)} is missing or stale: `make docs` (or "
            "`python -m docsgen.vendor`) fetches mermaid and the fonts from the npm registry"
        )
    return sorted(
        p.relative_to(FOLDER).as_posix()
        for p in FOLDER.rglob("*")
        if p.is_file() and p.name != STAMP
    )


def main() -> None:
    if ready():
        return
    with tempfile.TemporaryDirectory(prefix="docs-vendor-") as scratch:
        made = Path(scratch) / "made"
        unpack(fetch(Path(scratch)), made)
        (made / STAMP).write_text(pins())
        shutil.rmtree(FOLDER, ignore_errors=True)
        FOLDER.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(made, FOLDER)
    print(f"{FOLDER.relative_to(ROOT)}: " + ", ".join(p.spec for p in PACKAGES), file=sys.stderr)


if __name__ == "__main__":
    main()
