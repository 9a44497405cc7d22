"""Hot reload: a new version takes over, an invalid or same-version file is rejected."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gate_svc.policy import PolicyError, parse_policy
from gate_svc.policy_store import PolicyStore

V1 = 'version: "v1"\npolicy: seed000\n'
V2 = 'version: "v2"\npolicy: seed001\n'


def _poll(store: PolicyStore) -> None:
    """Two polls: a changed file is taken once a second poll reads it unchanged."""
    store.reload_now()
    store.reload_now()


def test_a_new_version_replaces_the_active_one(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(V1)
    events: list[tuple[str, str, str]] = []
    store = PolicyStore(path, on_reload=lambda *e: events.append(e))
    assert store.active.config.version == "v1"
    _poll(store)
    assert events == []  # unchanged file: nothing happens
    path.write_text(V2)
    _poll(store)
    assert (store.active.config.version, store.active.config.policy) == ("v2", "seed001")
    assert events == [("active", "success", "v2")]


@pytest.mark.parametrize(
    "text", ["version: v3\npolicy: nope\n", "not: [valid", 'version: "v1"\npolicy: seed003\n']
)
def test_invalid_or_same_version_files_are_rejected_and_the_old_one_keeps_serving(
    tmp_path: Path, text: str
) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(V1)
    events: list[tuple[str, str, str]] = []
    store = PolicyStore(path, on_reload=lambda *e: events.append(e))
    path.write_text(text)
    _poll(store)
    assert store.active.config.version == "v1" and store.active.config.policy == "seed000"
    assert events == [("active", "failure", "v1")]


def test_a_bad_file_is_reported_once_and_flagged_until_it_is_fixed(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(V1)
    events: list[tuple[str, str, str]] = []
    store = PolicyStore(path, on_reload=lambda *e: events.append(e))
    assert not store.rejected("active")
    path.write_text("not: [valid")
    for _ in range(3):
        _poll(store)
    assert events == [("active", "failure", "v1")]
    assert store.rejected("active")
    path.write_text("still: [not valid")  # another bad file is news
    _poll(store)
    assert events[-1] == ("active", "failure", "v1") and len(events) == 2
    path.write_text(V1)  # put back: nothing to load, nothing rejected
    _poll(store)
    assert not store.rejected("active") and len(events) == 2


def test_a_version_names_one_content_and_a_rollback_to_it_loads(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(V1)
    events: list[tuple[str, str, str]] = []
    store = PolicyStore(path, on_reload=lambda *e: events.append(e))
    path.write_text(V2)
    _poll(store)
    path.write_text('version: "v1"\npolicy: seed003\n')  # v1's name, other thresholds
    _poll(store)
    assert store.active.config.version == "v2" and store.rejected("active")
    path.write_text(V1)  # the real v1: a rollback
    _poll(store)
    assert (store.active.config.version, store.active.config.policy) == ("v1", "seed000")
    assert events == [
        ("active", "success", "v2"),
        ("active", "failure", "v2"),
        ("active", "success", "v1"),
    ]


def test_a_configmap_style_symlink_swap_is_picked_up(tmp_path: Path) -> None:
    # Kubernetes: policy.yaml -> ..data/policy.yaml, ..data -> ..2026_11_22_v1 (swapped atomically)
    for name, text in (("..v1", V1), ("..v2", V2)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "policy.yaml").write_text(text)
    os.symlink("..v1", tmp_path / "..data")
    os.symlink("..data/policy.yaml", tmp_path / "policy.yaml")
    store = PolicyStore(tmp_path / "policy.yaml")
    assert store.active.config.version == "v1"
    os.symlink("..v2", tmp_path / "..data_tmp")
    os.replace(tmp_path / "..data_tmp", tmp_path / "..data")
    _poll(store)
    assert store.active.config.version == "v2"


def test_an_invalid_file_at_start_up_is_fatal(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text("version: 1.10\n")
    with pytest.raises(PolicyError, match="quoted string"):
        PolicyStore(path)


def test_shadow_is_loaded_and_reloaded_separately(tmp_path: Path) -> None:
    active, shadow = tmp_path / "a.yaml", tmp_path / "s.yaml"
    active.write_text(V1)
    shadow.write_text(V2)
    store = PolicyStore(active, shadow)
    assert store.shadow is not None and store.shadow.config.version == "v2"
    shadow.write_text('version: "v3"\npolicy: seed003\n')
    _poll(store)
    assert store.shadow.config.version == "v3" and store.active.config.version == "v1"


BOUND = (
    "version: {v}\npolicy: calibrated\ncalibrated:\n  bias: 0.0\n  reader_model: {m}\n"
    "  coefficients: {{reader: 2.0, top_cosine: 1.0}}\n"
)


def _reader_check(digest: str | None):  # type: ignore[no-untyped-def]
    from gate_svc.policy import reader_mismatch

    return lambda config: reader_mismatch(config, digest)


def test_a_config_fitted_on_another_reader_is_fatal_at_start_up(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(BOUND.format(v="b1", m="aaaa"))
    with pytest.raises(PolicyError, match=r"reader_model is aaaa but this gate runs .* bbbb"):
        PolicyStore(path, check=_reader_check("bbbb"))
    # The same file runs beside the reader it was fitted on, and where no reader runs (the
    # decision then falls back and says so) the binding has nothing to compare.
    assert PolicyStore(path, check=_reader_check("aaaa")).active.config.version == "b1"
    assert PolicyStore(path, check=_reader_check(None)).active.config.version == "b1"


def test_a_reload_fitted_on_another_reader_is_rejected_and_the_old_one_keeps_serving(
    tmp_path: Path,
) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(BOUND.format(v="b1", m="aaaa"))
    events: list[tuple[str, str, str]] = []
    store = PolicyStore(path, on_reload=lambda *e: events.append(e), check=_reader_check("aaaa"))
    # A tenant override fitted on another reader is caught like the top-level model.
    tenant = "tenants:\n  acme:\n" + "".join(
        "    " + line + "\n" for line in BOUND.format(v="t1", m="cccc").splitlines()[1:]
    )
    path.write_text(BOUND.format(v="b2", m="aaaa") + tenant)
    assert "tenants.acme.calibrated.reader_model is cccc" in str(
        _reader_check("aaaa")(parse_policy(path.read_text()))
    )
    _poll(store)
    assert store.active.config.version == "b1"
    assert events == [("active", "failure", "b1")]
    # A config that does not weigh the reader is not bound to one.
    path.write_text(V2)
    _poll(store)
    assert store.active.config.version == "v2"


@pytest.mark.parametrize(
    "data",
    [
        'version: "v9"\npolicy: seed000\nrefusal_messages: {fr: "Je n\xe9 sais pas"}\n'.encode(
            "latin-1"
        ),
        b'version: "v9"\npolicy: calibrated\ncalibrated: {log_features: [[top_bm25]]}\n',
        b'version: "v9"\nmax_evidence: ' + b"9" * 400 + b"\n",
        b'version: "v9"\nx: ' + b"[" * 5000 + b"]" * 5000 + b"\n",
    ],
    ids=["latin-1", "nested-list", "400-digits", "deep"],
)
def test_a_file_the_parser_chokes_on_is_rejected_and_the_watch_goes_on(
    tmp_path: Path, data: bytes
) -> None:
    # Each raised past the rejection (UnicodeDecodeError, TypeError, OverflowError,
    # RecursionError) and ended the watcher: no later file was ever loaded, nothing said so.
    path = tmp_path / "policy.yaml"
    path.write_text(V1)
    events: list[tuple[str, str, str]] = []
    store = PolicyStore(path, on_reload=lambda *e: events.append(e))
    path.write_bytes(data)
    _poll(store)
    assert events == [("active", "failure", "v1")] and store.rejected("active")
    path.write_text(V2)
    _poll(store)
    assert store.active.config.version == "v2"


def test_a_rejected_file_is_not_parsed_again_until_it_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A 1 MiB file re-parsed on every 2 s poll took most of a core for as long as it stayed.
    from gate_svc import policy_store

    path = tmp_path / "policy.yaml"
    path.write_text(V1)
    store = PolicyStore(path)
    parsed: list[str] = []
    real = policy_store.parse_policy
    monkeypatch.setattr(policy_store, "parse_policy", lambda t: parsed.append(t) or real(t))
    path.write_text("version: v3\npolicy: nope\n")
    for _ in range(5):
        _poll(store)
    assert len(parsed) == 1 and store.rejected("active")


def test_a_file_read_half_written_is_not_loaded_and_the_whole_one_is(tmp_path: Path) -> None:
    # Read mid-write, a prefix of a config is often valid YAML on its own: it ran with the
    # bounds it had not reached yet, claimed its version, and the finished file was refused
    # as "version already names other content" until the gate restarted.
    path = tmp_path / "policy.yaml"
    path.write_text(V1)
    events: list[tuple[str, str, str]] = []
    store = PolicyStore(path, on_reload=lambda *e: events.append(e))
    whole = 'version: "v2"\npolicy: seed000\nseed000:\n  answer_gate: 55.0\n'
    path.write_text(whole[: whole.index("seed000:")])  # valid YAML, v2 with default bounds
    store.reload_now()
    assert store.active.config.version == "v1" and events == []
    path.write_text(whole)  # the writer finishes before the next poll
    store.reload_now()
    assert store.active.config.version == "v1"  # changed since the last poll: not settled
    store.reload_now()
    assert store.active.config.version == "v2"
    assert store.active.config.seed000.answer_gate == 55.0
    assert events == [("active", "success", "v2")]


def test_two_polls_must_read_the_file_in_a_row(tmp_path: Path) -> None:
    # Seen, then unreadable for a poll, then seen again: not two readings in a row.
    path = tmp_path / "policy.yaml"
    path.write_text(V1)
    store = PolicyStore(path)
    path.write_text(V2)
    store.reload_now()
    path.unlink()
    store.reload_now()
    path.write_text(V2)
    store.reload_now()
    assert store.active.config.version == "v1"
    store.reload_now()
    assert store.active.config.version == "v2"
