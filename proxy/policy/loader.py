"""Reading and compiling the two policy files into one immutable ``CompiledPolicy``.

Each file is read in one piece and only used if it did not change while being read (same inode,
mtime and size before and after, and as many bytes as it has); what is parsed is exactly what is
hashed. Anything invalid raises ``PolicyError`` and nothing is compiled, so a caller either gets a
complete new policy or keeps the one it had.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from proxy.ops.stablefiles import read_stable
from proxy.policy.index import RuleIndex
from proxy.policy.model import check_model
from proxy.policy.rules import ParsedPolicy, PolicyError, Problem, parse_policy


@dataclass(frozen=True)
class PolicyFiles:
    """The exact contents of the model and policy files, and one digest over both."""

    model_path: Path
    policy_path: Path
    model_text: str
    policy_text: str
    digest: str


@dataclass(frozen=True)
class CompiledPolicy:
    """A validated policy, ready to decide with: the files it came from, its rules, its index."""

    files: PolicyFiles
    parsed: ParsedPolicy
    index: RuleIndex


def read_files(model_path: Path, policy_path: Path) -> PolicyFiles:
    """Both files as text. Raises ``FileChanging``, ``OSError`` or ``PolicyError`` (not UTF-8)."""
    (_, model_bytes), (_, policy_bytes) = read_stable(model_path), read_stable(policy_path)
    return PolicyFiles(model_path, policy_path, _decode(model_bytes, model_path),
                       _decode(policy_bytes, policy_path), policy_digest(model_bytes, policy_bytes))


def files_from_text(model_path: Path, policy_path: Path, model_text: str,
                    policy_text: str) -> PolicyFiles:
    """Policy files given as text (e.g. as an audit record kept them), digested as on disk."""
    return PolicyFiles(model_path, policy_path, model_text, policy_text,
                       policy_digest(model_text.encode("utf-8"), policy_text.encode("utf-8")))


def policy_digest(model_bytes: bytes, policy_bytes: bytes) -> str:
    """SHA-256 over model.conf, a NUL byte and policy.csv: the policy's digest everywhere."""
    digest = hashlib.sha256()
    for chunk in (model_bytes, b"\0", policy_bytes):
        digest.update(chunk)
    return digest.hexdigest()


def _decode(data: bytes, path: Path) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PolicyError([Problem(str(path), None, f"not UTF-8 text: {exc}")]) from None


def compile_files(files: PolicyFiles) -> CompiledPolicy:
    """Validate and compile; raises ``PolicyError`` listing every error found."""
    problems = check_model(files.model_text, str(files.model_path))
    parsed = parse_policy(files.policy_text, str(files.policy_path))
    problems += [p for p in parsed.problems if p.severity == "error"]
    if problems:
        raise PolicyError(problems)
    return CompiledPolicy(files, parsed, RuleIndex(parsed.rules, parsed.grants,
                                                    parsed.restrictions))


def load(model_path: Path, policy_path: Path) -> CompiledPolicy:
    """Read and compile both files (start-up and the CLI)."""
    return compile_files(read_files(model_path, policy_path))
