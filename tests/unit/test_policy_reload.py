"""Loading, validation, decision caching and hot reload of the policy files."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from proxy.governance import Action, Principal
from proxy.policy import PolicyAuthorizer, PolicyError, PolicySettings
from proxy.policy.model import CANONICAL_MODEL
from proxy.resources import Resource

WRITER = Principal("w", ("writer",))
RESOURCE = Resource("icegov", ("demo",), "t")
ALLOW_INSERT = "p, writer, icegov.demo.*, INSERT, allow\n"
ALLOW_DELETE = "p, writer, icegov.demo.*, DELETE, allow\n"


@pytest.fixture
def settings(tmp_path: Path) -> PolicySettings:
    (tmp_path / "model.conf").write_text(CANONICAL_MODEL)
    (tmp_path / "policy.csv").write_text(ALLOW_INSERT)
    return PolicySettings(model_path=tmp_path / "model.conf", policy_path=tmp_path / "policy.csv",
                          reload_interval_seconds=0.01)


def rewrite(path: Path, text: str) -> None:
    """Change a file so that even a same-size rewrite within one mtime tick is a change."""
    path.write_text(text)
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))


def test_the_repository_policy_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(Path(__file__).parents[2])
    auth = PolicyAuthorizer.from_settings(PolicySettings())
    assert auth.decide(Principal("writer", ("writer",)), Action.INSERT,
                         Resource("icegov", ("demo",), "x")).allowed
    assert auth.status.generation == 1
    assert auth.status.last_error is None


@pytest.mark.parametrize(("policy", "message"), [
    ("p, writer, icegov.demo.*, SLECT, allow\n", "unknown action 'SLECT'"),
    ("p, writer, icegov.demo.*, INSERT, permit\n", "unknown effect 'permit'"),
    ("p, writer, icegov.demo.*, INSERT\n", "4 fields"),
    ("g, writer\np, a, *, *, allow\n", "2 fields"),
    ("x, writer, a, b, c\n", "unknown line type 'x'"),
    ("p, writer, icegov..t, INSERT, allow\n", "empty segment"),
    ("p, writer, icegov.demo_*, INSERT, allow\n", "whole segment"),
    ('p, writer, icegov."demo.*, INSERT, allow\n', "unbalanced double quote"),
    ('p, writer, icegov."demo"x.*, INSERT, allow\n', "closing quote must end its segment"),
    ('p, writer, icegov."..".*, INSERT, allow\n', "is not a name"),
    ('p, writer, icegov."a/b".*, INSERT, allow\n', "not allowed in names"),
    ("p, writer, icegov.my demo.*, INSERT, allow\n", "must be double-quoted"),
    ("p, *, icegov.demo.*, INSERT, allow\n", "'*' is not a subject"),
    ("p, writer, icegov.demo.*, INSERT, allow", "does not end with a newline"),
    ("", "has no 'p' rules"),
    ("# only a comment\ng, a, b\n", "has no 'p' rules"),
])
def test_invalid_policies_are_rejected_at_start(settings: PolicySettings, policy: str,
                                                message: str) -> None:
    settings.policy_path.write_text(policy)
    with pytest.raises(PolicyError, match=message) as raised:
        PolicyAuthorizer.from_settings(settings)
    assert raised.value.problems[0].source == str(settings.policy_path)


def test_problems_name_their_line(settings: PolicySettings) -> None:
    settings.policy_path.write_text("# header\n" + ALLOW_INSERT + "p, a, b, NOPE, allow\n")
    with pytest.raises(PolicyError) as raised:
        PolicyAuthorizer.from_settings(settings)
    assert [p.line for p in raised.value.problems] == [3]
    assert str(raised.value.problems[0]).startswith(f"{settings.policy_path}:3: error:")


@pytest.mark.parametrize("model", [
    CANONICAL_MODEL.replace("!some(where (p.eft == deny))", "true"),
    CANONICAL_MODEL.replace("resourceMatch(r.obj, p.obj, p.eft)", "r.obj == p.obj"),
    CANONICAL_MODEL.replace("[role_definition]\ng = _, _\n", ""),
    CANONICAL_MODEL + "\n[matchers]\nm2 = true\n",
    CANONICAL_MODEL[: len(CANONICAL_MODEL) // 2],  # truncated
])
def test_a_model_other_than_icegovs_is_rejected(settings: PolicySettings, model: str) -> None:
    settings.model_path.write_text(model)
    with pytest.raises(PolicyError):
        PolicyAuthorizer.from_settings(settings)


def test_comments_and_spacing_in_the_model_are_fine(settings: PolicySettings) -> None:
    spaced = CANONICAL_MODEL.replace(" = ", "=").replace("[matchers]", "# note\n[matchers]")
    settings.model_path.write_text(spaced)
    PolicyAuthorizer.from_settings(settings)


def test_unchanged_files_do_not_reload(settings: PolicySettings) -> None:
    auth = PolicyAuthorizer.from_settings(settings)
    assert not auth.reload_if_changed()
    os.utime(settings.policy_path)  # touched, same content
    assert not auth.reload_if_changed()
    assert auth.status.generation == 1


def test_a_changed_policy_is_hot_reloaded(settings: PolicySettings) -> None:
    auth = PolicyAuthorizer.from_settings(settings)
    before = auth.status
    assert not auth.decide(WRITER, Action.DELETE, RESOURCE).allowed
    rewrite(settings.policy_path, ALLOW_DELETE)
    assert auth.reload_if_changed()
    assert auth.decide(WRITER, Action.DELETE, RESOURCE).allowed
    assert not auth.decide(WRITER, Action.INSERT, RESOURCE).allowed
    assert auth.status.generation == before.generation + 1
    assert auth.status.loaded_at >= before.loaded_at
    assert auth.status.digest != before.digest


def test_a_changed_model_is_noticed(settings: PolicySettings) -> None:
    auth = PolicyAuthorizer.from_settings(settings)
    rewrite(settings.model_path, "# a comment\n" + CANONICAL_MODEL)
    assert auth.reload_if_changed()
    assert auth.status.generation == 2


def test_cached_decisions_do_not_survive_a_reload(settings: PolicySettings) -> None:
    auth = PolicyAuthorizer.from_settings(settings)
    assert auth.decide(WRITER, Action.INSERT, RESOURCE).allowed
    assert auth.decide(WRITER, Action.INSERT, RESOURCE).allowed
    assert auth.can_see(WRITER, RESOURCE)
    assert auth.cache_info()["hits"] == 1
    rewrite(settings.policy_path, "p, writer, icegov.other.*, INSERT, allow\n")
    assert auth.reload_if_changed()
    assert auth.cache_info() == {"hits": 0, "misses": 0, "size": 0}
    assert not auth.decide(WRITER, Action.INSERT, RESOURCE).allowed
    assert not auth.can_see(WRITER, RESOURCE)


def test_the_cache_is_bounded(settings: PolicySettings) -> None:
    auth = PolicyAuthorizer.from_settings(settings.model_copy(update={"decision_cache_size": 8}))
    for i in range(50):
        auth.decide(WRITER, Action.INSERT, Resource("icegov", ("demo",), f"t{i}"))
    assert auth.cache_info()["size"] == 8


def test_a_broken_policy_keeps_the_last_good_one(settings: PolicySettings) -> None:
    auth = PolicyAuthorizer.from_settings(settings)
    with capture_logs() as logs:
        rewrite(settings.policy_path, ALLOW_DELETE + "p, writer, icegov.demo.*, SLECT, allow\n")
        assert not auth.reload_if_changed()
        assert not auth.reload_if_changed()  # reported once, not on every poll
    assert auth.decide(WRITER, Action.INSERT, RESOURCE).allowed  # the old policy
    assert not auth.decide(WRITER, Action.DELETE, RESOURCE).allowed
    status = auth.status
    assert status.generation == 1
    assert status.last_error is not None and "unknown action 'SLECT'" in status.last_error
    assert status.last_error_at is not None
    warnings = [entry for entry in logs if entry["log_level"] == "warning"]
    assert [entry["event"] for entry in warnings] == ["policy.reload_failed"]
    assert "SLECT" in warnings[0]["error"]

    rewrite(settings.policy_path, ALLOW_DELETE)  # fixed
    assert auth.reload_if_changed()
    assert auth.status.last_error is None
    assert auth.status.generation == 2


def test_reverting_a_broken_file_clears_the_error(settings: PolicySettings) -> None:
    auth = PolicyAuthorizer.from_settings(settings)
    rewrite(settings.policy_path, "garbage\n")
    assert not auth.reload_if_changed()
    assert auth.status.last_error is not None
    rewrite(settings.policy_path, ALLOW_INSERT)  # back to what is in force
    assert not auth.reload_if_changed()
    assert auth.status.last_error is None
    assert auth.status.generation == 1


@pytest.mark.parametrize("cut", [
    0,  # truncated to nothing: the moment between open(O_TRUNC) and write()
    len("p, writer, icegov.demo.*, DELETE, al"),  # mid-line
    len("p, writer, icegov.demo.*, DELETE, allow"),  # a whole line, but no newline yet
    len(ALLOW_DELETE + "g, writer, team"),  # a g line cut inside its role name
])
def test_a_partially_written_file_is_never_loaded(settings: PolicySettings, cut: int) -> None:
    auth = PolicyAuthorizer.from_settings(settings)
    full = ALLOW_DELETE + "g, writer, teamwork\np, teamwork, icegov.*, LIST, allow\n"
    rewrite(settings.policy_path, full[:cut])
    assert not auth.reload_if_changed()
    assert auth.decide(WRITER, Action.INSERT, RESOURCE).allowed  # still the old policy
    assert auth.status.generation == 1
    rewrite(settings.policy_path, full)  # the writer finishes
    assert auth.reload_if_changed()
    assert auth.decide(WRITER, Action.DELETE, RESOURCE).allowed


def test_an_atomic_rename_is_picked_up(settings: PolicySettings) -> None:
    auth = PolicyAuthorizer.from_settings(settings)
    staged = settings.policy_path.with_suffix(".tmp")
    staged.write_text(ALLOW_DELETE)
    os.replace(staged, settings.policy_path)
    assert auth.reload_if_changed()
    assert auth.decide(WRITER, Action.DELETE, RESOURCE).allowed


def test_a_missing_file_keeps_the_last_good_policy(settings: PolicySettings) -> None:
    auth = PolicyAuthorizer.from_settings(settings)
    settings.policy_path.unlink()
    assert not auth.reload_if_changed()
    assert auth.decide(WRITER, Action.INSERT, RESOURCE).allowed
    assert auth.status.last_error is not None and "policy.csv" in auth.status.last_error


def test_the_status_is_json_ready(settings: PolicySettings) -> None:
    status = PolicyAuthorizer.from_settings(settings).status.as_dict()
    assert status["generation"] == 1 and status["rules"] == 1 and status["grants"] == 0
    assert status["last_error"] is None and isinstance(status["loaded_at"], float)


def test_the_background_watcher_reloads_and_stops(settings: PolicySettings) -> None:
    auth = PolicyAuthorizer.from_settings(settings)

    async def scenario() -> None:
        async with auth.watching():
            rewrite(settings.policy_path, ALLOW_DELETE)
            for _ in range(200):
                if auth.status.generation == 2:
                    break
                await asyncio.sleep(0.01)
        assert auth.status.generation == 2

    asyncio.run(asyncio.wait_for(scenario(), timeout=5))
    assert auth.decide(WRITER, Action.DELETE, RESOURCE).allowed


def test_watch_returns_when_stopped(settings: PolicySettings) -> None:
    auth = PolicyAuthorizer.from_settings(settings.model_copy(
        update={"reload_interval_seconds": 60}))

    async def scenario() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(auth.watch(stop))
        await asyncio.sleep(0)
        stop.set()
        await asyncio.wait_for(task, timeout=1)

    asyncio.run(scenario())
