"""Policy authors' and auditors' tools on large inputs: who-can, diff, why, audit query.

Inputs are generated: a policy of ``--rules`` rules in ``benchmarks/policy.py``'s realistic mix
(teams holding READ on namespaces, writes on tables, denies, users' own grants) plus a column deny,
a mask and a row filter per 50 rules; ``--principals`` principals with one to three team roles;
a changed copy of the policy (1% of the lines removed, as many added, two role grants changed);
and an audit file of ``--records`` records shaped as icegov writes them (sorted keys, compact
JSON, one decision each, the policy's digest, about 800 bytes) that begins with the policy's
load record (both files' text, as icegov writes it at start-up). Each tool is timed in-process,
as the CLI runs it (policy loading included), wall clock, best of ``--repeat``.

Run: ``python benchmarks/policy_tools.py [--rules 10000] [--records 1000000]``. Prints a
markdown table.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from policy import Shape, policy_text

from proxy.audit.query import Query, raw_lines
from proxy.governance import Action
from proxy.policy.changes import PolicyChange, policy_record
from proxy.policy.diff import diff_policies
from proxy.policy.flips import flips
from proxy.policy.loader import CompiledPolicy, load
from proxy.policy.model import CANONICAL_MODEL
from proxy.policy.patterns import resource_from_text
from proxy.policy.whocan import candidates, merged, who_can
from proxy.policy.why import find_record, replay

START = datetime(2026, 11, 1, tzinfo=UTC)
ROOT = Path(__file__).resolve().parent.parent


def write_policy(directory: Path, text: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "model.conf").write_text(CANONICAL_MODEL)
    (directory / "policy.csv").write_text(text)


def with_reads(text: str, shape: Shape, rng: random.Random) -> str:
    extra = []
    for n in range(shape.rules // 50):
        team, ns = rng.randrange(shape.teams), rng.randrange(shape.namespaces)
        table = f"icegov.ns{ns}.t{rng.randrange(20)}"
        extra.append((f"p, team{team}, {table}.ssn, SELECT, deny",
                      f"p, team{team}, {table}.email, SELECT, mask:show-last-4",
                      f"p, team{team}, {table}, SELECT, filter:region = 'r{n % 7}'")[n % 3])
    return text + "\n".join(extra) + "\n"


def changed(text: str, shape: Shape, rng: random.Random) -> str:
    lines = text.splitlines()
    rules = [i for i, line in enumerate(lines) if line.startswith("p, team")]
    dropped = set(rng.sample(rules, max(1, len(rules) // 100)))
    kept = [line for i, line in enumerate(lines) if i not in dropped]
    kept += [f"p, team{rng.randrange(shape.teams)}, icegov.ns{rng.randrange(shape.namespaces)}"
             f".t{rng.randrange(20)}, DELETE, allow" for _ in dropped]
    kept += ["g, team0, team1", "g, team2, auditors"]
    return "\n".join(kept) + "\n"


def people(shape: Shape, rng: random.Random, count: int) -> dict[str, tuple[str, ...]]:
    return {f"user{i}": tuple(sorted({f"team{rng.randrange(shape.teams)}"
                                      for _ in range(rng.randint(1, 3))}))
            for i in range(count)}


def write_audit(path: Path, count: int, shape: Shape, who: dict[str, tuple[str, ...]],
                rng: random.Random, policy: CompiledPolicy) -> None:
    """The policy's load record first (as icegov writes it at start-up: both files' text),
    then ``count`` decisions, each naming that policy's digest."""
    names = list(who)
    digest = policy.files.digest
    actions = ("SELECT", "DESCRIBE", "INSERT", "DELETE", "LIST")
    prev = "0" * 64
    with path.open("w") as handle:
        loaded = policy_record(PolicyChange(1, None, policy.files)).to_event()
        handle.write(json.dumps({**loaded, "event": "audit", "schema": "icegov.audit/2",
                                 "seq": 0, "prev": prev}, sort_keys=True,
                                separators=(",", ":")) + "\n")
        for seq in range(1, count + 1):
            name = names[rng.randrange(len(names))]
            table = f"icegov.ns{rng.randrange(shape.namespaces)}.t{rng.randrange(20)}"
            action = actions[rng.randrange(5)]
            allowed = rng.random() < 0.8
            record = _record(seq, prev, name, who[name], table, action, allowed)
            record["policy_digest"] = digest
            line = json.dumps(record, sort_keys=True, separators=(",", ":"))
            prev = hashlib.sha256(line.encode()).hexdigest() if seq % 1000 == 0 else prev
            handle.write(line[:-1] + f',"hash":"{prev}"}}\n')


