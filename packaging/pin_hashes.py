"""Pin the SHA-256 of every registry file that has none, from the Hugging Face Hub.

    python packaging/pin_hashes.py [models.yaml] [--dry-run]

For each variant of models.yaml with a `file:` and `sha256: null`, asks the Hub (HF_ENDPOINT
and HF_TOKEN are honoured, as by `ember pull`) for the listing of the repo its first `kind: hf`
source names, and writes the LFS SHA-256 the Hub publishes for that file into the `sha256:`
line. The file is edited line by line: comments, order and every other line stay as they are.
A file the Hub does not store in LFS (so publishes no SHA-256 for), a repo or file the Hub
does not have, and a variant without an hf source are left null and listed. A split GGUF
(its parts in `files`) is skipped: its checksums go on each part, not on the variant. Run it
with Hub access whenever models.yaml gains variants. A variant's projector (an `mmproj:` block,
written once and shared by its quantizations through a YAML anchor) is pinned the same way,
from its own hf source.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

from app.pull.hf_hub import list_repo
from backends.errors import EmberError

_SHA_LINE = re.compile(r"^(\s*)sha256:\s*null\b")
_VARIANT_SHA = re.compile(r"^\s+sha256:")
_MMPROJ = re.compile(r"^(\s+)mmproj:(\s+&\S+)?\s*$")  # a block (an alias is `mmproj: *name`)


@dataclass
class Unpinned:
    line: int  # index of the `sha256: null` line
    file: str
    repo: str | None = None
    source_file: str | None = None

    @property
    def hub_file(self) -> str:
        return self.source_file or self.file


def find_unpinned(text: str) -> list[Unpinned]:
    """The variants whose `sha256:` is null and whose `file:` names one file, with the repo and
    file of their first hf source. YAML gives the structure; the n-th variant's `sha256:` line
    is the n-th line that starts with the variants' indent and `sha256:`."""
    variants = [v for m in yaml.safe_load(text)["models"] for v in m.get("variants", [])]
    lines = text.splitlines()
    indent = None
    sha_lines = []
    for i, line in enumerate(lines):
        if _VARIANT_SHA.match(line) and not line.lstrip().startswith("- {"):
            width = len(line) - len(line.lstrip())
            indent = width if indent is None else indent
            if width == indent:
                sha_lines.append(i)
    if len(sha_lines) != len(variants):
        raise SystemExit(f"{len(variants)} variants but {len(sha_lines)} `sha256:` lines at "
                         "the variants' indent: every variant needs its own sha256 line")
    found = []
    for v, i in zip(variants, sha_lines, strict=True):
        if v.get("sha256") is not None or not v.get("file"):
            continue
        if v.get("files"):  # a split GGUF: its checksums go on its parts, pinned by hand
            continue
        if not _SHA_LINE.match(lines[i]):
            raise SystemExit(f"line {i + 1}: expected `sha256: null` for {v['file']}")
        hf = next((s for s in v.get("sources") or [] if s.get("kind") == "hf"), {})
        found.append(Unpinned(i, v["file"], hf.get("repo"), hf.get("file")))
    return found + find_unpinned_projectors(lines)


def find_unpinned_projectors(lines: list[str]) -> list[Unpinned]:
    """The `mmproj:` blocks whose `sha256:` is null, with the repo and file of their first hf
    source: each block (its lines below `mmproj:`, indented deeper) read as YAML on its own."""
    found = []
    for i, line in enumerate(lines):
        head = _MMPROJ.match(line)
        if not head:
            continue
        indent = len(head.group(1))
        end = i + 1
        while end < len(lines) and (not lines[end].strip()
                                    or len(lines[end]) - len(lines[end].lstrip()) > indent):
            end += 1
        block = yaml.safe_load("\n".join(["mmproj:", *(x[indent:] for x in lines[i + 1:end])]))
        proj = (block or {}).get("mmproj") or {}
        if proj.get("sha256") is not None or not proj.get("file"):
            continue
        sha = next((j for j in range(i + 1, end) if _SHA_LINE.match(lines[j])
                    and len(lines[j]) - len(lines[j].lstrip()) == indent + 2), None)
        if sha is None:
            raise SystemExit(f"line {i + 1}: expected `sha256: null` in the mmproj block")
        hf = next((s for s in proj.get("sources") or [] if s.get("kind") == "hf"), {})
        found.append(Unpinned(sha, proj["file"], hf.get("repo"), hf.get("file")))
    return found


def pin(path: Path, dry_run: bool = False, out=print) -> tuple[int, list[str]]:
    """Fill what the Hub knows; (how many were pinned, why each other one was not)."""
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    listings: dict[str, dict[str, str | None] | str] = {}
    pinned, missed = 0, []
    for u in find_unpinned(text):
        if not u.repo:
            missed.append(f"{u.file}: no hf source")
            continue
        if u.repo not in listings:
            try:
                listings[u.repo] = {f.path: (f.lfs.sha256 if f.lfs else None)
                                    for f in list_repo(u.repo)}
            except EmberError as e:
                listings[u.repo] = str(e)
        listing = listings[u.repo]
        if isinstance(listing, str):
            missed.append(f"{u.file}: {listing}")
            continue
        if u.hub_file not in listing:
            missed.append(f"{u.file}: {u.repo} has no file {u.hub_file}")
            continue
        sha = listing[u.hub_file]
        if not sha:
            missed.append(f"{u.file}: {u.repo}/{u.hub_file} is not an LFS file (no sha256)")
            continue
        lines[u.line] = lines[u.line].replace("sha256: null", f"sha256: {sha}", 1)
        pinned += 1
        out(f"{u.repo}/{u.hub_file}: {sha}")
    if pinned and not dry_run:
        tmp = path.with_suffix(".yaml.tmp")
        tmp.write_text("".join(lines), encoding="utf-8")
        tmp.replace(path)
    return pinned, missed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("registry", nargs="?", type=Path,
                        default=Path(__file__).resolve().parent.parent / "models.yaml")
    parser.add_argument("--dry-run", action="store_true", help="print, do not write")
    args = parser.parse_args(argv)
    pinned, missed = pin(args.registry, args.dry_run)
    for why in missed:
        print(f"not pinned: {why}", file=sys.stderr)
    print(f"{pinned} pinned, {len(missed)} left null")
    return 0


if __name__ == "__main__":
    sys.exit(main())
