"""Policy decision latency with 10, 1k and 10k rules: the compiled index, and Casbin for scale.

Each policy is a realistic mix: teams (roles) holding READ on their namespaces, INSERT/DELETE on
some tables, denies on a few sensitive tables, BROWSE on the catalog, role-to-role ``g`` lines,
inner wildcards, and a few global rules. Principals carry one to three roles from their token.

Measured per call (``perf_counter_ns``), over distinct requests:

* decide, cache miss: every request is new to the decision cache (principal subjects cached, as
  they are after a principal's first request);
* decide, cache hit: the same requests again;
* can_see, cache miss: namespaces and tables, each asked once;
* Casbin: ``casbin.Enforcer.enforce`` on the same model and rules (its linear scan), fewer samples.

Run: ``python benchmarks/policy.py [--requests N]``. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from proxy.governance import Action, Principal
from proxy.policy import PolicyAuthorizer, PolicySettings
from proxy.policy.model import CANONICAL_MODEL, reference_enforcer
from proxy.resources import Resource

SIZES = (10, 1_000, 10_000)
DATA_ACTIONS = (Action.SELECT, Action.INSERT, Action.DELETE, Action.DESCRIBE, Action.LIST)


@dataclass(frozen=True)
class Shape:
    """How big the world is for a policy of ``rules`` rules."""

    rules: int

    @property
    def teams(self) -> int:
        return max(2, self.rules // 8)

    @property
    def namespaces(self) -> int:
        return max(2, self.rules // 4)


def policy_text(shape: Shape, rng: random.Random) -> str:
    """About ``shape.rules`` p lines plus g lines, in a realistic mix."""
    lines = ["p, admin, *, *, allow", "p, auditors, *, READ, allow",
             "p, contractors, icegov.*.payroll, *, deny"]
    for team in range(shape.teams):
        lines.append(f"g, team{team}, everyone")
    lines.append("p, everyone, icegov, BROWSE, allow")
    while len([x for x in lines if x.startswith("p")]) < shape.rules:
        lines.append(_team_rule(shape, rng))
    return "\n".join(lines[: shape.rules + shape.teams]) + "\n"


def _team_rule(shape: Shape, rng: random.Random) -> str:
    team, ns = rng.randrange(shape.teams), rng.randrange(shape.namespaces)
    kind = rng.random()
    if kind < 0.4:
        return f"p, team{team}, icegov.ns{ns}.*, READ, allow"
    if kind < 0.55:
        return f"p, team{team}, icegov.ns{ns}, BROWSE, allow"
    if kind < 0.8:
        action = rng.choice(("INSERT", "DELETE", "WRITE"))
        return f"p, team{team}, icegov.ns{ns}.t{rng.randrange(20)}, {action}, allow"
    if kind < 0.9:
        return f"p, team{team}, icegov.ns{ns}.secret{rng.randrange(5)}, *, deny"
    return f"p, user{rng.randrange(shape.teams * 4)}, icegov.ns{ns}.t{rng.randrange(20)}, " \
           "SELECT, allow"


def principals(shape: Shape, rng: random.Random, count: int) -> list[Principal]:
    people = []
    for i in range(count):
        roles = {f"team{rng.randrange(shape.teams)}" for _ in range(rng.randint(1, 3))}
        if rng.random() < 0.05:
            roles.add("contractors")
        people.append(Principal(f"user{i}", tuple(sorted(roles))))
    return people


Request = tuple[Principal, Action, Resource]


def requests(shape: Shape, rng: random.Random, count: int) -> list[Request]:
    people = principals(shape, rng, 200)
    seen: set[Request] = set()
    while len(seen) < count:
        ns = rng.randrange(shape.namespaces)
        table = rng.choice((f"t{rng.randrange(20)}", f"secret{rng.randrange(5)}", "payroll"))
        seen.add((rng.choice(people), rng.choice(DATA_ACTIONS),
                  Resource("icegov", (f"ns{ns}",), table)))
    return list(seen)


def timed(calls: Sequence[tuple[Any, ...]], fn: Callable[..., Any]) -> list[float]:
    """Microseconds per call."""
    samples = []
    for args in calls:
        start = time.perf_counter_ns()
        fn(*args)
        samples.append((time.perf_counter_ns() - start) / 1000)
    return samples


def pct(samples: list[float], q: int) -> float:
    return statistics.quantiles(samples, n=100)[q - 1]


def measure(size: int, count: int, workdir: Path) -> dict[str, Any]:
    rng = random.Random(size)
    shape = Shape(size)
    (workdir / "model.conf").write_text(CANONICAL_MODEL)
    (workdir / "policy.csv").write_text(policy_text(shape, rng))
    settings = PolicySettings(model_path=workdir / "model.conf",
                              policy_path=workdir / "policy.csv", decision_cache_size=count * 2)
    start = time.perf_counter()
    auth = PolicyAuthorizer.from_settings(settings)
    load_ms = (time.perf_counter() - start) * 1000
    calls = requests(shape, rng, count)
    for principal, _, _ in calls:
        auth.can_see(principal, Resource("warm-up: subjects cached"))
    miss, hit = timed(calls, auth.decide), timed(calls, auth.decide)
    namespaces = {(p, Resource(r.catalog, r.namespace)) for p, _, r in calls}
    targets = namespaces | {(p, r) for p, _, r in calls}
    see = timed(sorted(targets, key=str)[:count], auth.can_see)
    enforcer = reference_enforcer(CANONICAL_MODEL, auth.policy.parsed)
    sample = calls[: max(20, 2000 // max(1, size // 10))]
    casbin = timed([(p.roles[0], str(r), a.value) for p, a, r in sample], enforcer.enforce)
    return {"rules": auth.status.rules, "grants": auth.status.grants, "load_ms": load_ms,
            "miss": miss, "hit": hit, "see": see, "casbin": casbin}


def table(results: list[dict[str, Any]]) -> str:
    rows = ["| rules (g lines) | load ms | decide miss p50 / p99 µs | decide hit p50 / p99 µs "
            "| can_see miss p50 / p99 µs | Casbin enforce p50 µs |",
            "|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        rows.append(f"| {r['rules']} ({r['grants']}) | {r['load_ms']:.1f} "
                    f"| {pct(r['miss'], 50):.1f} / {pct(r['miss'], 99):.1f} "
                    f"| {pct(r['hit'], 50):.2f} / {pct(r['hit'], 99):.2f} "
                    f"| {pct(r['see'], 50):.1f} / {pct(r['see'], 99):.1f} "
                    f"| {pct(r['casbin'], 50):,.0f} |")
    by_size = {r["rules"]: r for r in results}
    big, mid = results[-1], results[-2]
    rows.append("")
    rows.append(f"10k/1k p50 ratio: decide miss {pct(big['miss'], 50) / pct(mid['miss'], 50):.2f}, "
                f"decide hit {pct(big['hit'], 50) / pct(mid['hit'], 50):.2f}, "
                f"can_see miss {pct(big['see'], 50) / pct(mid['see'], 50):.2f}, "
                f"Casbin {pct(big['casbin'], 50) / pct(mid['casbin'], 50):.1f} "
                f"(sizes {sorted(by_size)})")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20_000, help="distinct requests per size")
    args = parser.parse_args()
    results = []
    for size in SIZES:
        with tempfile.TemporaryDirectory() as workdir:
            results.append(measure(size, args.requests, Path(workdir)))
    print(table(results))


if __name__ == "__main__":
    main()