def _record(seq: int, prev: str, name: str, roles: tuple[str, ...], table: str, action: str,
            allowed: bool) -> dict[str, Any]:
    moment = START + timedelta(milliseconds=seq * 50)
    return {"actions": [action], "auth": "token",
            "client": {"user_agent": "spark/3.5", "version": "1.6"},
            "decision": "allow" if allowed else "deny", "endpoint": "load_table",
            "error": None, "event": "audit", "evidence": [], "latency_ms": 1.234,
            "method": "GET", "new_snapshot_ids": [], "path": "/v1/cat/namespaces/x/tables/t",
            "prev": prev, "principal": name, "replayed": False, "request_id": f"req-{seq}",
            "resources": [table], "roles": list(roles),
            "rules": [{"action": action, "allowed": allowed, "resource": table, "rule": None}],
            "schema": "icegov.audit/2", "seq": seq, "status": 200 if allowed else 403,
            "time": moment.isoformat(timespec="milliseconds")}


def timed(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    best, result = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rules", type=int, default=10_000)
    parser.add_argument("--principals", type=int, default=2_000)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    rng = random.Random(24)
    shape = Shape(args.rules)
    with tempfile.TemporaryDirectory(prefix="icegov-policy-tools-") as tmp:
        work = Path(tmp)
        text = with_reads(policy_text(shape, rng), shape, rng)
        write_policy(work / "old", text)
        write_policy(work / "new", changed(text, shape, rng))
        who = people(shape, rng, args.principals)
        audit = work / "audit.log"
        start = time.perf_counter()
        write_audit(audit, args.records, shape, who, rng,
                    load(work / "old" / "model.conf", work / "old" / "policy.csv"))
        print(f"generated {args.records} records ({audit.stat().st_size / 1e6:.0f} MB) in "
              f"{time.perf_counter() - start:.1f} s", file=sys.stderr)
        rows = measure(work, audit, who, args)
    print("| tool | input | result | wall (s) |\n|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


def measure(work: Path, audit: Path, who: dict[str, tuple[str, ...]],
            args: argparse.Namespace) -> list[tuple[str, str, str, str]]:
    def policy(name: str) -> CompiledPolicy:
        return load(work / name / "model.conf", work / name / "policy.csv")

    old = policy("old")
    rules = len(old.parsed.rules) + len(old.parsed.restrictions)
    size = f"{rules} rules, {len(who)} principals"
    records = f"{args.records:,} records"
    rows = []
    load_s, _ = timed(lambda: policy("old"), args.repeat)
    rows.append(("load + compile the policy", size, "", f"{load_s:.2f}"))
    table = resource_from_text("icegov.ns3.t1")

    def ask() -> int:
        compiled = policy("old")
        return len(who_can(compiled, Action.SELECT, table, candidates(compiled, who)))

    seconds, answers = timed(ask, args.repeat)
    rows.append(("who-can SELECT icegov.ns3.t1", size, f"{answers} allowed", f"{seconds:.2f}"))

    def diff() -> Any:
        before, after = policy("old"), policy("new")
        among = merged(candidates(before, {}), candidates(after, who))
        return before, after, diff_policies(before, after, among)

    seconds, (before, after, found) = timed(diff, args.repeat)
    rows.append(("diff (1% of lines changed, 2 grants)", size,
                 f"{len(found.gained)} gained, {len(found.lost)} lost", f"{seconds:.2f}"))
    seconds, flipped = timed(lambda: sum(1 for _ in flips(
        before, after, found.touched, raw_lines([audit]))), args.repeat)
    rows.append(("diff --audit: decisions that flip", records, f"{flipped} flip",
                 f"{seconds:.2f}"))
    seconds, printed = timed(lambda: cli_diff(work, audit, who), args.repeat)
    rows.append(("diff --audit end to end (as the CLI runs it)", f"{size}, {records}",
                 printed, f"{seconds:.2f}"))
    last = f"req-{args.records}"
    seconds, trace = timed(lambda: replay(find_record(last, raw_lines([audit])) or {},
                                          policy("old")), args.repeat)
    rows.append(("why (the last record)", records, f"{len(trace)} decision replayed",
                 f"{seconds:.2f}"))
    seconds, said = timed(lambda: cli_why(work, audit, last), args.repeat)
    rows.append(("why end to end (as the CLI runs it: the policy from the trail)",
                 f"{size}, {records}", said, f"{seconds:.2f}"))
    rows += queries(audit, records, next(iter(who)), args.repeat)
    return rows


def cli_diff(work: Path, audit: Path, who: dict[str, tuple[str, ...]]) -> str:
    """``icegov policy diff OLD NEW --audit FILE --principals FILE`` in a process of its own
    (start-up, imports, loading, the diff, the audit pass and printing all included): what it
    printed, in short."""
    principals = work / "principals.yaml"
    if not principals.exists():
        entries = [{"name": name, "roles": list(roles), "secret_hash": _SECRET_HASH}
                   for name, roles in who.items()]
        principals.write_text(json.dumps({"principals": entries}))  # JSON is YAML
    output = work / "diff.out"
    with output.open("wb") as handle:
        subprocess.run([sys.executable, "-m", "proxy.cli", "policy", "diff", "--principals",
                        str(principals), str(work / "old"), str(work / "new"), "--audit",
                        str(audit)], stdout=handle, check=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    counts = dict(line.rsplit(": ", 1) for line in output.read_text().splitlines()
                  if line.startswith(("grants", "logged")))
    return (f"{counts['grants gained']} gained, {counts['grants lost']} lost, "
            f"{counts['logged decisions that flip']} flip")


def cli_why(work: Path, audit: Path, request_id: str) -> str:
    """``icegov policy why REQUEST_ID --audit FILE`` in a process of its own, given the *new*
    policy files: it must replay against the old policy the trail recorded (compiled from the
    trail's text). What it said, in short."""
    done = subprocess.run([sys.executable, "-m", "proxy.cli", "policy", "why", "--model",
                           str(work / "new" / "model.conf"), "--policy",
                           str(work / "new" / "policy.csv"), request_id, "--audit", str(audit)],
                          capture_output=True, text=True, check=False,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    # exit 1 is a replay that differs: the generated verdicts are random, not the policy's
    if done.returncode not in (0, 1) or "as the audit trail recorded it" not in done.stdout:
        raise SystemExit(f"why failed ({done.returncode}): {done.stdout}{done.stderr}")
    return "replayed against the trail's policy, " + (
        "agrees" if "replay agrees" in done.stdout else "differs")


_SECRET_HASH = ("scrypt$16384$8$1$5HYV9l70NuNdR14/9scNDg==$"
                "0Jvkj6rzvqwnLqVlvU34h+I+ZvmMfCDVw4Z4lyidmu0=")


def queries(audit: Path, records: str, name: str,
            repeat: int) -> list[tuple[str, str, str, str]]:
    since = START + timedelta(hours=6)
    cases = {f"query --principal {name}": Query(principals=(name,)),
             "query --decision deny --action DELETE": Query(decisions=("deny",),
                                                            actions=("DELETE",)),
             "query --table icegov.ns3.t1": Query(tables=("icegov.ns3.t1",)),
             "query --since/--until (1 h)": Query(since=since,
                                                  until=since + timedelta(hours=1))}
    rows = []
    for title, query in cases.items():
        seconds, count = timed(lambda q=query: sum(1 for _ in q.run(raw_lines([audit]))),
                               repeat)
        rows.append((title, records, f"{count} match", f"{seconds:.2f}"))
    return rows


if __name__ == "__main__":
    main()
