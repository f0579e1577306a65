"""Checking audit files against signed digests, with the public key only (no HMAC key).

Every digest's signature is checked, and that each names the one before (``prev_signature``) and
counts on by one: a digest edited, forged, dropped from the middle or reordered is named, and no
digest after it is trusted. Every file a trusted digest covers must be among the files given (a
rotated file is found by the first seq its name carries) and must begin with exactly the bytes
the digest hashed. The chain itself is checked too (``verify``; HMAC seals without the key only
for links and form), with each digest's last record as an anchor. What is wrong is named as one
of: ``modified``, ``deleted`` (a covered file missing, or records missing), ``inserted``,
``reordered``, ``truncated`` (the tail cut) and ``digests`` (the digest file itself). Records
after the last trusted digest are proven by none: the report names that window.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from proxy.audit.chain import Link, canonical
from proxy.audit.digests import DIGEST_SCHEMA, first_seq
from proxy.audit.files import read_only
from proxy.audit.signing import signed_by
from proxy.audit.verify import Broken, Intact, verify

_CHUNK = 1024 * 1024


@dataclass(frozen=True)
class Finding:
    """One thing wrong: its kind and, in words, where and what."""

    kind: str  # modified | deleted | inserted | reordered | truncated | digests
    what: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.what}"


@dataclass(frozen=True)
class Proof:
    """What the digests prove about the files given."""

    digests: int  # trusted digests (signature and sequence good)
    findings: tuple[Finding, ...]
    proven: Link | None  # the last record the last trusted digest covers
    window: str  # what no digest proves

    @property
    def ok(self) -> bool:
        return not self.findings

    def __str__(self) -> str:
        head = (f"ok: {self.digests} signed digest(s) verified" if self.ok
                else f"audit files fail their signed digests ({len(self.findings)} finding(s))")
        proven = (f"proven up to seq {self.proven.seq} ({self.proven.seq}:{self.proven.hash})"
                  if self.proven else "no record is proven by a digest")
        return "\n".join([head, *(f"  {f}" for f in self.findings), proven,
                          f"unprovable: {self.window}"])


def prove(paths: Sequence[Path], digest_path: Path, public_key: Ed25519PublicKey,
          key: bytes | None = None) -> Proof:
    """Check ``paths`` (in chain order) against the digests in ``digest_path``; OSError when a
    file cannot be read."""
    digests, findings = _trusted(digest_path, public_key)
    start = _first_given_seq(paths)
    anchors = [Link(d["last"]["seq"], d["last"]["hash"]) for d in digests
               if d["last"] is not None and (start is None or d["last"]["seq"] >= start)]
    chain = verify(paths, key, anchors=anchors, unkeyed=True)
    findings += _file_findings(paths, digests, chain)
    if isinstance(chain, Broken) and not any(chain.file in f.what for f in findings):
        findings.append(Finding(_kind(chain.what), str(chain)))
    last = digests[-1] if digests else None
    proven = Link(last["last"]["seq"], last["last"]["hash"]) if last and last["last"] else None
    return Proof(len(digests), tuple(findings), proven, _window(last, chain))


def _trusted(path: Path, public_key: Ed25519PublicKey) -> tuple[list[dict[str, Any]],
                                                                 list[Finding]]:
    """The digests up to the first that fails, and what failed."""
    trusted: list[dict[str, Any]] = []
    with read_only(path) as handle:
        for number, raw in enumerate(handle, start=1):
            digest, problem = _digest(raw, public_key)
            previous = trusted[-1] if trusted else None
            problem = problem or _sequence(digest, previous)
            if problem is not None:
                return trusted, [Finding("digests", f"{path}:{number}: {problem}; no later "
                                                    "digest is trusted")]
            trusted.append(digest)
    if not trusted:
        return trusted, [Finding("digests", f"{path}: no digest in it")]
    return trusted, []


def _digest(raw: bytes, public_key: Ed25519PublicKey) -> tuple[dict[str, Any], str | None]:
    try:
        digest = json.loads(raw)
    except (ValueError, RecursionError):
        return {}, "not valid JSON (edited or cut short)"
    if not isinstance(digest, dict) or digest.get("schema") != DIGEST_SCHEMA:
        return {}, f"not an {DIGEST_SCHEMA} digest"
    body = {k: v for k, v in digest.items() if k != "signature"}
    if not signed_by(public_key, canonical(body), digest.get("signature")):
        return {}, "the signature does not verify with this public key (edited or forged)"
    if raw != canonical(digest) + b"\n":
        return {}, "not byte for byte the digest icegov writes"
    return digest, None


def _sequence(digest: dict[str, Any], previous: dict[str, Any] | None) -> str | None:
    expected = previous["digest"] + 1 if previous else 1
    prev_signature = previous["signature"] if previous else None
    if digest.get("digest") != expected or digest.get("prev_signature") != prev_signature:
        return (f"digest {digest.get('digest')} does not follow digest {expected - 1}: digests "
                "were deleted, reordered or replaced")
    return None


def _first_given_seq(paths: Sequence[Path]) -> int | None:
    for path in paths:
        if path.stat().st_size:
            return first_seq(path)
    return None


def _resolve(entry: dict[str, Any], given: dict[str, Path]) -> Path | None:
    """The given file an entry names: a rotated file by the first seq in its name, else the
    file of that name, unless it starts at another record (then the entry's file is gone)."""
    name, first = entry["name"], entry["first_seq"]
    if first is not None:
        rotated = f"{name}.{first:012d}-"
        for base, candidate in given.items():
            if base.startswith(rotated):
                return candidate
    named = given.get(name)
    if named is None or first is None:
        return named
    return named if first_seq(named) in (first, None) else None


def _file_findings(paths: Sequence[Path], digests: list[dict[str, Any]],
                   chain: Intact | Broken) -> list[Finding]:
    given = {p.name: p for p in paths}
    checks: dict[Path, list[tuple[int, dict[str, Any]]]] = {}
    findings: list[Finding] = []
    missing: set[object] = set()
    for digest in reversed(digests):  # a missing file is named as the newest digest knew it
        for entry in digest["files"]:
            path = _resolve(entry, given)
            if path is None:
                known = entry["first_seq"] or entry["name"]  # one file, before and after rotation
                if known not in missing:
                    missing.add(known)
                    findings.append(_absent(entry, digest, given.get(entry["name"])))
                continue
            checks.setdefault(path, []).append((digest["digest"], entry))
    for path, entries in checks.items():
        finding = _check_file(path, entries, chain)
        if finding is not None:
            findings.append(finding)
    return findings


def _absent(entry: dict[str, Any], digest: dict[str, Any], named: Path | None) -> Finding:
    """What became of a covered file no given file is: deleted, or replaced by another file
    under its name (one that starts at another record)."""
    starts = first_seq(named) if named is not None else None
    if starts is None:
        return Finding("deleted", _missing(entry, digest))
    return Finding("modified", f"{entry['name']}, covered by digest {digest['digest']}, starts "
                               f"at seq {starts}, not seq {entry['first_seq']}: replaced by "
                               "another file")


def _missing(entry: dict[str, Any], digest: dict[str, Any]) -> str:
    starts = f", records from seq {entry['first_seq']}" if entry["first_seq"] else ""
    return (f"{entry['name']} ({entry['lines']} lines{starts}), covered by digest "
            f"{digest['digest']}, is missing (not among the files given)")


def _check_file(path: Path, entries: list[tuple[int, dict[str, Any]]],
                chain: Intact | Broken) -> Finding | None:
    """The first digest whose hash of ``path`` does not hold, read once from start to end."""
    hasher, lines, offset = hashlib.sha256(), 0, 0
    with read_only(path) as handle:
        for number, entry in sorted(entries, key=lambda e: (e[1]["size"], e[0])):
            while offset < entry["size"]:
                chunk = handle.read(min(_CHUNK, entry["size"] - offset))
                if not chunk:
                    break
                hasher.update(chunk)
                lines, offset = lines + chunk.count(b"\n"), offset + len(chunk)
            if offset == entry["size"] and hasher.copy().hexdigest() == entry["sha256"]:
                continue
            return _mismatch(path, number, entry, offset, chain)
    return None


def _mismatch(path: Path, number: int, entry: dict[str, Any], size: int,
              chain: Intact | Broken) -> Finding:
    covered = f"digest {number} covered its first {entry['size']} bytes ({entry['lines']} lines)"
    if isinstance(chain, Broken) and chain.file == str(path):
        return Finding(_kind(chain.what), f"{chain}; {covered}, which no longer match")
    if size < entry["size"]:
        return Finding("truncated", f"{path} holds {size} bytes; {covered}: its tail was cut")
    return Finding("modified", f"{path}: {covered}, which no longer match (the chain was "
                               "re-sealed after the change)")


def _kind(what: str) -> str:
    """The kind of a chain break, from ``verify``'s words for it."""
    if "truncated" in what or "cut from the tail" in what:
        return "truncated"
    if what.startswith("reordered"):
        return "reordered"
    if "repeated, inserted" in what or "interleave" in what:
        return "inserted"
    if "deleted" in what:
        return "deleted"
    return "modified"


def _window(last: dict[str, Any] | None, chain: Intact | Broken) -> str:
    end = chain.last_seq if isinstance(chain, Intact) else None
    if last is None:
        return "every record: no trusted digest"
    proven = last["last"]["seq"] if last["last"] else 0
    when = f"digest {last['digest']} ({last['reason']}, {last['time']})"
    if end is not None and end <= proven:
        return (f"none in these files: the last record is covered by {when} (digests cut from "
                "the end of the digest file cannot be seen: keep a copy elsewhere)")
    after = f"seq {proven + 1}..{end}" if end is not None else f"any record after seq {proven}"
    return f"{after}, written after {when}: no digest proves them yet"
